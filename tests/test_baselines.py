"""The baselines' profiled cases made ahead on an empty cache: which cases, in which sessions, and
that a lab then finds each one cached under the key it looks for (real sessions need a GPU and
run in the GPU tests' class and repository runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.checks.counters import baselines, launched
from grader.checks.counters import ncu as counters
from grader.checks.counters.batch import Request, combined
from grader.checks.counters.ncu import CounterRun
from grader.host.gpu import GpuInfo, GpuProbe
from grader.isolation.build import baseline_library
from grader.isolation.launch import RunDirs
from grader.isolation.options import GradeOptions
from grader.labspec.labs import find_lab

H100 = GpuInfo("NVIDIA H100 80GB HBM3", (9, 0), "580.65", 0, "GPU-1111aaaa")


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """A GPU and a profiler as the module sees them; the sessions they would run, recorded."""
    monkeypatch.setattr(baselines, "probe_for", lambda options: GpuProbe(H100))
    real = baselines.toolchain.find
    monkeypatch.setattr(baselines.toolchain, "find", lambda name: Path("/usr/bin/true") if name == "ncu" else real(name))
    sessions: list[list[Request]] = []
    answer: dict[str, object] = {"settle": True}

    def profile_together(requests):
        sessions.append([r for r in requests])
        if not answer["settle"]:
            return {}
        return {(r.lab, r.key): CounterRun(values={**{m: 7.0 for m in r.metrics}, "other.sum": 1.0}, kernels=("k",))
                for r in requests}

    monkeypatch.setattr(baselines, "profile_together", profile_together)
    return GradeOptions(cache_dir=tmp_path / "cache"), sessions, answer


def test_every_uncached_baseline_case_is_profiled_once_in_one_session_per_kind_then_found_cached(fake_gpu, tmp_path):
    options, sessions, _ = fake_gpu
    spec = find_lab("corner_turning")
    assert baselines.profile_baselines([spec, spec], options) == 4
    # the counter case (instrumented metrics) for naive and reference, the timed case's traffic (DRAM bytes) for both
    assert len(sessions) == 2
    kinds = [{(r.lab.split()[1], r.key[2]) for r in session} for session in sessions]
    assert sorted(map(sorted, kinds)) == [[("naive", "filled"), ("reference", "filled")],
                                          [("naive", "generated"), ("reference", "generated")]]
    instrumented = next(s for s in sessions if s[0].key[2] == "generated")
    assert all(any(m.startswith("smsp__sass_") for m in r.metrics) for r in instrumented)
    traffic = next(s for s in sessions if s[0].key[2] == "filled")
    assert all(r.metrics == ("dram__bytes_read.sum", "dram__bytes_write.sum") for r in traffic)
    assert all(combined([r.isolation for r in s]).trusted for s in sessions)  # the session runs the grader's own code unconfined

    # a lab's own baseline run now finds each case under the key it computes, with its own metrics only
    profiles = launched.profiles_for(spec)
    for check in (c for c in profiles.checks if c.baseline):
        metrics = profiles.metrics[profiles.case(check)]
        library = baseline_library(spec, check.baseline, ("sm_90",), options.cache_dir)

        def no_task(check=check):
            raise AssertionError(f"{check.id} of {check.baseline} was profiled again")

        run = counters.profile(library, no_task, metrics, RunDirs(tmp_path / "i", tmp_path / "o"), 10, None,  # type: ignore[arg-type]
                               cache_key=counters.baseline_key(H100, metrics, check, spec), cache_dir=options.cache_dir)
        assert run.cached and run.values == {m: 7.0 for m in metrics}
    assert baselines.profile_baselines([spec], options) == 0 and len(sessions) == 2  # all cached: no session


def test_what_a_session_did_not_settle_is_left_to_the_lab(fake_gpu):
    options, sessions, answer = fake_gpu
    spec = find_lab("corner_turning")
    answer["settle"] = False
    assert baselines.profile_baselines([spec], options) == 4
    assert len(baselines.pending([spec], options, ("sm_90",), H100, options.cache_dir, None, options.cache_dir / "t")) == 4  # type: ignore[arg-type]


def test_nothing_is_profiled_ahead_without_counters_or_a_gpu(fake_gpu, monkeypatch):
    options, sessions, _ = fake_gpu
    spec = find_lab("corner_turning")
    assert baselines.profile_baselines([spec], GradeOptions(cache_dir=options.cache_dir, counters=False)) == 0
    monkeypatch.setattr(baselines, "probe_for", lambda options: GpuProbe(None, "no GPU"))
    assert baselines.profile_baselines([spec], options) == 0
    assert sessions == []


def test_a_baseline_that_cannot_be_built_leaves_the_others_to_be_profiled_ahead(fake_gpu, monkeypatch):
    options, sessions, _ = fake_gpu
    real = baselines.baseline_library

    def built(spec, name, *args):
        if name == "naive":
            raise RuntimeError("baseline 'naive' of lab corner_turning does not compile")
        return real(spec, name, *args)

    monkeypatch.setattr(baselines, "baseline_library", built)
    assert baselines.profile_baselines([find_lab("corner_turning")], options) == 2
    assert sorted(r.lab.split()[1] for s in sessions for r in s) == ["reference", "reference"]


def test_two_gradings_starting_together_on_one_gpu_profile_the_baselines_once(fake_gpu, monkeypatch, tmp_path):
    """Two seats of a GPU start their first students at once on an empty cache: the second waits
    under the GPU's baselines lock and finds every case made by the first."""
    import threading
    import time

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))  # (this test's own lock folder)
    monkeypatch.delenv("GRADER_LOCK_DIR", raising=False)
    options, sessions, _ = fake_gpu
    real = baselines.profile_together

    def slow(requests):
        time.sleep(0.3)  # a session takes a while: the other grading arrives meanwhile
        return real(requests)

    monkeypatch.setattr(baselines, "profile_together", slow)
    spec = find_lab("corner_turning")
    counts: list[int] = []
    seats = [threading.Thread(target=lambda: counts.append(baselines.profile_baselines([spec], options))) for _ in range(2)]
    for seat in seats:
        seat.start()
    for seat in seats:
        seat.join(30)
    assert sorted(counts) == [0, 4] and len(sessions) == 2
    assert (tmp_path / "home-cache" / "cuda-lab-grader" / "locks").is_dir()


