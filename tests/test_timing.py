"""The timing's parts that need no GPU: when sampling stops early, and when the timing gate is used."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from worker_replies import ok

from grader.checks import timing
from grader.isolation.options import GradeOptions
from grader.isolation.runner import TaskResult
from grader.labspec.labs import find_lab, lab_ids
from grader.worker.protocol import Kind


def test_a_kernel_far_slower_than_every_baseline_ends_the_sampling():
    from grader.checks.samples import TOO_SLOW_FACTOR, far_too_slow

    baselines = [[2.0, 2.1], [3.0, 2.9]]
    assert not far_too_slow(3.0 * TOO_SLOW_FACTOR - 0.1, baselines)
    assert far_too_slow(3.0 * TOO_SLOW_FACTOR + 0.1, baselines)
    assert not far_too_slow(1e9, [[], []])  # nothing to compare with yet


def test_a_pass_is_given_up_only_where_no_more_samples_could_bring_its_cv_under_the_limit():
    steady = [2.11, 2.12, 2.11, 2.10, 2.11, 2.12, 2.11, 2.11, 2.10, 2.11]
    disturbed = [2.11, 6.01, 6.17, 2.11, 2.12, 2.11, 2.10, 2.11, 2.12, 2.11]  # an H100 pass, disturbed twice
    intrinsic = [0.44, 0.46, 0.43, 0.45, 0.47, 0.44, 0.43, 0.46, 0.44, 0.45]  # CV about 3%: a memory-bound kernel
    limits = dict(min_samples=10, max_samples=100, max_cv=0.02)
    assert timing.cannot_settle({"reference": disturbed, "student": steady}, **limits)
    assert not timing.cannot_settle({"reference": steady, "student": steady}, **limits)
    assert not timing.cannot_settle({"student": intrinsic}, **limits)  # above the limit, but more samples may settle it
    assert not timing.cannot_settle({"reference": disturbed[:9]}, **limits)  # fewer than min_samples: not yet judged
    assert not timing.cannot_settle({"reference": disturbed}, **{**limits, "max_samples": 10})  # the pass ends anyway
    one_outlier = [*steady, 2.11 * 1.4]  # 11 samples; at 100 its CV would be just under 4%
    assert timing.cannot_settle({"s": one_outlier}, **{**limits, "max_cv": 0.02})
    assert not timing.cannot_settle({"s": one_outlier}, **{**limits, "max_cv": 0.04})


def _scripted_take(m, names, first_pass, second_pass):
    """A ``take`` that appends scripted samples: each pass's k-th call of a kernel gets
    ``first_pass(k)`` in the first pass and ``second_pass(k)`` after (the warm-up gets 1.0)."""
    passes = {"n": -1}

    def take(name, gated):
        if name == names[0] and not m.samples[name]:
            passes["n"] += 1  # the warm-up's first call, then each pass's (its samples were cleared)
        k = len(m.samples[name])
        value = 1.0 if passes["n"] == 0 else (first_pass if passes["n"] == 1 else second_pass)(k)
        m.samples[name].append(value * (1 + 0.001 * (k % 3)))
        m.walls[name].append(value)
        m.trips[name].append(1.0)
    return take, passes


def test_a_first_pass_disturbed_beyond_settling_is_measured_again_at_once():
    from grader.labspec.spec import Timing

    names = ["naive", "reference", "student"]
    cfg = Timing(min_samples=10, max_samples=100, target_rse=0.0, budget_s=60.0, warmup_s=0.0, max_cv=0.02)
    m = timing.Measurement({n: [] for n in names}, {n: [] for n in names}, {n: [] for n in names})
    take, passes = _scripted_take(m, names, lambda k: 3.0 if k in (1, 2) else 1.0, lambda k: 1.0)
    calls = []
    timing._sample(m, names, lambda name, gated: (calls.append(name), take(name, gated)), cfg)
    assert passes["n"] == 2 and not m.noisy  # measured again, and the second pass is clean
    assert [len(m.samples[n]) for n in names] == [100, 100, 100]  # the target stops no pass: the second ran to the cap
    # the first ended at min_samples, as soon as it could not settle: warm-up, 10 and 100 calls per kernel, not 100 + 100
    assert len(calls) == len(names) * (1 + 10 + 100)


def test_a_last_pass_runs_to_its_end_however_noisy_and_says_so():
    from grader.labspec.spec import Timing

    names = ["reference", "student"]
    cfg = Timing(min_samples=10, max_samples=40, target_rse=0.0, budget_s=60.0, warmup_s=0.0, max_cv=0.02)
    m = timing.Measurement({n: [] for n in names}, {n: [] for n in names}, {n: [] for n in names})
    spiky = lambda k: 3.0 if k in (1, 2) else 1.0  # noqa: E731
    take, passes = _scripted_take(m, names, spiky, spiky)
    timing._sample(m, names, take, cfg)
    assert passes["n"] == 2 and m.noisy == names
    assert [len(m.samples[n]) for n in names] == [40, 40]  # the last pass is not cut short: its samples are the result


class _TimingWorker:
    """Replies as a timing worker does (a test double: the real worker runs in the GPU tests).
    A gated call of a library in ``gate_for`` reports that gate state instead of "held"; so does
    the first call of every library, gated or not, as the kernels' loading waits for an idle GPU."""

    def __init__(self, outbox, gate_for=None):
        self.dirs = SimpleNamespace(outbox=outbox)
        self.gate_for = gate_for or {}
        self.samples = []  # (library, gated) of every timed call
        self.delays = {}  # seconds each task of a kind takes
        self.fails_to_open = False
        self.out_of_memory = 0  # opens that fail for want of GPU memory
        self.events = []  # (kind, time) of every task
        self.tasks = []
        #: the reply of the k-th timed call of a library: (ms, wall_ms, the round trip in seconds)
        self.reply = lambda lib, k: (1.0, 1.01, 0.0011)

    def run(self, task, limit, fds=()):
        self.tasks.append(task)
        time.sleep(self.delays.get("export" if task.get("export") else task["kind"], 0.0))
        self.events.append((task["kind"], time.monotonic()))
        if task["kind"] == Kind.TIMING_OPEN.value:
            if self.fails_to_open:
                return TaskResult("crashed", reason="the worker died")
            if self.out_of_memory:
                self.out_of_memory -= 1
                return TaskResult("out_of_memory", reason="out of memory")
            if task.get("export"):
                arrays = [a["name"] for a in task["launcher"]["args"] if a["role"] != "scalar"]
                return ok(task, {"share": "s1", "buffers": [{"name": n, "size": 1 << 21, "host": False} for n in arrays]})
            return ok(task, {"device": {"name": "test", "compute_capability": "9.0", "sms": 132, "l2_bytes": 50 << 20}})
        if task["kind"] == Kind.TIMING_SAMPLE.value:
            loading = all(lib != task["lib"] for lib, _ in self.samples)
            self.samples.append((task["lib"], task["gated"]))
            gate = self.gate_for.get(task["lib"], "expired" if loading else "held") if task["gated"] else "off"
            ms, wall_ms, seconds = self.reply(task["lib"], sum(lib == task["lib"] for lib, _ in self.samples) - 1)
            return ok(task, {"ms": ms, "wall_ms": wall_ms, "gate": gate}, seconds=seconds)
        if task["kind"] == Kind.TIMING_CLOSE.value and task["out_dir"]:
            return ok(task, {"check_outputs": {"P": "timed_output_P.npy"}, "check_inputs": {"M": "timed_input_M.npy"},
                              "inputs_modified": []})
        return ok(task, {})


