"""Grading one student of a class with the engine that grades one repository, and publishing
their results folder: report.xml, report.json, report.md and Gradescope's results.json.

Nothing about the student stops the class: a missing repository, a missing lab, a file the
grader refuses and a bug in the grader all end up as errors in that student's reports.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass

from ..engine.identity import completed
from ..engine.repo import TimingGate, failed_report, grade_repo, submission_rel
from ..errors import GraderError, internal_error_message
from ..gradebook import gradescope
from ..gradebook.records import record_from
from ..host.safeio import write_whole
from ..isolation.options import GradeOptions, Progress, no_progress
from ..labspec.labs import find_lab
from ..outcome import LabReport, Outcome
from ..report import files as report_files
from . import plan, stopping
from .plan import StudentJob

RESULTS = "results.json"


@dataclass(frozen=True)
class StudentResult:
    student: str
    score: float
    max_score: float
    seconds: float
    problems: tuple[str, ...]
    lane: str = ""


def _reports(job: StudentJob, options: GradeOptions, progress: Progress, gate: TimingGate | None) -> list[LabReport]:
    specs = [find_lab(lab) for lab in job.labs]
    if job.failure or job.root is None:
        return [failed_report(s, submission_rel(s.id), job.failure, "not graded: nothing to grade", Outcome.FAIL) for s in specs]
    try:
        return grade_repo(job.root, options, progress, labs=list(job.labs), before_timing=gate)
    except GraderError as exc:
        message = str(exc)
    except Exception as exc:  # a grader bug on this student: recorded with an id, the class goes on
        message = internal_error_message(exc)
    return [failed_report(s, submission_rel(s.id), message) for s in specs]


def grade_student(job: StudentJob, options: GradeOptions, progress: Progress = no_progress,
                  gate: TimingGate | None = None, visibility: str = "visible", lane: str = "") -> StudentResult:
    """Grade ``job`` and publish the student's results folder (never raises for the student's work)."""
    started = time.monotonic()
    reports = _reports(job, options, progress, gate)
    if stopping.requested():  # the stop may have shaped these reports: nothing of them is kept
        raise stopping.Stopped(f"{job.student.id}: stopped before their results were published")
    identity = completed(job.identity, reports, options).as_dict()
    partial = plan.partial_folder(job.folder)
    report_files.write_folder(reports, identity, partial, pictures=False)  # report.html draws them inline
    doc = gradescope.results(reports, identity, visibility, time.monotonic() - started)
    write_whole(partial / RESULTS, json.dumps(doc, indent=2) + "\n")
    if stopping.requested():
        shutil.rmtree(partial, ignore_errors=True)
        raise stopping.Stopped(f"{job.student.id}: stopped before their results were published")
    plan.publish(partial, job.folder)
    record = record_from({"labs": [{"lab": r.lab, "score": r.score, "max_score": r.max_score,
                                    "checks": [{"id": c.id, "outcome": c.outcome.value, "points": c.points,
                                                "max_points": c.max_points, "message": c.message} for c in r.checks]}
                                   for r in reports]}, job.student.id)
    return StudentResult(job.student.id, record.total, round(sum(r.max_score for r in reports), 2),
                         round(time.monotonic() - started, 2), record.problems, lane)
