"""What the class-wide files are made from: each student's published ``report.json``, read back.

A single run, a resumed run and a merge of shards all build the gradebook from these records,
so they write the same files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..textutil import clean_line

PROBLEM_CHARS = 200


@dataclass(frozen=True)
class Verdict:
    lab: str
    check: str
    outcome: str  # pass, fail, error, skipped
    points: float
    max_points: float
    message: str


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

    @property
    def total(self) -> float:
        return round(sum(lab.score for lab in self.labs), 2)

    def score(self, lab: str) -> float | None:
        return next((s.score for s in self.labs if s.lab == lab), None)

    @property
    def problems(self) -> tuple[str, ...]:
        """The first error of each lab that hit one ("all labs: ..." when they share it)."""
        if not self.graded:
            return ("not graded: no results for this student",)
        first: dict[str, str] = {}
        missing: list[str] = []
        for v in self.verdicts:
            if v.outcome == "error" and v.lab not in first and v.lab not in missing:
                text = clean_line(v.message)
                if v.check == "compile" and text.startswith(f"labs/{v.lab}/student.cu not found"):
                    missing.append(v.lab)
                    continue
                first[v.lab] = text if len(text) <= PROBLEM_CHARS else text[: PROBLEM_CHARS - 3] + "..."
        if len(first) > 1 and len(set(first.values())) == 1 and len(first) == len(self.labs):
            return (f"all labs: {next(iter(first.values()))}",)
        found = [f"{lab}: {text}" for lab, text in first.items()]
        return tuple(found + ([f"not handed in: {', '.join(missing)}"] if missing else []))

    @property
    def status(self) -> str:
        """``ok``, or ``error`` when any check errored (compile error, crash, hang, missing file, grader failure)."""
        return "error" if self.problems else "ok"


def record_from(doc: Mapping[str, Any], student: str) -> StudentRecord:
    labs, verdicts = [], []
    for lab in doc.get("labs", []):
        labs.append(LabScore(str(lab["lab"]), float(lab["score"]), float(lab["max_score"])))
        for c in lab.get("checks", []):
            verdicts.append(Verdict(str(lab["lab"]), str(c["id"]), str(c["outcome"]), float(c["points"]),
                                    float(c["max_points"]), str(c.get("message", ""))))
    identity = doc.get("identity") or {}
    commit = identity.get("commit")
    return StudentRecord(student, tuple(labs), tuple(verdicts), commit if isinstance(commit, str) else None)


def load(folder: Path, student: str) -> StudentRecord:
    """The record in a student's results folder; one marked not graded if it is missing or unreadable."""
    try:
        doc = json.loads((folder / "report.json").read_text(encoding="utf-8"))
        return record_from(doc, student)
    except (OSError, ValueError, KeyError, TypeError):
        return StudentRecord(student, (), (), graded=False)