def _measure(tmp_path, monkeypatch, student_gate=None, student_reply=None):
    monkeypatch.setattr(timing, "baseline_library", lambda spec, name, archs, cache: tmp_path / f"{name}.so")
    spec = find_lab("tiled_matmul")
    deadline = time.monotonic() + 60
    sub = SimpleNamespace(spec=spec, secret="s", archs=("sm_90",), cache_dir=tmp_path, library=tmp_path / "student.so", gpu=None,
                          time_left=lambda limit=math.inf: max(0.0, min(limit, deadline - time.monotonic())))
    student = _TimingWorker(tmp_path, {"student": student_gate} if student_gate else None)
    if student_reply:
        student.reply = student_reply
    baselines = _TimingWorker(tmp_path)
    return timing.measure(sub, student, baselines), student, baselines


def test_the_students_buffers_are_refilled_and_read_by_the_trusted_worker(tmp_path, monkeypatch):
    """The student's worker only times calls on buffers the trusted worker shares: every fresh
    input is the trusted worker's, and so is the reading of the last call's inputs and outputs."""
    m, student, baselines = _measure(tmp_path, monkeypatch)
    shared = [t for t in baselines.tasks if t.get("session", "").startswith("tiled_matmul/student-")]
    opened = [t for t in shared if t["kind"] == Kind.TIMING_OPEN.value]
    assert len(opened) == 1 and opened[0]["export"] and opened[0]["libs"] == {}
    student_samples = [t for t in student.tasks if t["kind"] == Kind.TIMING_SAMPLE.value]
    refills = [t for t in shared if t["kind"] == Kind.TIMING_PREPARE.value]
    assert len(student_samples) > 10 and len(refills) == len(student_samples)
    # the student's worker readies its context for each call, after the trusted worker's refill
    assert sum(t["kind"] == Kind.TIMING_PREPARE.value for t in student.tasks) == len(refills)
    student_open = next(t for t in student.tasks if t["kind"] == Kind.TIMING_OPEN.value)
    assert student_open["share"] == "s1" and student_open["buffers"][0]["name"] == "M"
    closes = [t for t in shared if t["kind"] == Kind.TIMING_CLOSE.value]
    assert [bool(t["out_dir"]) for t in closes] == [True]  # read once, and that released them
    assert m.inputs == (Path(closes[0]["out_dir"]), {"M": "timed_input_M.npy"})
    assert m.closing is not None and m.closing.check_outputs == {"P": "timed_output_P.npy"}
    student_close = next(t for t in student.tasks if t["kind"] == Kind.TIMING_CLOSE.value)
    assert not student_close["out_dir"]  # the student's worker saves nothing


