"""Grading students of a class with the engine that grades one repository (one student at a
time, or several whose untimed stages overlap), and publishing each one's results folder:
report.xml, report.json, report.md and Gradescope's results.json.

Nothing about the student stops the class: a missing repository, a missing lab, a file the
grader refuses and a bug in the grader all end up as errors in that student's reports.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import GraderError, internal_error_message
from ..identity import completed
from ..labs import find_lab
from ..options import GradeOptions, Progress, no_progress
from ..outcome import LabReport, Outcome, Stage
from ..repo import Group, TimingGate, failed_report, grade_groups, repo_group, submission_rel
from ..report import files as report_files
from . import gradescope, plan
from .health import PeakWatch
from .plan import StudentJob
from .records import record_from

RESULTS = "results.json"


@dataclass(frozen=True)
class StudentResult:
    student: str
    score: float
    max_score: float
    seconds: float
    problems: tuple[str, ...]
    lane: str = ""


#: The stages that run the student's code on the GPU: what other students graded beside it could disturb.
GPU_STAGES = frozenset({Stage.CORRECTNESS, Stage.SANITIZER, Stage.SPEED, Stage.COUNTERS})
#: The share of the GPU's memory in use at which students graded together may have starved one another.
MEMORY_PRESSURE = 0.9


def _group(job: StudentJob, progress: Progress) -> Group | list[LabReport]:
    """The student's labs to grade, or their reports where nothing of theirs can be graded."""
    specs = [find_lab(lab) for lab in job.labs]
    if job.failure or job.root is None:
        return [failed_report(s, submission_rel(s.id), job.failure, "not graded: nothing to grade", Outcome.FAIL) for s in specs]
    try:
        return repo_group(job.root, list(job.labs), progress)
    except GraderError as exc:
        return [failed_report(s, submission_rel(s.id), str(exc)) for s in specs]


def _reports(job: StudentJob, options: GradeOptions, progress: Progress, gate: TimingGate | None) -> list[LabReport]:
    group = _group(job, progress)
    if isinstance(group, list):
        return group
    try:
        return grade_groups([group], options, before_timing=gate)[0]
    except GraderError as exc:
        message = str(exc)
    except Exception as exc:  # a grader bug on this student: recorded with an id, the class goes on
        message = internal_error_message(exc)
    return [failed_report(spec, display, message) for spec, _, display in group.items]


def grade_student(job: StudentJob, options: GradeOptions, progress: Progress = no_progress,
                  gate: TimingGate | None = None, visibility: str = "visible", lane: str = "") -> StudentResult:
    """Grade ``job`` and publish the student's results folder (never raises for the student's work)."""
    started = time.monotonic()
    return publish(job, _reports(job, options, progress, gate), options, visibility, lane, started)


def grade_students(jobs: list[StudentJob], options: GradeOptions, progress_of: Callable[[str], Progress],
                   gate: TimingGate | None = None, visibility: str = "visible", lane: str = "",
                   memory: Callable[[], float | None] | None = None) -> list[StudentResult]:
    """Grade several students at once and publish each one's results folder.

    Their untimed stages (correctness, sanitizers, counters) overlap; every lab is still timed
    alone. A student whose shared run may have been disturbed by another's code (a check that
    ended in an error, or points lost while the GPU's memory, read by ``memory()`` as a share
    in use, was nearly full) is graded again alone, and that grade is the one kept.
    """
    if len(jobs) == 1:
        return [grade_student(jobs[0], options, progress_of(jobs[0].student.id), gate, visibility, lane)]
    started = time.monotonic()
    found = [_group(job, progress_of(job.student.id)) for job in jobs]
    shared = [k for k, group in enumerate(found) if isinstance(group, Group)]
    reports: list[list[LabReport] | None] = [group if isinstance(group, list) else None for group in found]
    peak = PeakWatch(memory)
    try:
        with peak:
            for k, graded in zip(shared, grade_groups([found[k] for k in shared], options, before_timing=gate)):  # type: ignore[misc]
                reports[k] = graded
    except Exception:  # a grader bug in the shared run: each student is graded alone, where it is theirs
        pass
    results = []
    for k, job in enumerate(jobs):
        done = reports[k]
        why = "the shared run failed" if done is None else disturbed(done, peak.value) if k in shared else ""
        if why or done is None:
            progress_of(job.student.id)(f"graded again alone: {why}")
            results.append(grade_student(job, options, progress_of(job.student.id), gate, visibility, lane))
        else:
            results.append(publish(job, done, options, visibility, lane, started))
    return results


def disturbed(reports: list[LabReport], memory_peak: float | None) -> str:
    """Why a student's grade from a shared run may not be what grading them alone gives ("" if none)."""
    gpu = [c for r in reports for c in r.checks if c.stage in GPU_STAGES]
    errors = [c for c in gpu if c.outcome is Outcome.ERROR]
    if errors:
        return f"{errors[0].id} ended in an error while other students were graded beside it"
    if memory_peak is not None and memory_peak >= MEMORY_PRESSURE and any(c.outcome is Outcome.FAIL for c in gpu):
        return f"the GPU's memory was {memory_peak:.0%} full while other students were graded beside it"
    return ""


def publish(job: StudentJob, reports: list[LabReport], options: GradeOptions, visibility: str, lane: str,
            started: float) -> StudentResult:
    """Write the student's results folder whole and say how they did."""
    identity = completed(job.identity, reports, options).as_dict()
    partial = plan.partial_folder(job.folder)
    report_files.write_folder(reports, identity, partial)
    doc = gradescope.results(reports, identity, visibility)
    (partial / RESULTS).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    plan.publish(partial, job.folder)
    record = record_from({"labs": [{"lab": r.lab, "score": r.score, "max_score": r.max_score,
                                    "checks": [{"id": c.id, "outcome": c.outcome.value, "points": c.points,
                                                "max_points": c.max_points, "message": c.message} for c in r.checks]}
                                   for r in reports]}, job.student.id)
    return StudentResult(job.student.id, record.total, round(sum(r.max_score for r in reports), 2),
                         round(time.monotonic() - started, 2), record.problems, lane)
