"""Gradescope's autograder ``results.json`` for one student: the score (the grade after a collected
roster's late penalty: Gradescope takes it over the tests' sum), the seconds the grading
took (``execution_time``), one test per check (name, a stable ``number``, score, max_score, status,
output, ``tags``: the lab, the check family and the outcome, visibility), the identity and the GPU
in ``extra_data``, and a ``leaderboard`` of each timed lab's speed against the reference (shown only
where the assignment's leaderboard is turned on in Gradescope).
``schemas/gradescope-results.schema.json`` describes what is written."""

from __future__ import annotations

import re
from typing import Any

from ..engine.identity import Identity
from ..outcome import LabReport, Outcome, fmt_points
from ..report.text import graded_total
from ..textutil import cap_lines, clean

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
OUTPUT_LINES = 30


#: Where the grader's log lies on the TA's machine: students see that the staff have it, not where.
_LOG_PATH = re.compile(r"; the trace is in \S+")


def _output(message: str, details: str, outcome: Outcome) -> str:
    text = _LOG_PATH.sub("; the course staff have its trace (give them this id)", clean(message))
    if details and outcome in (Outcome.FAIL, Outcome.ERROR):
        text += "\n\n" + cap_lines(clean(details), OUTPUT_LINES)
    return text


def leaderboard(reports: list[LabReport]) -> list[dict[str, Any]]:
    """Each timed lab's speed against the reference (the reference's median time over the student's:
    above 1 is faster), higher first."""
    board = []
    for r in reports:
        student, reference = (r.timings.get(k, {}).get("median_ms") for k in ("student", "reference"))
        if student and reference and student > 0:
            board.append({"name": f"{r.lab}: speed vs reference", "value": round(float(reference) / float(student), 3),
                          "order": "desc"})
    return board


def results(reports: list[LabReport], who: Identity | None = None, visibility: str = "visible",
            execution_time: float = 0.0, standing: str = "") -> dict[str, Any]:
    """``standing``: what the student's grade of record says where it is no grade (not due yet, not
    handed in), added to the output."""
    identity = who.as_dict() if who is not None else None
    tests = []
    for lab_no, r in enumerate(reports, start=1):
        for check_no, c in enumerate(r.checks, start=1):
            tests.append({
                "name": f"{r.lab}: {c.id}",
                "number": f"{lab_no}.{check_no}",
                "score": c.points,
                "max_score": c.max_points,
                "status": "passed" if c.outcome is Outcome.PASS else "failed",
                "output": _output(c.message, c.details, c.outcome),
                "tags": [r.lab, c.stage.value, c.outcome.value],
                "visibility": visibility,
            })
    score, penalty = graded_total(round(sum(r.score for r in reports), 2), identity)
    max_score = round(sum(r.max_score for r in reports), 2)
    not_here = round(sum(r.skipped_points for r in reports), 2)
    output = f"CUDA labs: {fmt_points(score)}/{fmt_points(max_score)} points" + (f" ({penalty})" if penalty else "")
    choice = str(((identity or {}).get("late") or {}).get("choice") or "")
    if choice:
        output += f"; {choice}"
    if standing:
        output += f"; {standing}"
    if not_here:
        output += f" ({fmt_points(not_here)} points were not checked on the grading machine)"
    gpu = str((identity or {}).get("gpu") or "")
    if gpu.startswith("none"):
        output += f"; not a final grade: the GPU checks did not run ({gpu.removeprefix('none: ')})"
    doc: dict[str, Any] = {"score": score, "max_score": max_score, "execution_time": round(execution_time, 1),
                           "output": output, "visibility": visibility, "stdout_visibility": "hidden", "tests": tests}
    board = leaderboard(reports)
    if board:
        doc["leaderboard"] = board
    if identity is not None:
        doc["extra_data"] = {"identity": dict(identity), "gpu": {"name": gpu, "driver": identity.get("driver")}}
    return doc
