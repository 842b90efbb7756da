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

from ..engine.identity import Identity
from ..engine.repo import TimingGate, failed_report, grade_repo, submission_rel
from ..errors import GraderError, internal_error_message
from ..gradebook import gradescope
from ..gradebook.record import choose, grade_of_record
from ..gradebook.records import record_of
from ..host.safeio import write_whole
from ..isolation.options import GradeOptions, Progress, no_progress
from ..labspec.labs import find_lab
from ..outcome import LabReport, Outcome
from ..report.files import NAMES
from ..report.publish import Graded, Outputs, grade_then_write, graded, write
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


def _better(job: StudentJob, late: Graded, options: GradeOptions, progress: Progress, gate: TimingGate | None,
            compared: list[Graded]) -> Graded:
    """The grading that counts; where the on-time commit was graded too, the other one goes into
    ``compared``. Nothing of a student stopped before their results are published is written."""
    if job.ontime is not None and not stopping.requested():
        ontime_job = dataclasses.replace(job, root=job.ontime.root, failure="")
        ontime = graded(job.ontime.identity, lambda: _reports(ontime_job, options, progress, gate), options)
        penalty = float((late.identity.late or {}).get("penalty", 0.0))
        ontime_counts, note = choose(_raw(late.reports), penalty, _raw(ontime.reports), late.identity.commit or "",
                              ontime.identity.commit or "")
        kept, other = (Graded(g.reports, _noted(g.identity, note)) for g in ((ontime, late) if ontime_counts else (late, ontime)))
        compared.append(other)
        late = kept
    if stopping.requested():  # the stop may have shaped these reports: nothing of them is kept
        raise stopping.Stopped(f"{job.student.id}: stopped before their results were published")
    return late


def grade_student(job: StudentJob, options: GradeOptions, progress: Progress = no_progress,
                  gate: TimingGate | None = None, visibility: str = "visible", lane: str = "") -> StudentResult:
    """Grade ``job`` and publish the student's results folder (never raises for the student's work)."""
    started = time.monotonic()
    partial, compared = plan.partial_folder(job.folder), list[Graded]()
    done = grade_then_write(job.identity, lambda: _reports(job, options, progress, gate), options,
                            Outputs.folder(partial, pictures=False),  # (report.html draws the rooflines inline)
                            lambda late: _better(job, late, options, progress, gate, compared))
    reports = done.reports
    record = record_of(reports, done.identity, job.student.id)
    grade = grade_of_record(record)
    standing = "" if grade.scored else f"no grade: {grade.status.replace('_', ' ')} ({grade.reason})"
    doc = gradescope.results(reports, done.identity, visibility, time.monotonic() - started, standing)
    write_whole(partial / RESULTS, json.dumps(doc, indent=2) + "\n")
    for other in compared:
        write(other, Outputs(json=partial / COMPARED / NAMES["json"], markdown=partial / COMPARED / NAMES["markdown"]))
    if stopping.requested():
        shutil.rmtree(partial, ignore_errors=True)
        raise stopping.Stopped(f"{job.student.id}: stopped before their results were published")
    plan.publish(partial, job.folder)
    return StudentResult(job.student.id, record.total, round(sum(r.max_score for r in reports), 2),
                         round(time.monotonic() - started, 2), record.problems, lane)
