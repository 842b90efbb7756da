"""``cuda-grader diff OLD NEW``: every student whose score or check verdicts changed between two
class runs (after a lab or grader change), and the students only one of them has."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import GraderError
from ..outcome import fmt_points
from ..textutil import clean_line
from . import grades as gradebook
from . import records
from .records import StudentRecord, student_folder


@dataclass(frozen=True)
class StudentChange:
    student: str
    old_total: float | None  # None: not in OLD
    new_total: float | None  # None: not in NEW
    labs: tuple[tuple[str, float | None, float | None], ...] = ()  # (lab, old, new) where the score changed
    checks: tuple[tuple[str, str, str, str], ...] = ()  # (lab, check, old outcome, new outcome) where it changed


def _students(folder: Path) -> dict[str, StudentRecord]:
    if not folder.is_dir():
        raise GraderError("results folder not found", path=folder)
    manifest = gradebook.read_manifest(folder)
    return {sid: records.load(student_folder(folder, sid), sid) for sid in manifest.students}


def _compare(sid: str, old: StudentRecord, new: StudentRecord) -> StudentChange | None:
    labs = sorted({s.lab for s in old.labs} | {s.lab for s in new.labs})
    lab_changes = tuple((lab, old.score(lab), new.score(lab)) for lab in labs if old.score(lab) != new.score(lab))
    before = {(v.lab, v.check): v.outcome for v in old.verdicts}
    after = {(v.lab, v.check): v.outcome for v in new.verdicts}
    keys = list(before) + [k for k in after if k not in before]
    checks = tuple((lab, check, before.get((lab, check), "-"), after.get((lab, check), "-")) for lab, check in keys
                   if before.get((lab, check)) != after.get((lab, check)))
    if not lab_changes and not checks and old.graded == new.graded:
        return None
    return StudentChange(sid, old.total if old.graded else None, new.total if new.graded else None, lab_changes, checks)


def diff(old_dir: Path, new_dir: Path) -> list[StudentChange]:
    old, new = _students(old_dir), _students(new_dir)
    changes = []
    for sid in list(old) + [s for s in new if s not in old]:
        if sid not in new:
            changes.append(StudentChange(sid, old[sid].total, None))
        elif sid not in old:
            changes.append(StudentChange(sid, None, new[sid].total))
        else:
            change = _compare(sid, old[sid], new[sid])
            if change is not None:
                changes.append(change)
    return changes


def _points(value: float | None) -> str:
    return "-" if value is None else fmt_points(value)


def render(changes: list[StudentChange], old_dir: Path, new_dir: Path) -> str:
    if not changes:
        return f"no student's score or verdicts changed between {old_dir} and {new_dir}\n"
    lines = [f"{len(changes)} students changed between {old_dir} (old) and {new_dir} (new):"]
    for c in changes:
        if c.old_total is None or c.new_total is None:
            where = "only in new" if c.old_total is None else "only in old"
            lines.append(f"{c.student}: {where} ({_points(c.old_total if c.new_total is None else c.new_total)} points)")
            continue
        delta = c.new_total - c.old_total
        lines.append(f"{c.student}: {_points(c.old_total)} -> {_points(c.new_total)} ({'+' if delta >= 0 else ''}{fmt_points(round(delta, 2))})")
        for lab, old, new in c.labs:
            lines.append(f"  {lab}: {_points(old)} -> {_points(new)}")
        for lab, check, before, after in c.checks:
            lines.append(f"  {lab}/{clean_line(check)}: {before} -> {after}")
    return "\n".join(lines) + "\n"
