"""The timed case's DRAM traffic: which runs a lab adds, and how the measured bytes place each
timed kernel on the roofline (the profiler's runs themselves are tested on the GPU)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from grader.checks.correctness import tool_task
from grader.checks.counters import batch as counterbatch
from grader.checks.counters import launched, traffic
from grader.checks.counters import ncu as counters
from grader.checks.counters.ncu import CounterRun
from grader.isolation.launch import RunDirs
from grader.labspec.labs import find_lab, load_problem
from grader.outcome import LabReport
from grader.report import roofline
from grader.worker.buffers import filled_inputs

ENV = {"device.peak_fp32_gflops": 66900.0, "device.peak_dram_gbps": 3352.3}
BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")


@pytest.mark.parametrize("lab,baselines", [
    ("tiled_matmul", ["naive", "reference"]), ("corner_turning", ["naive", "reference"]),
    ("memory_types", ["global", "reference"]), ("boundary_checks", ["naive", "reference"]), ("histogram", []),
])
def test_each_timed_kernel_of_a_lab_that_counts_flops_has_its_traffic_profiled_on_the_timed_case(lab, baselines):
    spec = find_lab(lab)
    found = traffic.checks(spec)
    assert sorted(c.baseline for c in found) == sorted(baselines)  # the histogram counts no FLOPs: no roofline
    assert {counters.Profiles.case(c) for c in found} <= {(tuple(sorted(spec.benchmark.params.items())), spec.benchmark.seed, "filled")}
    assert all(c.metric_names == BYTES and c.points == 0 for c in found)
    profiles = launched.profiles_for(spec)
    assert all(c in profiles.checks for c in found) and len({profiles.case(c) for c in found}) <= 1
    untimed = launched.profiles_for(spec, timed=False)  # --no-timing: no timed kernel to place
    assert not [c for c in untimed.checks if c.id.startswith(traffic.CHECK_ID)]
    assert launched.profiled(spec, timed=False), "counter cases, or the case that records what ran"


def test_the_student_and_every_timed_baseline_are_profiled_on_the_timed_case(monkeypatch):
    spec = find_lab("tiled_matmul")
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(counters, "grade", lambda sub, check, profiles: None)
    monkeypatch.setattr(counters, "student_run", lambda sub, check, profiles: calls.append(("student", check.id)))
    monkeypatch.setattr(counters, "baseline_run", lambda sub, check, profiles: calls.append((check.baseline, check.id)))
    counterbatch.counted(SimpleNamespace(spec=spec, gpu=None), None, lambda: True, launched.profiles_for(spec))
    assert sorted(calls) == [("naive", "dram_traffic_naive"), ("reference", "dram_traffic_reference"),
                             ("student", "dram_traffic_naive"), ("student", "dram_traffic_reference")]


def test_the_students_profiled_cases_are_kept_for_the_next_grade_of_the_same_code_and_problem(monkeypatch, tmp_path):
    """Code graded before on this GPU and driver, with the same generator, is profiled no more (a
    warm regrade profiles nothing; its checks are judged again on the kept counts); edited code or
    an edited generator is profiled again."""
    from grader.host.gpu import GpuInfo

    spec = find_lab("tiled_matmul")
    profiled: list[str] = []

    def student_run(sub, check, profiles):
        return profiles.run("student", check, lambda metrics: (profiled.append(check.id),
                                                              CounterRun(values={**{m: 5.0 for m in metrics}, "session.other.sum": 1.0},
                                                                         kernels=("k",)))[1])

    monkeypatch.setattr(counters, "grade", lambda sub, check, profiles: student_run(sub, check, profiles))
    monkeypatch.setattr(counters, "student_run", student_run)
    monkeypatch.setattr(counters, "baseline_run", lambda sub, check, profiles: None)
    library = tmp_path / "student.so"
    library.write_bytes(b"compiled once")
    sub = SimpleNamespace(spec=spec, gpu=GpuInfo("H100", (9, 0), "580"), cache_dir=tmp_path / "cache", library=library)

    def grade_once() -> counters.Profiles:
        profiles = launched.profiles_for(sub.spec)
        counterbatch.counted(sub, None, lambda: True, profiles)  # type: ignore[arg-type]
        return profiles

    every = ["dram_traffic_naive", "global_load_reduction"]
    assert not counterbatch.all_kept(sub, launched.profiles_for(spec))  # type: ignore[arg-type]
    grade_once()
    assert sorted(profiled) == every
    assert counterbatch.all_kept(sub, launched.profiles_for(spec)), "the repository's profiler session is not started"  # type: ignore[arg-type]
    profiled.clear()
    again = grade_once()
    assert profiled == [], "nothing profiled again"
    for check in (traffic.checks(spec)[0], spec.counters[0]):
        kept = again.runs[("student", again.case(check))]
        assert kept.cached and kept.values == {m: 5.0 for m in again.metrics[again.case(check)]}, "the case's own figures only"
        assert kept.kernels == ("k",)
    library.write_bytes(b"compiled from an edited file")
    profiled.clear()
    grade_once()
    assert sorted(profiled) == every
    edited = tmp_path / "problem.py"
    edited.write_text(spec.files.problem.read_text() + "\n# a generator edited\n")
    sub.spec = dataclasses.replace(spec, files=dataclasses.replace(spec.files, problem=edited))
    profiled.clear()
    grade_once()
    assert sorted(profiled) == every, "other inputs: profiled again"
    from grader.host import toolchain

    monkeypatch.setattr(toolchain, "identity", lambda name: f"/opt/{name}-2027.1|1|1")
    profiled.clear()
    grade_once()
    assert sorted(profiled) == every, "another build of the profiler: profiled again"


def test_the_timed_case_is_profiled_on_inputs_the_worker_fills_with_no_input_file_written(tmp_path):
    """The timed case is large (64M elements in memory_types): its generator and a 256 MB input
    file would add seconds to every student's profiler session, for bytes that do not depend on
    the values."""
    spec = find_lab("tiled_matmul")
    check = traffic.checks(spec)[0]
    sub = SimpleNamespace(spec=spec, problem=load_problem(spec), library=tmp_path / "student.so", cache_dir=None)
    task = tool_task(sub, check, RunDirs(tmp_path / "in", tmp_path / "out"))  # type: ignore[arg-type]
    assert task["inputs"] == {} and task["fill"] == spec.benchmark.seed and not (tmp_path / "in").exists()
    filled = filled_inputs(task["launcher"], task["params"], task["fill"])
    width = spec.benchmark.params["width"]
    assert {name: (a.shape, a.dtype) for name, a in filled.items()} == {
        "M": ((width, width), np.float32), "N": ((width, width), np.float32)}
    again = filled_inputs(task["launcher"], task["params"], task["fill"])
    assert all(np.array_equal(filled[n], again[n]) for n in filled) and not np.array_equal(filled["M"], filled["N"])
    generated = dataclasses.replace(check, inputs="generated")  # a counter check on the same case and seed
    assert counters.Profiles.case(generated) != counters.Profiles.case(check), "its run must not get filled inputs"
    task = tool_task(sub, generated, RunDirs(tmp_path / "in", tmp_path / "out"))  # type: ignore[arg-type]
    assert "fill" not in task and sorted(Path(p).name for p in task["inputs"].values()) == ["M.npy", "N.npy"]


def test_filled_integer_inputs_are_zeros_so_that_indices_stay_in_bounds():
    launcher = {"name": "gather", "args": [{"name": "idx", "role": "input", "dtype": "int32", "shape": ["n"]},
                                           {"name": "x", "role": "input", "dtype": "float32", "shape": ["n"]},
                                           {"name": "n", "role": "scalar", "ctype": "int", "value": "n"}]}
    filled = filled_inputs(launcher, {"n": 100_000}, 3)  # type: ignore[arg-type]
    assert filled["idx"].dtype == np.int32 and not filled["idx"].any()
    assert filled["x"].dtype == np.float32 and 0 <= filled["x"].min() < filled["x"].max() < 100


def _timings(width: int) -> dict[str, dict[str, float]]:
    flops, model = 2 * width ** 3, 3 * 4 * width ** 2
    out = {}
    for name, ms in (("naive", 3.1), ("reference", 2.1), ("student", 2.2)):
        out[name] = {"median_ms": ms, "min_ms": ms, "cv_pct": 0.1, "n": 10,
                     "gflops": round(flops / (ms / 1e3) / 1e9, 1), "gbps": round(model / (ms / 1e3) / 1e9, 1)}
    return out


def _profiled(spec, failed: str = "") -> counters.Profiles:
    profiles = launched.profiles_for(spec)
    key = profiles.case(traffic.checks(spec)[0])
    for whose, read in (("student", 9.0e7), ("baseline naive", 4.0e8), ("baseline reference", 5.0e7)):
        run = CounterRun(error="did not finish") if whose == failed else CounterRun(
            values={BYTES[0]: read, BYTES[1]: 1.6e7}, kernels=("k",))
        profiles.settle(whose, key, run)
    return profiles


def test_measured_bytes_join_the_timing_rows_and_place_each_kernel():
    spec = find_lab("tiled_matmul")
    width = spec.benchmark.params["width"]
    rows = traffic.joined(spec, _timings(width), _profiled(spec))
    assert rows["student"]["dram_bytes"] == 106_000_000
    assert rows["student"]["flop_per_dram_byte"] == pytest.approx(2 * width ** 3 / 1.06e8, abs=1e-3)
    assert rows["naive"]["dram_bytes"] == 416_000_000 and rows["reference"]["dram_bytes"] == 66_000_000
    roof = roofline.of(LabReport(spec.id, spec.title, "student.cu", (), ENV, (), rows))
    assert roof is not None and roof.traffic == roofline.MEASURED
    assert [p.kernel for p in roof.points] == ["naive", "reference", "student"]
    assert roof.points[1].intensity > roof.points[2].intensity > roof.points[0].intensity  # fewer bytes, higher


def test_a_kernel_whose_traffic_was_not_measured_leaves_every_kernel_on_the_model():
    spec = find_lab("tiled_matmul")
    width = spec.benchmark.params["width"]
    rows = traffic.joined(spec, _timings(width), _profiled(spec, failed="baseline naive"))
    assert "dram_bytes" not in rows["naive"] and "dram_bytes" in rows["student"]
    roof = roofline.of(LabReport(spec.id, spec.title, "student.cu", (), ENV, (), rows))
    assert roof is not None and roof.traffic == roofline.MODELLED
    assert [p.intensity for p in roof.points] == pytest.approx([2 * width ** 3 / (3 * 4 * width ** 2)] * 3, rel=0.01)
    assert traffic.joined(spec, _timings(width), None) == _timings(width)  # counters off: the rows as timed