def test_a_timing_that_fails_releases_the_students_buffers_in_the_trusted_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "baseline_library", lambda spec, name, archs, cache: tmp_path / f"{name}.so")
    sub = SimpleNamespace(spec=find_lab("tiled_matmul"), secret="s", archs=("sm_90",), cache_dir=tmp_path,
                          library=tmp_path / "student.so", time_left=lambda limit=math.inf: 60.0, gpu=None)
    student, baselines = _TimingWorker(tmp_path), _TimingWorker(tmp_path)
    student.fails_to_open = True
    with pytest.raises(timing.SampleFailed):
        timing.measure(sub, student, baselines)
    shared = [t for t in baselines.tasks if t.get("session", "").startswith("tiled_matmul/student-")]
    assert [t["kind"] for t in shared] == [Kind.TIMING_OPEN.value, Kind.TIMING_CLOSE.value]
    assert not shared[-1]["out_dir"]  # released, nothing read


def test_calls_are_timed_behind_the_gate_while_it_holds(tmp_path, monkeypatch):
    m, student, baselines = _measure(tmp_path, monkeypatch)
    assert m.gated and not m.gate_note
    for worker in (student, baselines):  # each library's first call, which loads its kernels, is not gated
        firsts = {lib: worker.samples.index((lib, False)) for lib, _ in worker.samples}
        assert all(gated == (i != firsts[lib]) for i, (lib, gated) in enumerate(worker.samples))
    assert all(len(s) >= 10 for s in m.samples.values())


@pytest.mark.parametrize("state", ["expired", "unavailable: CUDARuntimeError: cudaErrorMemoryAllocation"])
def test_a_gate_that_does_not_hold_for_the_student_ends_the_gate_for_every_kernel(tmp_path, monkeypatch, state):
    m, student, baselines = _measure(tmp_path, monkeypatch, student_gate=state)
    assert not m.gated and m.gate_note == state
    assert student.samples[:2] == [("student", False), ("student", True)]  # loading, then one call found it
    assert not any(gated for _, gated in student.samples[2:])  # none after used it
    assert baselines.samples[-1][1] is False
    assert all(len(s) >= 10 for s in m.samples.values())  # measured again from the start, all without it


def _stalled_every_third(lib, k):
    """A host that stalls one call in three (a driver lock held while another GPU's process
    starts): the round trip takes 40 ms, the kernel's own time is right."""
    return (1.0, 1.01, 0.040 if k % 3 == 2 else 0.0011)


def test_a_sample_whose_round_trip_a_stalled_host_stretched_is_taken_again_not_raised(tmp_path, monkeypatch):
    m, student, _ = _measure(tmp_path, monkeypatch, student_reply=_stalled_every_third)
    assert m.by_clock == 0 and m.by_wall == 0
    assert m.samples["student"] and set(m.samples["student"]) == {1.0}  # not one raised to 40 ms
    assert m.retaken["student"] > 0 and m.retaken["naive"] == m.retaken["reference"] == 0
    measured = [k for k, (lib, gated) in enumerate(student.samples) if lib == "student" and gated]
    assert len(measured) >= len(m.samples["student"]) + m.retaken["student"]