def test_the_profiler_session_ahead_runs_only_where_the_replayer_will_not_count_the_baselines(monkeypatch, tmp_path):
    """With the replayer (the default) the baselines' cases are replayed ahead: no Nsight Compute
    session ahead; with `--counters ncu`, or where the replayer cannot be built, the session ahead
    runs as before."""
    from grader.checks.counters.replay import collect
    from grader.checks.families import counters as family

    calls: list[str] = []
    built: dict[str, Path | None] = {"replayer": tmp_path / "replay"}

    def no_process(*args):
        raise collect.service.ServiceError("not started here")  # (the replay ahead itself is tested in test_replayer)

    monkeypatch.setattr(collect, "probe_for", lambda options: GpuProbe(H100))
    monkeypatch.setattr(collect.service, "built", lambda archs, cache_dir: built["replayer"])
    monkeypatch.setattr(collect.service, "replayer_for", no_process)
    monkeypatch.setattr(family, "profile_baselines", lambda specs, options, progress: calls.append(options.counter_source))
    specs = [find_lab("corner_turning")]
    family.CounterFamily().ahead(specs, GradeOptions(cache_dir=tmp_path), print)
    assert calls == []
    family.CounterFamily().ahead(specs, GradeOptions(cache_dir=tmp_path, counter_source="ncu"), print)
    assert calls == ["ncu"]
    built["replayer"] = None
    family.CounterFamily().ahead(specs, GradeOptions(cache_dir=tmp_path), print)
    assert calls == ["ncu", "replay"]
