"""``cuda-grader diff OLD NEW``: every student whose grade of record (its status, points, late
penalty, the commit that counts), lab scores or check verdicts changed between two class runs
(after a lab or grader change, a new collection, a late policy changed), and the students only one
of them has."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import GraderError
from ..outcome import fmt_points
from ..textutil import clean_line
from . import grades as gradebook
from . import records
from .record import GradeOfRecord
from .records import StudentRecord, student_folder


@dataclass(frozen=True)
class StudentChange:
    student: str
    old: GradeOfRecord | None  # None: not in OLD
    new: GradeOfRecord | None  # None: not in NEW
    labs: tuple[tuple[str, float | None, float | None], ...] = ()  # (lab, old, new) where the score changed
    checks: tuple[tuple[str, str, str, str], ...] = ()  # (lab, check, old outcome, new outcome) where it changed
    grade: tuple[tuple[str, str, str], ...] = ()  # (what, old, new) where the grade of record's status, penalty, late days or commit changed


def _students(folder: Path) -> dict[str, tuple[StudentRecord, GradeOfRecord]]:
    if not folder.is_dir():
        raise GraderError("results folder not found", path=folder)
    manifest = gradebook.read_manifest(folder)
    rows = [records.load(student_folder(folder, sid), sid) for sid in manifest.students]
    return {r.student: (r, g) for r, g in zip(rows, gradebook.grades_of_record(manifest, rows))}


def _facts(g: GradeOfRecord) -> dict[str, str]:
    """What of a grade of record ``diff`` compares besides its points."""
    return {"grade_status": g.status, "penalty": fmt_points(round(g.penalty, 4)),
            "late days": "-" if g.late_days is None else str(g.late_days), "commit": (g.commit or "-")[:12]}


def _compare(sid: str, old: tuple[StudentRecord, GradeOfRecord], new: tuple[StudentRecord, GradeOfRecord]) -> StudentChange | None:
    (old_r, old_g), (new_r, new_g) = old, new
    labs = sorted({s.lab for s in old_r.labs} | {s.lab for s in new_r.labs})
    lab_changes = tuple((lab, old_r.score(lab), new_r.score(lab)) for lab in labs if old_r.score(lab) != new_r.score(lab))
    before = {(v.lab, v.check): v.outcome for v in old_r.verdicts}
    after = {(v.lab, v.check): v.outcome for v in new_r.verdicts}
    keys = list(before) + [k for k in after if k not in before]
    checks = tuple((lab, check, before.get((lab, check), "-"), after.get((lab, check), "-")) for lab, check in keys
                   if before.get((lab, check)) != after.get((lab, check)))
    was, now = _facts(old_g), _facts(new_g)
    grade = tuple((k, was[k], now[k]) for k in was if was[k] != now[k])
    if not lab_changes and not checks and not grade and old_g.final == new_g.final:
        return None
    return StudentChange(sid, old_g, new_g, lab_changes, checks, grade)


def diff(old_dir: Path, new_dir: Path) -> list[StudentChange]:
    old, new = _students(old_dir), _students(new_dir)
    changes = []
    for sid in list(old) + [s for s in new if s not in old]:
        if sid not in new:
            changes.append(StudentChange(sid, old[sid][1], None))
        elif sid not in old:
            changes.append(StudentChange(sid, None, new[sid][1]))
        else:
            change = _compare(sid, old[sid], new[sid])
            if change is not None:
                changes.append(change)
    return changes


def _points(value: float | None) -> str:
    return "-" if value is None else fmt_points(value)


def _grade(g: GradeOfRecord) -> str:
    """The grade, or the status that stands for it (``not due``, ``not handed in``, ``error``)."""
    return fmt_points(g.final) if g.final is not None else g.status.replace("_", " ")


def render(changes: list[StudentChange], old_dir: Path, new_dir: Path) -> str:
    if not changes:
        return (f"no student's score or verdicts changed between {old_dir} and {new_dir} (nor their grade of record: "
                "status, penalty, late days, commit)\n")
    lines = [f"{len(changes)} students changed between {old_dir} (old) and {new_dir} (new):"]
    for c in changes:
        if c.old is None or c.new is None:
            where, g = ("only in new", c.new) if c.old is None else ("only in old", c.old)
            assert g is not None
            lines.append(f"{c.student}: {where} ({_grade(g)}{' points' if g.final is not None else ''})")
            continue
        line = f"{c.student}: {_grade(c.old)} -> {_grade(c.new)}"
        if c.old.final is not None and c.new.final is not None:
            delta = round(c.new.final - c.old.final, 2)
            line += f" ({'+' if delta >= 0 else ''}{fmt_points(delta)})"
        lines.append(line)
        for what, before, after in c.grade:
            lines.append(f"  {what}: {before} -> {after}")
        for lab, old, new in c.labs:
            lines.append(f"  {lab}: {_points(old)} -> {_points(new)}")
        for lab, check, outcome_before, outcome_after in c.checks:
            lines.append(f"  {lab}/{clean_line(check)}: {outcome_before} -> {outcome_after}")
    return "\n".join(lines) + "\n"