def test_a_sample_that_ran_late_once_is_taken_again_and_one_late_every_time_is_timed_by_the_wall(tmp_path, monkeypatch):
    m, _, _ = _measure(tmp_path, monkeypatch, student_reply=lambda lib, k: (1.0, 9.0, 0.0095) if k % 4 == 3 else (1.0, 1.01, 0.0011))
    assert m.by_wall == 0 and set(m.samples["student"]) == {1.0} and m.retaken["student"] > 0
    m, student, _ = _measure(tmp_path, monkeypatch, student_reply=lambda lib, k: (1.0, 9.0, 0.0095))
    n = len(m.samples["student"])
    assert m.by_wall == n and set(m.samples["student"]) == {9.0}
    assert m.retaken["student"] == timing.RETAKES * n  # each sample tried again, then taken as it is


def test_a_sample_far_too_slow_ends_the_sampling_without_being_taken_again(tmp_path, monkeypatch):
    """A late call that is also 200x the baselines' (a kernel printing from every thread) ends the
    sampling at once: taking it again would only cost more of its seconds."""
    m, student, _ = _measure(tmp_path, monkeypatch, student_reply=lambda lib, k: (200.0, 400.0, 0.41) if k >= 3 else (1.0, 1.01, 0.0011))
    assert m.stopped_early and m.retaken["student"] == 0
    assert sum(lib == "student" for lib, _ in student.samples) == 4


def test_a_forged_time_is_taken_again_and_still_raised_to_the_round_trip(tmp_path, monkeypatch):
    """A worker that reports 0.1 ms for calls the grader's clock saw take 5 ms: taking it again
    gains it nothing, and the samples that stand are bounded, so the run is an error."""
    m, _, _ = _measure(tmp_path, monkeypatch, student_reply=lambda lib, k: (0.1, 0.11, 0.005))
    n = len(m.samples["student"])
    assert m.by_clock == n and min(m.samples["student"]) > 4.0
    assert m.retaken["student"] >= timing.RETAKES * (n - 1)  # the first round has no baseline overhead yet


def test_the_measurement_says_how_long_opening_sampling_and_closing_took(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "baseline_library", lambda spec, name, archs, cache: tmp_path / f"{name}.so")
    spec = find_lab("histogram")
    sub = SimpleNamespace(spec=spec, secret="s", archs=("sm_90",), cache_dir=tmp_path, library=tmp_path / "student.so", gpu=None,
                          time_left=lambda limit=math.inf: 60.0)
    student, baselines = _TimingWorker(tmp_path), _TimingWorker(tmp_path)
    baselines.delays[Kind.TIMING_OPEN.value] = 0.4
    student.delays[Kind.TIMING_OPEN.value] = 0.2
    student.delays[Kind.TIMING_CLOSE.value] = 0.3
    baselines.delays[Kind.TIMING_PREPARE.value] = 0.002
    m = timing.measure(sub, student, baselines)
    assert set(m.phase_s) == {"open", "sampling", "close", "sampling.refill", "sampling.calls"}
    calls = len(baselines.samples) + len(student.samples)
    # every call's refill in the baselines' worker (the student's included: its buffers are refilled there)
    assert calls * 0.002 <= m.phase_s["sampling.refill"] <= m.phase_s["sampling"], m.phase_s
    assert m.phase_s["sampling.refill"] + m.phase_s["sampling.calls"] <= m.phase_s["sampling"] + 0.002, m.phase_s
    assert 0.4 <= m.phase_s["open"] < 0.55, m.phase_s  # the two workers open at once (in turn: 0.6 s)
    assert 0.3 <= m.phase_s["close"] < 0.5, m.phase_s
    assert m.phase_s["sampling"] < 0.3, m.phase_s  # no task takes time there but the warm-up's 25 ms per kernel


@pytest.mark.parametrize("failing", ["student", "baselines"])
def test_a_worker_that_fails_to_open_its_timing_is_named(tmp_path, monkeypatch, failing):
    monkeypatch.setattr(timing, "baseline_library", lambda spec, name, archs, cache: tmp_path / f"{name}.so")
    sub = SimpleNamespace(spec=find_lab("tiled_matmul"), secret="s", archs=("sm_90",), cache_dir=tmp_path,
                          library=tmp_path / "student.so", time_left=lambda limit=math.inf: 60.0, gpu=None)
    workers = {"student": _TimingWorker(tmp_path), "baselines": _TimingWorker(tmp_path)}
    workers[failing].fails_to_open = True
    with pytest.raises(timing.SampleFailed) as raised:
        timing.measure(sub, workers["student"], workers["baselines"])
    assert (raised.value.who == "student") == (failing == "student")
    assert raised.value.result.reason == "the worker died"


