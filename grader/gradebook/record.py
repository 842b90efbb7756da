"""A student's grade of record: the one grade every output of a class gives (``grades.csv``,
``results.json``, ``summary.md``, the dashboard, the LMS files, ``diff``), computed in one place
from the labs' scores, the late policy's penalty and the collection.

Its status is one of a closed set, which decides where the grade may go:

- ``graded``: a final grade (late penalty taken);
- ``partial``: some checks did not run (graded without a GPU, a family of checks turned off, the
  grading process lost, the grader's own error): the points are what was checked, not a grade;
- ``not_due``: nothing collected yet, the student's deadline (an extension) has not passed;
- ``not_handed_in``: no repository, an empty one, nothing collected, no lab file at all;
- ``error``: nothing of the student's could be graded for a reason that is not theirs to fix alone
  (access denied to their repository, a refused folder, no results): a TA looks.

Only ``graded`` students have a grade an LMS may import; ``not_due`` and ``not_handed_in`` ones
have none (their LMS cells stay blank: the LMS leaves the grade as it is), ``partial`` and
``error`` ones stop an export unless a partial one is asked for. Which collected commit counts
(``latest`` or ``best``: see ``grader.gradebook.late``) is decided when the student is graded, and
said in ``commit_note`` and the flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import INTERNAL_ERROR
from ..outcome import fmt_points
from ..report.text import penalty_text
from ..textutil import clean_line
from .records import StudentRecord

STATUSES = ("graded", "partial", "not_due", "not_handed_in", "error")
#: Statuses whose students are in the class's statistics (their points are scores).
SCORED = ("graded", "partial")
#: Statuses an LMS file may carry: a grade, or none (a blank cell).
FINAL = ("graded", "not_due", "not_handed_in")

#: How the reasons a whole student could not be graded start (``collect``'s row problems, the plan's
#: failures), by the status they give. Anything else is an ``error``.
NOT_DUE = ("collect: not collected yet",)
NOT_HANDED_IN = ("collect: repository not found", "collect: the repository is empty",
                 "collect: the repository's default branch names no commit", "repository not found")
#: Failures of the grading itself, not of the student's work: the checks did not run.
LOST = ("the grading process died", "the lane on ")
NO_LABS = "has no labs/ folder"


@dataclass(frozen=True)
class GradeOfRecord:
    student: str
    status: str  # one of STATUSES
    reason: str  # why the status is what it is ("" for a final grade)
    raw: float | None  # the labs' points before the late penalty (None: no grade)
    penalty: float  # the fraction the late policy takes
    final: float | None  # the grade: raw less the penalty (None: no grade)
    max: float
    late_days: int | None  # None without a collected roster
    commit: str | None  # the commit graded
    commit_note: str  # which collected commit counts and why ("" where there was no choice)
    flags: tuple[str, ...]  # what the collection found (dates, force pushes, the commit chosen)
    not_run: tuple[str, ...]  # the families of checks that did not run
    labs: tuple[tuple[str, float], ...]  # each lab's points before the penalty

    @property
    def is_final(self) -> bool:
        """Whether an LMS may take this grade as it is (a grade, or a blank cell that changes nothing)."""
        return self.status in FINAL

    @property
    def scored(self) -> bool:
        """Whether the student's points belong in the class's statistics."""
        return self.status in SCORED

    def lab_final(self, lab: str) -> float | None:
        """A lab's points less the late penalty (None where the student has no grade, or no such lab)."""
        if self.final is None:
            return None
        score = next((s for lab_id, s in self.labs if lab_id == lab), None)
        return None if score is None else round(score * (1 - self.penalty), 2)

    @property
    def score_text(self) -> str:
        """``10.8/143 (12 before a 10% late penalty: 1 late day)``, or what stands for the grade."""
        if self.final is None:
            return f"{self.status.replace('_', ' ')}: {self.reason}" if self.reason else self.status.replace("_", " ")
        text = f"{fmt_points(self.final)}/{fmt_points(self.max)}"
        if self.penalty and self.raw is not None:
            text += f" ({penalty_text(self.raw, self.penalty, self.late_days)})"
        return text + (f" [not final: {self.reason}]" if self.status == "partial" else "")


