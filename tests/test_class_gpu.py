"""A small class graded on the GPU: a lane per GPU, NVML's health samples, and verdicts equal to
grading each repository alone. Skipped without a GPU."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from grader.isolation.options import GradeOptions
from grader.labspec.labs import find_lab
from grader.outcome import Outcome, Stage

ROOT = Path(__file__).resolve().parent.parent
LABS = ("tiled_matmul", "histogram")
#: Every tool run made in the test: the repositories graded alone check the class's runs, not read them back.
FRESH = GradeOptions(reuse_tool_runs=False)


def _class(base: Path) -> Path:
    repos = base / "repos"
    for lab in LABS:
        for sid in ("ref", "wrong"):
            target = repos / sid / "labs" / lab / "student.cu"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(find_lab(lab).files.reference, target)
    shutil.copy(ROOT / "labs/tiled_matmul/solutions/wrong/wrong_tile_index.cu", repos / "wrong/labs/tiled_matmul/student.cu")
    (repos / "nolabs").mkdir()
    return repos


@pytest.mark.gpu
def test_nvml_samples_the_gpu_and_the_gate_passes_an_idle_one():
    from grader.host import gpus, health

    devices = gpus.visible(gpus.nvml_devices(), None)
    assert devices and devices[0].name and devices[0].uuid.startswith(("GPU-", "MIG-"))
    sample = health.nvml_sampler(devices[0].index)()
    assert sample.temperature_c is not None and 0 < sample.temperature_c < 120
    gate = health.lane_gate(devices[0].index, max_wait_s=5)
    assert gate is not None
    note = gate()
    assert note == "" or "other process" in note or "C" in note  # a shared GPU may be busy: then it says why


@pytest.mark.gpu
def test_a_small_class_on_the_gpu_gets_what_each_repository_gets_alone(tmp_path):
    from grader.classroom import roster
    from grader.classroom.progress import Display
    from grader.classroom.run import ClassOptions, grade_class
    from grader.engine.repo import grade_repo

    repos = _class(tmp_path)
    out = tmp_path / "out"
    run = grade_class(roster.from_folder(repos), FRESH, ClassOptions(out, LABS, health_wait_s=30), Display(quiet=True))
    assert sorted(r.student for r in run.graded) == ["nolabs", "ref", "wrong"]
    assert all(r.lane.startswith("gpu") for r in run.graded)
    rows = {r.student: r for r in run.rows}
    assert rows["ref"].status == "ok" and rows["nolabs"].status == "error" and rows["nolabs"].total == 0
    assert "has no labs/ folder" in rows["nolabs"].problems[0]
    ref = json.loads((out / "students" / "ref" / "report.json").read_text())
    assert not ref["identity"]["gpu"].startswith("none") and ref["identity"]["driver"]
    assert ref["score"] == ref["max_score"], [(c["id"], c["message"]) for r in ref["labs"] for c in r["checks"]
                                               if c["outcome"] != "pass"]
    wrong = json.loads((out / "students" / "wrong" / "report.json").read_text())
    tiled = next(r for r in wrong["labs"] if r["lab"] == "tiled_matmul")
    assert all(c["outcome"] == "fail" for c in tiled["checks"] if c["stage"] == "correctness")
    for sid in ("ref", "wrong"):  # speed verdicts near a threshold may differ between two timings
        alone = grade_repo(repos / sid, FRESH, labs=list(LABS))
        in_class = json.loads((out / "students" / sid / "report.json").read_text())["labs"]
        assert [(r.lab, [(c.id, c.outcome.value) for c in r.checks if c.stage is not Stage.SPEED]) for r in alone] == \
               [(r["lab"], [(c["id"], c["outcome"]) for c in r["checks"] if c["stage"] != "speed"]) for r in in_class]
        assert all(c.outcome is not Outcome.ERROR for r in alone for c in r.checks)


def _gpu_count() -> int:
    from grader.host import gpus

    return len(gpus.visible(gpus.nvml_devices(), None))


@pytest.mark.gpu
def test_every_gpu_gets_a_lane_and_the_lanes_grade_at_once(tmp_path):
    """On a host with several GPUs each lane grades on its own GPU, side by side, and a student's
    verdicts do not depend on the lane. Side by side: the students' spans on their lanes (from the
    class's log) overlap, their union well under their sum; the lanes' start (each readies its GPU)
    is not in it."""
    from grader.classroom import roster
    from grader.classroom.progress import LANES_LOG, Display, read_log
    from grader.classroom.run import ClassOptions, grade_class
    from grader.engine.repo import grade_repo

    count = _gpu_count()
    if count < 2:
        pytest.skip(f"needs 2 or more GPUs, {count} visible")
    repos = tmp_path / "repos"
    for k in range(2 * count):
        target = repos / f"ref{k}" / "labs" / "tiled_matmul" / "student.cu"
        target.parent.mkdir(parents=True)
        shutil.copy(find_lab("tiled_matmul").files.reference, target)
    out = tmp_path / "out"
    grade_repo(repos / "ref0", GradeOptions(), labs=["tiled_matmul"])  # the builds cached: the spans are grading alone
    run = grade_class(roster.from_folder(repos), GradeOptions(), ClassOptions(out, ("tiled_matmul",), health_wait_s=30),
                      Display(quiet=True))
    assert {r.lane for r in run.graded} == {f"gpu{i}" for i in range(count)}
    spans: dict[str, list[float]] = {}
    for seconds, _, student, _ in read_log(out / LANES_LOG):
        if student != "-":
            spans.setdefault(student, [seconds, seconds])[1] = seconds
    assert set(spans) == {r.student for r in run.graded}
    total = sum(end - start for start, end in spans.values())
    assert _union(list(spans.values())) < 0.8 * total, spans
    scores = {json.loads((out / "students" / r.student / "report.json").read_text())["score"] for r in run.graded}
    reports = [json.loads((out / "students" / r.student / "report.json").read_text()) for r in run.graded]
    assert len(scores) == 1 and all(d["score"] == d["max_score"] for d in reports), scores


def _union(spans: list[list[float]]) -> float:
    """The time covered by at least one of ``spans`` ([start, end] each)."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        covered += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return covered