def test_a_rehearsal_opens_the_session_a_students_timing_then_finds_open_and_calls_each_baseline_untimed(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "baseline_library", lambda spec, name, archs, cache: tmp_path / f"{name}.so")
    spec = find_lab("tiled_matmul")
    rehearsed = _TimingWorker(tmp_path)
    timing.rehearse(spec, ("sm_90",), tmp_path, "s", rehearsed)
    _, _, baselines = _measure(tmp_path, monkeypatch)  # the same archs, cache and secret
    # the worker keeps a session opened again with the same task: the first student's is rewound
    first = next(t for t in baselines.tasks if t.get("session") == "tiled_matmul")  # the baselines', not the shared buffers'
    assert rehearsed.tasks[0] == first and rehearsed.tasks[0]["kind"] == Kind.TIMING_OPEN.value
    names = timing.baselines_of(spec.benchmark)
    assert len(names) >= 2
    assert [(t["kind"], t["lib"], t.get("gated")) for t in rehearsed.tasks[1:]] == \
           [step for b in names for step in ((Kind.TIMING_PREPARE.value, b, None), (Kind.TIMING_SAMPLE.value, b, False))]
    assert {t["session"] for t in rehearsed.tasks} == {spec.id}
    early = timing.inputs_only(spec, "s")  # the inputs' kernels, compiled while the baselines are built
    assert early["libs"] == {} and {k: v for k, v in early.items() if k != "libs"} == \
           {k: v for k, v in rehearsed.tasks[0].items() if k != "libs"}
    other = _TimingWorker(tmp_path)
    timing.rehearse(spec, ("sm_90",), tmp_path, "another secret", other)
    assert other.tasks[0] != rehearsed.tasks[0]  # another run's inputs: a session of its own
    failing = _TimingWorker(tmp_path)
    failing.fails_to_open = True
    with pytest.raises(timing.SampleFailed):
        timing.rehearse(spec, ("sm_90",), tmp_path, "s", failing)
    assert len(failing.tasks) == 1


def test_the_workers_of_a_timed_lab_are_killed_at_once():
    """Each exit releases a CUDA context, which takes a while: the next lab's timing waits for both."""
    from grader.host.procgroup import kill_together

    met = threading.Barrier(2, timeout=5)  # broken unless both kills are under way together
    killed = []

    class Session:
        def kill(self):
            met.wait()
            killed.append(self)

    sessions = (Session(), Session())
    kill_together(*sessions)
    assert set(killed) == set(sessions)


class _Ending:
    """A worker whose exit takes ``seconds``."""

    def __init__(self, seconds):
        self.seconds, self.gone_at = seconds, None

    def kill(self):
        time.sleep(self.seconds)
        self.gone_at = time.monotonic()


def _after_teardown(tmp_path, monkeypatch, out_of_memory=0):
    """A lab timed while the previous lab's workers are still ending; (student, baselines, when they were gone)."""
    from grader.host.procgroup import TEARDOWNS

    monkeypatch.setattr(timing, "baseline_library", lambda spec, name, archs, cache: tmp_path / f"{name}.so")
    sub = SimpleNamespace(spec=find_lab("tiled_matmul"), secret="s", archs=("sm_90",), cache_dir=tmp_path,
                          library=tmp_path / "student.so", time_left=lambda limit=math.inf: 60.0, gpu=None)
    student, baselines = _TimingWorker(tmp_path), _TimingWorker(tmp_path)
    student.out_of_memory = out_of_memory
    previous = (_Ending(0.3), _Ending(0.2))
    started = time.monotonic()
    TEARDOWNS.start("", *previous)
    assert time.monotonic() - started < 0.15  # ended in the background (the quicker takes 0.2 s)
    timing.measure(sub, student, baselines)
    return student, baselines, max(p.gone_at for p in previous)


def test_a_lab_opens_while_the_last_labs_workers_end_and_is_timed_once_they_are_gone(tmp_path, monkeypatch):
    student, baselines, gone = _after_teardown(tmp_path, monkeypatch)
    for worker in (student, baselines):
        opens = [t for kind, t in worker.events if kind == Kind.TIMING_OPEN.value]
        # opened beside the exit (the trusted worker opens the student's buffers, then the baselines)
        assert len(opens) == (2 if worker is baselines else 1) and max(opens) < gone
    timed = [t for worker in (student, baselines) for kind, t in worker.events if kind == Kind.TIMING_SAMPLE.value]
    assert min(timed) >= gone


