"""Gradescope's autograder ``results.json`` for one student: the total score and one test per
check (name, score, max_score, status, output, visibility), with the identity in ``extra_data``.
``schemas/gradescope-results.schema.json`` describes what is written."""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..outcome import LabReport, Outcome, fmt_points
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


def results(reports: list[LabReport], identity: Mapping[str, Any] | None = None, visibility: str = "visible") -> dict[str, Any]:
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
    score = round(sum(r.score for r in reports), 2)
    max_score = round(sum(r.max_score for r in reports), 2)
    not_here = round(sum(r.skipped_points for r in reports), 2)
    output = f"CUDA labs: {fmt_points(score)}/{fmt_points(max_score)} points"
    if not_here:
        output += f" ({fmt_points(not_here)} points were not checked on the grading machine)"
    gpu = str((identity or {}).get("gpu") or "")
    if gpu.startswith("none"):
        output += f"; not a final grade: the GPU checks did not run ({gpu.removeprefix('none: ')})"
    doc: dict[str, Any] = {"score": score, "max_score": max_score, "output": output, "visibility": visibility,
                           "stdout_visibility": "hidden", "tests": tests}
    if identity is not None:
        doc["extra_data"] = {"identity": dict(identity)}
    return doc