def whole_failure(record: StudentRecord) -> str:
    """Why none of the student's labs could be graded, where one reason stopped them all ("" otherwise):
    every lab's first check an error with that one message, and no check run."""
    firsts = {v.lab: clean_line(v.message) for v in record.verdicts if v.check == "compile"}
    if not record.labs or len(firsts) != len(record.labs) or len(set(firsts.values())) != 1:
        return ""
    if any(v.ran for v in record.verdicts if v.check != "compile") or any(
            v.outcome != "error" for v in record.verdicts if v.check == "compile"):
        return ""
    return next(iter(firsts.values()))


#: How a compile check begins when the student's own file is at fault: their grade, 0 for the lab.
OWN_FILE = ("compile error", "link error", "compile failed", "compilation of ")


def _students_own(failure: str) -> bool:
    """Whether a failure that stopped every lab is the student's own file's (it did not compile, or
    it is too large): a grade of 0, not a grade that could not be given."""
    return failure.startswith(OWN_FILE) or "labs/" in failure[:300]


def _status(record: StudentRecord, not_run: Sequence[str]) -> tuple[str, str]:
    if not record.graded:
        return "error", "no results for this student"
    failure = whole_failure(record)
    if failure.startswith(NOT_DUE):
        return "not_due", failure.removeprefix("collect: ")
    if failure.startswith(NOT_HANDED_IN) or NO_LABS in failure:
        return "not_handed_in", failure.removeprefix("collect: ")
    if record.labs and len(record.not_handed_in) == len(record.labs):
        return "not_handed_in", "no lab file: " + ", ".join(f"labs/{lab}/student.cu" for lab in record.not_handed_in)
    if failure.startswith(LOST) or INTERNAL_ERROR in failure:
        return "partial", failure
    if failure and not _students_own(failure):
        return "error", failure
    lost = next((clean_line(v.message) for v in record.verdicts if INTERNAL_ERROR in v.message), "")
    if lost:
        return "partial", lost
    if "gpu" in not_run:
        return "partial", f"the GPU checks did not run ({record.without_gpu or 'graded without a GPU'})"
    if not_run:
        return "partial", f"turned off: {', '.join(not_run)} checks"
    return "graded", ""


def grade_of_record(record: StudentRecord, not_run: Sequence[str] | None = None) -> GradeOfRecord:
    """``record``'s grade of record. ``not_run``: the families of checks that did not run for the
    student (``grades.not_run``: the run's options say which were turned off); default: ``gpu``
    where the record says it was graded without one."""
    skipped = tuple(not_run) if not_run is not None else (("gpu",) if record.without_gpu else ())
    status, reason = _status(record, skipped)
    late = record.late or {}
    days = late.get("late_days")
    scored = status in SCORED
    return GradeOfRecord(
        student=record.student, status=status, reason=reason,
        raw=record.raw_total if scored else None, penalty=record.penalty if scored else 0.0,
        final=record.total if scored else None, max=round(sum(s.max_score for s in record.labs), 2),
        late_days=int(days) if isinstance(days, int) else None, commit=record.commit,
        commit_note=str(late.get("choice") or ""), flags=tuple(str(f) for f in late.get("flags", ())),
        not_run=skipped, labs=tuple((s.lab, s.score) for s in record.labs))


def choose(late_raw: float, penalty: float, ontime_raw: float, late_commit: str, ontime_commit: str) -> tuple[bool, str]:
    """With ``graded_commit: best``: whether the on-time commit counts rather than the late one,
    and the note saying which and why (the late one where both give the same grade)."""
    late_final = round(late_raw * (1 - penalty), 2)
    after = f"after its {fmt_points(round(penalty * 100, 2))}% penalty"
    if ontime_raw > late_final:
        return True, (f"graded the on-time commit {ontime_commit[:12]}: {fmt_points(ontime_raw)} > {fmt_points(late_final)} "
                      f"for the late commit {late_commit[:12]} {after} (graded_commit: best)")
    sign = ">" if late_final > ontime_raw else "="
    return False, (f"graded the late commit {late_commit[:12]}: {fmt_points(late_final)} {after} {sign} "
                   f"{fmt_points(ontime_raw)} for the on-time commit {ontime_commit[:12]} (graded_commit: best)")