def test_an_open_short_of_memory_is_tried_again_once_the_last_labs_workers_are_gone(tmp_path, monkeypatch):
    student, _, gone = _after_teardown(tmp_path, monkeypatch, out_of_memory=1)
    opens = [t for kind, t in student.events if kind == Kind.TIMING_OPEN.value]
    assert len(opens) == 2 and opens[0] < gone <= opens[1]


def test_teardowns_are_waited_for_by_gpu():
    from grader.host.procgroup import Teardowns

    teardowns = Teardowns()
    slow, quick = _Ending(0.3), _Ending(0.0)
    teardowns.start("gpu0", slow)
    teardowns.start("gpu1", quick)
    teardowns.wait("gpu1")
    assert quick.gone_at is not None and slow.gone_at is None  # another GPU's exit is not waited for
    teardowns.wait("gpu0")
    assert slow.gone_at is not None
    teardowns.wait("gpu0")  # nothing left: returns at once


class _Lab:
    """A started lab as a repository's timing sees it (a test double of LabGrading: the real one
    is timed in the GPU tests)."""

    def __init__(self, name, events, opening, fails_to_open=False):
        self.whole = find_lab("tiled_matmul")
        self.spec = SimpleNamespace(id=name, benchmark=None)
        self.name, self.events, self.opening, self.fails_to_open = name, events, opening, fails_to_open
        self.check_s = 0.05
        self.sub = SimpleNamespace(gpu=None)
        self.workers = [SimpleNamespace(kill=lambda who=f"{name}/{k}": events.append(("kill", who, time.monotonic())))
                        for k in ("student", "baselines")]

    def sessions(self):
        return self.workers

    def wait_tools(self):
        return []

    def open_timing(self):
        self.events.append(("open", self.name, time.monotonic()))
        self.opening.wait()  # every lab opens at once
        if self.fails_to_open:
            raise RuntimeError("broken")
        return self

    def timed(self):
        self.events.append(("timed", self.name, time.monotonic()))
        return self

    def report(self):
        time.sleep(self.check_s)
        self.events.append(("scored", self.name, time.monotonic()))
        return SimpleNamespace(lab=self.name, stage_seconds={"speed.check": self.check_s})

    def close(self):
        pass


def test_a_repositorys_labs_open_their_timings_together_and_their_workers_end_after_the_last(monkeypatch):
    from grader.engine.repo import _time_in_turn
    from grader.host.procgroup import TEARDOWNS

    events: list = []
    opening = threading.Barrier(3, timeout=5)  # broken unless the three labs open together
    labs = [_Lab("a", events, opening), _Lab("b", events, opening, fails_to_open=True), _Lab("c", events, opening)]
    reports: list = [None, None, None]
    _time_in_turn(list(enumerate(labs)), reports, GradeOptions(), None)
    TEARDOWNS.wait("")
    kinds = [kind for kind, _, _ in events]
    assert kinds[:3] == ["open"] * 3
    assert [who for kind, who, _ in events if kind == "timed"] == ["a", "c"]  # in turn; b could not open
    assert reports[0].lab == "a" and reports[2].lab == "c"
    assert "broken" in reports[1].checks[0].message and reports[1].checks[0].outcome.value == "error"
    last_scored = max(t for kind, _, t in events if kind == "scored")
    kills = [(who, t) for kind, who, t in events if kind == "kill"]
    assert sorted(who for who, _ in kills) == sorted(f"{n}/{k}" for n in "abc" for k in ("student", "baselines"))
    assert all(t >= last_scored for _, t in kills)  # no worker ended beside a timed call


def test_a_worker_keeps_a_timing_session_per_lab_and_rewinds_one_opened_again_alike(monkeypatch):
    """The baselines' worker times every lab's baselines, student after student: a lab's session
    opened again with the same inputs and kernels starts its input sequence again instead of
    being made anew; other arguments make a new one; closing one leaves the others."""
    from grader.worker import sampling

    made, rewound = [], []

    class Session:  # a test double of TimingSession: the real one runs in the GPU tests
        def __init__(self, cp, task):
            made.append(task["session"])
            self.device = {"name": task["session"]}

        def rewind(self):
            rewound.append(self.device["name"])

        def close(self, out_dir):
            return {"status": "ok"}

    monkeypatch.setattr(sampling, "TimingSession", Session)
    monkeypatch.setattr(sampling, "_TIMING", {})

    def task(kind, session, **extra):
        return {"kind": kind, "session": session, "libs": {"naive": "/n.so"}, "params": {"n": 1}, "seed": 5, **extra}

    assert sampling.run_timing(None, task(Kind.TIMING_OPEN.value, "tiled_matmul"))["device"] == {"name": "tiled_matmul"}
    sampling.run_timing(None, task(Kind.TIMING_OPEN.value, "histogram"))
    sampling.run_timing(None, task(Kind.TIMING_OPEN.value, "tiled_matmul"))
    assert made == ["tiled_matmul", "histogram"] and rewound == ["tiled_matmul"]
    sampling.run_timing(None, {**task(Kind.TIMING_OPEN.value, "tiled_matmul"), "seed": 6})
    assert made == ["tiled_matmul", "histogram", "tiled_matmul"]
    assert sampling.run_timing(None, task(Kind.TIMING_CLOSE.value, "histogram", out_dir="/tmp"))["status"] == "ok"
    assert sampling.run_timing(None, task(Kind.TIMING_PREPARE.value, "histogram", lib="naive"))["error"] == "no timing session is open"
    assert set(sampling._TIMING) == {"tiled_matmul"}


