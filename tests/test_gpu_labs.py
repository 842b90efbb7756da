"""End to end on a real GPU: every known solution gets exactly its expected verdicts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.grade import GradeOptions, grade
from grader.labs import find_lab, lab_ids
from grader.outcome import Outcome
from grader.report import data as json_report
from grader.spec import load_expected

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = Path(os.environ["GRADER_TEST_LOG"]) if os.environ.get("GRADER_TEST_LOG") else None


def _solutions():
    for lab_id in lab_ids():
        spec = find_lab(lab_id)
        expected = spec.root / "solutions" / "expected.yaml"
        if expected.exists():
            for sol in load_expected(expected).solutions:
                yield pytest.param(lab_id, sol, id=f"{lab_id}:{sol.file.name}")


@pytest.mark.gpu
@pytest.mark.parametrize("lab_id,solution", list(_solutions()))
def test_known_solution_verdicts(lab_id, solution):
    spec = find_lab(lab_id)
    report = grade(spec, solution.file, GradeOptions())
    if LOG_DIR:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        (LOG_DIR / f"{lab_id}-{solution.file.stem}.json").write_text(json_report.dumps([report]))
    got = {c.id: c.outcome.value for c in report.checks}
    want = {cid: solution.verdict(cid) for cid in got}
    assert None not in want.values(), f"checks with no expected verdict: {[c for c, v in want.items() if v is None]}"
    mismatched = {
        cid: (got[cid], want[cid], next(c.message for c in report.checks if c.id == cid))
        for cid in got
        if want[cid] != "any" and got[cid] != want[cid]
    }
    assert not mismatched, f"{solution.file.name} ({solution.why}): check -> (got, expected, message): {mismatched}"
    if solution.min_score is not None:
        assert report.score >= solution.min_score, report.score
    if solution.max_score is not None:
        assert report.score <= solution.max_score, report.score


MESSAGES = {
    "launch_error.cu": "launch configuration",
    "infinite_loop.cu": "killed",
    "host_segfault.cu": "segmentation fault",
    "calls_exit.cu": "exit",
    "uninitialised_output.cu": "NaN",
    "wrong_tile_index.cu": "first at P[",
}


@pytest.mark.gpu
@pytest.mark.parametrize("name,needle", sorted(MESSAGES.items()))
def test_first_failing_check_names_the_cause(name, needle):
    spec = find_lab("tiled_matmul")
    report = grade(spec, spec.root / "solutions" / "wrong" / name, GradeOptions(timing=False, counters=False))
    first = next(c for c in report.checks if c.outcome in (Outcome.FAIL, Outcome.ERROR) and c.stage.value == "correctness")
    assert needle in first.message, first.message


@pytest.mark.gpu
def test_stub_output_reported_as_never_written():
    spec = find_lab("tiled_matmul")
    report = grade(spec, spec.files.stub, GradeOptions(timing=False, counters=False))
    first = next(c for c in report.checks if c.id.startswith("correctness"))
    assert "never written" in first.message and "NaN" in first.message


@pytest.mark.gpu
def test_reference_report_has_timing_figures():
    spec = find_lab("tiled_matmul")
    report = grade(spec, spec.files.reference, GradeOptions(counters=False))
    student = report.timings["student"]
    assert student["n"] >= 10
    assert student["gflops"] > 100
    assert 0 < student["pct_fp32_peak"] < 100
    assert report.environment["device.peak_fp32_gflops"] > 1000