def test_the_union_of_spans_counts_overlapping_time_once():
    assert _union([[0.0, 2.0], [1.0, 3.0], [5.0, 6.0], [5.5, 5.7]]) == 4.0
    assert _union([]) == 0.0


@pytest.mark.gpu
def test_two_students_at_once_on_one_gpu_time_alone_and_get_what_each_gets_alone(tmp_path):
    """``--per-gpu 2``: two lanes share the GPU, their GPU work side by side and each timing alone:
    no timing waits at the health gate for the other lane's processes, every verdict but speed
    (near a threshold, two timings may differ) is what grading the repository alone gives, and
    the references' counters come from each lane's replayer (each once started while the other
    profiled, was told the counters were busy, and left every student to Nsight Compute)."""
    from grader.classroom import roster
    from grader.classroom.progress import Display
    from grader.classroom.run import ClassOptions, grade_class
    from grader.engine.repo import grade_repo

    repos = _class(tmp_path)
    for sid in ("ref2", "ref3"):
        shutil.copytree(repos / "ref", repos / sid)
    out = tmp_path / "out"
    run = grade_class(roster.from_folder(repos), FRESH, ClassOptions(out, LABS, gpus="0", health_wait_s=30, per_gpu=2),
                      Display(quiet=True))
    assert {r.lane for r in run.graded} == {"gpu0", "gpu0.1"}
    for sid in ("ref", "ref2", "ref3", "wrong"):
        in_class = json.loads((out / "students" / sid / "report.json").read_text())["labs"]
        assert not [r["lab"] for r in in_class if r["environment"].get("timing_noisy")], sid
        assert all(r["stage_seconds"].get("health_gate", 0) < 1 for r in in_class), sid
        alone = grade_repo(repos / sid, FRESH, labs=list(LABS))
        assert [(r.lab, [(c.id, c.outcome.value) for c in r.checks if c.stage is not Stage.SPEED]) for r in alone] == \
               [(r["lab"], [(c["id"], c["outcome"]) for c in r["checks"] if c["stage"] != "speed"]) for r in in_class]
    ref = json.loads((out / "students" / "ref2" / "report.json").read_text())
    assert ref["score"] == ref["max_score"]
    for sid in ("ref", "ref2", "ref3"):
        labs = json.loads((out / "students" / sid / "report.json").read_text())["labs"]
        counted = {(lab["lab"], c["id"]): (c["measured"].get("counted_by"), c["measured"].get("replayer_refused"))
                   for lab in labs for c in lab["checks"] if c["stage"] == "counters"}
        assert counted and all(by == ("replayer", None) for by in counted.values()), (sid, counted)


@pytest.mark.gpu
def test_a_class_stopped_while_its_lanes_grade_ends_within_seconds_and_quietly(tmp_path):
    """SIGTERM (a job's time limit) to a class whose GPU lanes are grading: it ends within seconds,
    exit 130, with no Python traceback, and of itself (not by ending itself after the grace, which
    would log what its exit waited for). Stopped by its time limit on four H200s, the class
    benchmark printed its figures and then did not end until it was killed, three times in five."""
    import signal
    import subprocess
    import sys
    import time

    from grader.classroom.progress import LANES_LOG

    repos = _class(tmp_path)
    for k in range(4):
        shutil.copytree(repos / "ref", repos / f"ref{k}")
    out = tmp_path / "out"
    log_file = tmp_path / "grader.log"  # (where a stopped class that did not end says what it waited for)
    proc = subprocess.Popen([sys.executable, "-m", "grader", "grade-class", str(repos), "--out", str(out), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "GRADER_LOG": str(log_file)})
    try:
        deadline = time.monotonic() + 300
        log = out / LANES_LOG
        while not (log.is_file() and " correctness " in log.read_text(errors="replace")):
            assert proc.poll() is None and time.monotonic() < deadline, "the class never reached a correctness case"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # (the class's process alone, as a scheduler ends a job)
        stopped = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    waited = log_file.read_text(errors="replace")[-6000:] if log_file.is_file() else ""
    assert "had not ended" not in err, f"{err[-1000:]}\n{waited}"  # (it ended itself: what held it is a bug)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert took < 20, f"the stopped class took {took:.1f} s to end"
