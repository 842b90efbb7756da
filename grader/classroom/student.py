"""Grading one student of a class with the engine that grades one repository, and publishing
their results folder: report.xml, report.json, report.md and Gradescope's results.json.

A late student whose late policy keeps the better of their on-time and late commits
(``graded_commit: best``) has both graded here, one after the other: the one with the higher
grade after the late one's penalty is published as their results (its identity says which and
why), the other's report.json and report.md go to ``COMPARED/`` in their folder for the TA.

Nothing about the student stops the class: a missing repository, a missing lab, a file the
grader refuses and a bug in the grader all end up as errors in that student's reports.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass

from ..engine.identity import Identity, completed
from ..engine.repo import TimingGate, failed_report, grade_repo, submission_rel
from ..errors import GraderError, internal_error_message
from ..gradebook import gradescope
from ..gradebook.record import choose, grade_of_record
from ..gradebook.records import record_from
from ..host.safeio import write_whole
from ..isolation.options import GradeOptions, Progress, no_progress
from ..labspec.labs import find_lab
from ..outcome import LabReport, Outcome
from ..report import files as report_files
from . import plan, stopping
from .plan import StudentJob

RESULTS = "results.json"
#: The folder of a student's results that holds the other commit's reports, where two were compared.
COMPARED = "compared"


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


def _raw(reports: list[LabReport]) -> float:
    return round(sum(r.score for r in reports), 2)


def _noted(identity: Identity, note: str) -> Identity:
    late = dict(identity.late or {})
    return dataclasses.replace(identity, late={**late, "choice": note, "flags": [*late.get("flags", []), note]})


def _better(job: StudentJob, reports: list[LabReport], identity: Identity, options: GradeOptions, progress: Progress,
            gate: TimingGate | None) -> tuple[list[LabReport], Identity, tuple[list[LabReport], Identity] | None]:
    """The reports and identity that count, and the other commit's where two were graded."""
    if job.ontime is None or stopping.requested():  # (a stop publishes nothing of this student)
        return reports, identity, None
    other = _reports(dataclasses.replace(job, root=job.ontime.root, failure=""), options, progress, gate)
    other_identity = completed(job.ontime.identity, other, options)
    penalty = float((identity.late or {}).get("penalty", 0.0))
    ontime, note = choose(_raw(reports), penalty, _raw(other), identity.commit or "", other_identity.commit or "")
    late, kept = (reports, _noted(identity, note)), (other, _noted(other_identity, note))
    return (*kept, late) if ontime else (*late, kept)


def grade_student(job: StudentJob, options: GradeOptions, progress: Progress = no_progress,
                  gate: TimingGate | None = None, visibility: str = "visible", lane: str = "") -> StudentResult:
    """Grade ``job`` and publish the student's results folder (never raises for the student's work)."""
    started = time.monotonic()
    reports = _reports(job, options, progress, gate)
    reports, kept, compared = _better(job, reports, completed(job.identity, reports, options), options, progress, gate)
    if stopping.requested():  # the stop may have shaped these reports: nothing of them is kept
        raise stopping.Stopped(f"{job.student.id}: stopped before their results were published")
    identity = kept.as_dict()
    record = record_from({"identity": identity, "labs": [{"lab": r.lab, "score": r.score, "max_score": r.max_score,
                                                          "checks": [{"id": c.id, "outcome": c.outcome.value, "points": c.points,
                                                                      "max_points": c.max_points, "message": c.message} for c in r.checks]}
                                                         for r in reports]}, job.student.id)
    grade = grade_of_record(record)
    partial = plan.partial_folder(job.folder)
    report_files.write_folder(reports, identity, partial, pictures=False)  # report.html draws them inline
    standing = "" if grade.scored else f"no grade: {grade.status.replace('_', ' ')} ({grade.reason})"
    doc = gradescope.results(reports, identity, visibility, time.monotonic() - started, standing)
    write_whole(partial / RESULTS, json.dumps(doc, indent=2) + "\n")
    if compared is not None:
        other, other_identity = compared
        report_files.write(other, other_identity.as_dict(), json_path=partial / COMPARED / report_files.NAMES["json"],
                           markdown_path=partial / COMPARED / report_files.NAMES["markdown"])
    if stopping.requested():
        shutil.rmtree(partial, ignore_errors=True)
        raise stopping.Stopped(f"{job.student.id}: stopped before their results were published")
    plan.publish(partial, job.folder)
    return StudentResult(job.student.id, record.total, round(sum(r.max_score for r in reports), 2),
                         round(time.monotonic() - started, 2), record.problems, lane)