def test_the_baselines_worker_is_one_per_gpu_and_its_tasks_take_turns(monkeypatch):
    from grader.isolation import trusted
    from grader.isolation.launch import Isolation
    from grader.isolation.runner import WorkerSession
    from grader.isolation.sandbox import Sandbox

    monkeypatch.setattr(trusted, "_WORKERS", {})
    iso = Isolation(Sandbox(None, reason="test"), trusted=True, cupy_cache=None)
    first = trusted.baselines_worker("gpu-a", iso)
    assert trusted.baselines_worker("gpu-a", iso) is first and trusted.baselines_worker("gpu-b", iso) is not first
    inside, most = [], []

    def run(self, task, limit, fds=()):
        inside.append(task)
        most.append(len(inside))
        time.sleep(0.05)
        inside.remove(task)
        return TaskResult("ok")

    monkeypatch.setattr(WorkerSession, "run", run)
    threads = [threading.Thread(target=first.run, args=({"kind": "timing_open", "session": f"lab{k}"}, 5)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(most) == 4 and max(most) == 1  # one task at a time


def test_a_repositorys_grade_starts_the_gpus_trusted_worker_before_its_labs_builds_are_looked_up(monkeypatch):
    """Every lab's first case waits for the trusted worker: a grade in a new process starts it
    first, and none where no GPU is used."""
    from grader.engine import repo

    started = []
    gpu = SimpleNamespace(name="a GPU")
    monkeypatch.setattr(repo, "probe_for", lambda options: SimpleNamespace(gpu=gpu))
    monkeypatch.setattr(repo, "trusted_worker", lambda options, on: SimpleNamespace(spawn_ahead=lambda: started.append(on)))
    repo._trusted_ahead(GradeOptions(gpu=False))
    assert started == []
    repo._trusted_ahead(GradeOptions())
    assert started == [gpu]
    monkeypatch.setattr(repo, "probe_for", lambda options: SimpleNamespace(gpu=None))
    repo._trusted_ahead(GradeOptions())
    assert started == [gpu]


def test_the_lab_whose_timed_output_took_longest_to_check_is_timed_first(monkeypatch):
    """Its check runs beside the other labs' timings instead of after the last one."""
    from grader.engine.repo import _time_in_turn
    from grader.host.procgroup import TEARDOWNS

    order = []
    for _ in range(2):  # the first repository teaches the second
        events: list = []
        opening = threading.Barrier(3, timeout=5)
        labs = [_Lab(name, events, opening) for name in ("a", "b", "c")]
        labs[1].check_s = 0.3
        reports: list = [None, None, None]
        _time_in_turn(list(enumerate(labs)), reports, GradeOptions(), None)
        TEARDOWNS.wait("")
        order.append([who for kind, who, _ in events if kind == "timed"])
        assert [r.lab for r in reports] == ["a", "b", "c"]  # reports stay in lab order
    assert order == [["a", "b", "c"], ["b", "a", "c"]]


def test_a_new_process_times_first_the_lab_whose_timed_calls_move_the_most_bytes():
    """Nothing measured yet (a student's grade in a process of its own): memory_types' 512 MB
    oracle is checked beside the other labs' timings, not after the last of them."""
    from grader.context import RunContext, entered
    from grader.engine.repo import scoring_first, timed_bytes

    labs = [(i, SimpleNamespace(spec=find_lab(lab))) for i, lab in enumerate(lab_ids())]
    with entered(RunContext()):
        first = [grading.spec.id for _, grading in scoring_first(labs)]
    assert first[:2] == ["memory_types", "histogram"]
    assert [timed_bytes(find_lab(lab)) for lab in first] == sorted((timed_bytes(find_lab(lab)) for lab in first), reverse=True)
    with entered(RunContext(scoring_s={lab: 0.1 for lab in lab_ids()} | {"tiled_matmul": 2.0})):
        assert [grading.spec.id for _, grading in scoring_first(labs)][0] == "tiled_matmul"  # measured: what it took
    with entered(RunContext(scoring_s={"tiled_matmul": 2.0})):  # some labs not measured: all by their bytes
        assert [grading.spec.id for _, grading in scoring_first(labs)] == first


@pytest.mark.parametrize("ratio,shown", [
    (0.8958, "0.896"),  # an H100 class run: "0.90x" read as full marks, and failed
    (0.9048, "0.90"),
    (1.2345, "1.23"),
    (0.59996, "0.59996"),  # below none-at-0.6 however it is rounded to fewer digits
    (0.6, "0.60"),
])
def test_a_speed_ratio_is_shown_on_the_side_of_each_threshold_it_is_on(ratio, shown):
    from grader.checks.speed import shown_ratio

    assert shown_ratio(ratio, 0.9, 0.6) == shown


@pytest.mark.parametrize("modified,off,expect", [
    ([], 0.0, "1.00x the speed of the"),
    ([], 1.0, "the output of a timed call was wrong"),
    (["M"], 0.0, "modified its input M during timed calls"),
])
def test_the_speed_checks_read_the_trusted_workers_closing_reply(tmp_path, modified, off, expect):
    """The last timed call's reading (the closing reply, typed) decides: inputs changed, or the
    output it saved compared with the oracle's before any ratio is credited."""
    import numpy as np
    from worker_replies import ok

    from grader.checks import compare, speed
    from grader.labspec.labs import load_problem
    from grader.worker.protocol import timing_close

    spec = find_lab("tiled_matmul")
    problem, bench = load_problem(spec), spec.benchmark
    inputs = compare.generated(spec, problem, bench.params, 5, None)
    for name in ("M", "N"):
        np.save(tmp_path / f"in_{name}.npy", inputs[name])
    np.save(tmp_path / "out_P.npy", (problem.expected(inputs, dict(bench.params))["P"] + off).astype(np.float32))
    files = {"M": "in_M.npy", "N": "in_N.npy"}
    closing = ok(timing_close(str(tmp_path)), {"check_outputs": {"P": "out_P.npy"}, "check_inputs": files, "inputs_modified": modified})
    names = [*timing.baselines_of(bench), "student"]
    m = timing.Measurement({n: [2.0] * 10 for n in names}, {n: [2.0] * 10 for n in names}, {n: [2.1] * 10 for n in names},
                           closing=closing.answer, inputs=(tmp_path, files))
    checks, _ = speed.score(SimpleNamespace(spec=spec, problem=problem), None, m)  # type: ignore[arg-type]
    assert [c.id for c in checks] == [c.id for c in bench.checks]
    assert all(c.message.startswith(expect) for c in checks), [c.message for c in checks]


@pytest.mark.parametrize("lab_id", lab_ids())
def test_the_timed_inputs_are_drawn_by_philox_and_every_labs_generator_draws_through_it(lab_id):
    """The trusted worker's timed inputs come from CuPy's ``RandomState`` with Philox; every
    other name a lab's generator uses is CuPy's own (numpy stands in for it here: the GPU tests
    draw with CuPy)."""
    import types

    import numpy as np

    from grader.labspec.labs import load_problem
    from grader.worker.sampling import drawing_xp

    methods = []

    def random_state(seed, method):
        methods.append(method)
        return np.random.RandomState(seed)

    fake = types.ModuleType("cupy")
    fake.__dict__.update({k: v for k, v in np.__dict__.items() if not k.startswith("__")})
    fake.random = SimpleNamespace(RandomState=random_state, default_rng=np.random.default_rng)
    fake.cuda = SimpleNamespace(curand=SimpleNamespace(CURAND_RNG_PSEUDO_PHILOX4_32_10="philox"))
    spec = find_lab(lab_id)
    problem = load_problem(spec)
    for case in spec.correctness.cases[:3]:
        drawn = problem.generate(dict(case.params), 5, drawing_xp(fake))
        plain = problem.generate(dict(case.params), 5, np)
        assert sorted(drawn) == sorted(plain)
        assert all(np.array_equal(drawn[k], plain[k]) for k in plain), case.params
    assert methods and set(methods) == {"philox"}
    assert drawing_xp(fake).float32 is np.float32 and drawing_xp(fake).random.default_rng is np.random.default_rng
