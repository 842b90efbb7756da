"""What the class-wide files are made from: each student's published ``report.json``, read back.

A single run, a resumed run and a merge of shards all build the gradebook from these records,
so they write the same files.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..engine.identity import Identity
from ..isolation.sandbox import NONE_TAIL
from ..outcome import LabReport
from ..textutil import clean_line

PROBLEM_CHARS = 200
#: A class's results folder holds one folder per student, ``OUT/students/<id>/``.
STUDENTS_DIR = "students"


def student_folder(out: Path, student_id: str) -> Path:
    return out / STUDENTS_DIR / student_id


@dataclass(frozen=True)
class Verdict:
    lab: str
    check: str
    outcome: str  # pass, fail, error, skipped
    points: float
    max_points: float
    message: str

    @property
    def ran(self) -> bool:
        """Whether the check ran for the student: neither skipped nor held back ("not graded: ..."
        after a compile error, a missing file or failed correctness)."""
        return self.outcome != "skipped" and not self.message.startswith("not graded")


@dataclass(frozen=True)
class LabScore:
    lab: str
    score: float
    max_score: float


@dataclass(frozen=True)
class StudentRecord:
    student: str
    labs: tuple[LabScore, ...]
    verdicts: tuple[Verdict, ...]
    commit: str | None = None
    graded: bool = True  # False: no results were found for this student
    gpu: str = ""  # the GPU graded on, or "none: why" (the GPU checks did not run)
    late: Mapping[str, Any] | None = None  # from a collected roster: late_days, penalty, flags
    sandbox: str = ""  # the sandbox the student's code ran in (the report's), or "none: why"

    @property
    def raw_total(self) -> float:
        """The labs' points, before any late penalty."""
        return round(sum(lab.score for lab in self.labs), 2)

    @property
    def penalty(self) -> float:
        """The fraction the late policy takes off (0 without a collected roster)."""
        return float(self.late.get("penalty", 0.0)) if self.late else 0.0

    @property
    def total(self) -> float:
        """The score: the labs' points less the late penalty."""
        return round(self.raw_total * (1 - self.penalty), 2)

    def score(self, lab: str) -> float | None:
        return next((s.score for s in self.labs if s.lab == lab), None)

    @functools.cached_property
    def not_handed_in(self) -> tuple[str, ...]:
        """The labs whose file the student's repository does not have."""
        return tuple(v.lab for v in self.verdicts if v.check == "compile" and v.outcome == "error"
                     and clean_line(v.message).startswith(f"labs/{v.lab}/student.cu not found"))

    def handed_in_score(self, lab: str) -> float | None:
        """The lab's score, None where it was not handed in (it belongs in no statistic of the lab)."""
        return None if lab in self.not_handed_in else self.score(lab)

    @property
    def without_gpu(self) -> str:
        """Why the GPU checks did not run for this student ("" where they did)."""
        return self.gpu.removeprefix("none: ") if self.gpu.startswith("none") else ""

    @property
    def unsandboxed(self) -> str:
        """Why this student's code ran without the sandbox ("" where it ran in it, or nothing is known)."""
        if not self.sandbox.startswith("none"):
            return ""
        return self.sandbox.removeprefix("none: ").removesuffix(NONE_TAIL) or "no sandbox"

    @property
    def problems(self) -> tuple[str, ...]:
        """The first error of each lab that hit one ("all labs: ..." when they share it)."""
        if not self.graded:
            return ("not graded: no results for this student",)
        first: dict[str, str] = {}
        missing = list(self.not_handed_in)
        for v in self.verdicts:
            if v.outcome == "error" and v.lab not in first and v.lab not in missing:
                text = clean_line(v.message)
                first[v.lab] = text if len(text) <= PROBLEM_CHARS else text[: PROBLEM_CHARS - 3] + "..."
        if len(first) > 1 and len(set(first.values())) == 1 and len(first) == len(self.labs):
            return (f"all labs: {next(iter(first.values()))}",)
        found = [f"{lab}: {text}" for lab, text in first.items()]
        return tuple(found + ([f"not handed in: {', '.join(missing)}"] if missing else []))

    @property
    def status(self) -> str:
        """``ok``, or ``error`` when any check errored (compile error, crash, hang, missing file, grader failure)."""
        return "error" if self.problems else "ok"


def record_of(reports: Sequence[LabReport], identity: Identity, student: str) -> StudentRecord:
    """The record of a grading just done, from its reports and identity (``record_from`` reads one
    back from a results folder's report.json)."""
    labs = tuple(LabScore(r.lab, r.score, r.max_score) for r in reports)
    verdicts = tuple(Verdict(r.lab, c.id, c.outcome.value, c.points, c.max_points, c.message) for r in reports for c in r.checks)
    late = dict(identity.late) if identity.late is not None else None
    return StudentRecord(student, labs, verdicts, identity.commit, gpu=identity.gpu, late=late, sandbox=identity.sandbox)


def record_from(doc: Mapping[str, Any], student: str) -> StudentRecord:
    labs, verdicts = [], []
    for lab in doc.get("labs", []):
        labs.append(LabScore(str(lab["lab"]), float(lab["score"]), float(lab["max_score"])))
        for c in lab.get("checks", []):
            verdicts.append(Verdict(str(lab["lab"]), str(c["id"]), str(c["outcome"]), float(c["points"]),
                                    float(c["max_points"]), str(c.get("message", ""))))
    identity = doc.get("identity") or {}
    commit, gpu, late, sandbox = identity.get("commit"), identity.get("gpu"), identity.get("late"), identity.get("sandbox")
    return StudentRecord(student, tuple(labs), tuple(verdicts), commit if isinstance(commit, str) else None,
                         gpu=gpu if isinstance(gpu, str) else "", late=late if isinstance(late, dict) else None,
                         sandbox=sandbox if isinstance(sandbox, str) else "")


def sandbox_note(rows: Sequence[StudentRecord]) -> str:
    """"" where every graded student's code ran in the sandbox; else how many did not, and why
    (said by the terminal, summary.md and the dashboard; grades.csv has it per row)."""
    graded = [r for r in rows if r.graded]
    without = [r for r in graded if r.unsandboxed]
    if not without:
        return ""
    why = "; ".join(sorted({r.unsandboxed for r in without}))
    return (f"the code of {len(without)} of {len(graded)} students ran without the sandbox ({why}): it could read and "
            "change whatever the grader's user can, so their grades hold only as far as that code can be trusted")


def load(folder: Path, student: str) -> StudentRecord:
    """The record in a student's results folder; one marked not graded if it is missing or unreadable."""
    try:
        doc = json.loads((folder / "report.json").read_text(encoding="utf-8"))
        return record_from(doc, student)
    except (OSError, ValueError, KeyError, TypeError):
        return StudentRecord(student, (), (), graded=False)
