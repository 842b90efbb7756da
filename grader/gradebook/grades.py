"""The class-wide files of a results folder: ``grades.csv``, ``summary.md`` (with its pictures),
``dashboard.html`` and ``class.json``, all made from the students' published reports.

``class.json`` says what the folder holds: the labs (id, title, points, version), every student of
the roster in roster order, the shard it was (or null), the students graded in it, the grader and
the options. ``merge`` checks shards against each other with it.

``grades.csv`` (documented in the README; ``schemas/grades.schema.json`` describes a row) is the
students' grades of record (``grader.gradebook.record``): ``student`` first, then one column per
lab (points), ``total`` (the grade, after the late penalty), ``max_total``, ``status`` (``ok`` or
``error``: whether a check errored), ``problems`` (the first error of each lab that hit one),
``commit`` (the commit graded) and ``not_run`` (the families of checks that did not run for the
student: ``gpu``, or ``timing``, ``counters``, ``sanitizers`` turned off; a row with any is not a
final grade), then, from a roster written by ``cuda-grader collect``, ``raw_total`` (before the
late penalty), ``late_days``, ``penalty`` (the fraction taken) and ``late_flags`` (what the commits
claimed that the collection contradicts, force pushes, which collected commit counts and why),
``grade_status`` (``graded``, ``partial``, ``not_due``, ``not_handed_in``, ``error``), and last
``sandbox``: ``bubblewrap`` where the student's code ran in the sandbox, ``none`` where it ran
without (``--no-sandbox``): such a grade holds only as far as the student's code can be trusted. A
student not due yet, or who handed nothing in, has no points: their lab and total cells are empty.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import GraderError
from ..host.safeio import write_whole
from ..outcome import fmt_points
from ..textutil import sheet_cell
from . import dashboard, records, summary
from .record import GradeOfRecord, grade_of_record
from .records import StudentRecord, student_folder

MANIFEST = "class.json"
GRADES = "grades.csv"
SUMMARY = "summary.md"
MANIFEST_VERSION = 1
#: The columns of grades.csv after the labs'.
TAIL_COLUMNS = ("total", "max_total", "status", "problems", "commit", "not_run", "raw_total", "late_days", "penalty", "late_flags",
                "grade_status", "sandbox")
#: The option of each family of GPU checks that can be turned off (class.json's options).
FAMILIES = ("timing", "counters", "sanitizers")


@dataclass(frozen=True)
class Manifest:
    labs: tuple[Mapping[str, Any], ...]  # id, title, max_points, version
    roster: tuple[str, ...]  # every student of the class, in roster order
    students: tuple[str, ...]  # those graded in this folder
    shard: str | None
    grader: Mapping[str, str]  # version, source
    options: Mapping[str, Any]

    @property
    def lab_ids(self) -> list[str]:
        return [str(lab["id"]) for lab in self.labs]

    @property
    def max_total(self) -> float:
        return round(sum(float(lab["max_points"]) for lab in self.labs), 2)

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": MANIFEST_VERSION, "labs": [dict(lab) for lab in self.labs], "roster": list(self.roster),
                "shard": self.shard, "students": list(self.students), "grader": dict(self.grader),
                "options": dict(self.options)}


def read_manifest(folder: Path) -> Manifest:
    path = folder / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return Manifest(tuple(doc["labs"]), tuple(doc["roster"]), tuple(doc["students"]), doc["shard"],
                        dict(doc["grader"]), dict(doc["options"]))
    except FileNotFoundError:
        raise GraderError(f"no {MANIFEST}: not the results of `cuda-grader grade-class`, or its run did not finish",
                          path=folder) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GraderError(f"unreadable ({type(exc).__name__}: {exc})", path=path) from None


def not_run(manifest: Manifest, record: StudentRecord) -> tuple[str, ...]:
    """The families of checks that did not run for ``record``: ``gpu`` (then none of them ran), or
    those the run's options turned off."""
    if record.without_gpu or manifest.options.get("gpu") is False:
        return ("gpu",)
    return tuple(f for f in FAMILIES if manifest.options.get(f) is False)


def sandbox_column(record: StudentRecord) -> str:
    """``bubblewrap``, ``none`` (the student's code ran unsandboxed), or "" where nothing is known."""
    if record.unsandboxed:
        return "none"
    return "bubblewrap" if record.sandbox.startswith("bubblewrap") else ""


def grades_of_record(manifest: Manifest, rows: Sequence[StudentRecord]) -> list[GradeOfRecord]:
    """Each student's grade of record, with the checks the run's options turned off."""
    return [grade_of_record(r, not_run(manifest, r)) for r in rows]


def _points(value: float | None) -> str:
    return "" if value is None else fmt_points(value)


def grades_csv(manifest: Manifest, rows: Sequence[StudentRecord]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["student", *manifest.lab_ids, *TAIL_COLUMNS])
    for r, g in zip(rows, grades_of_record(manifest, rows)):
        scores = [_points(r.score(lab) if g.scored else None) for lab in manifest.lab_ids]
        writer.writerow([r.student, *scores, _points(g.final), fmt_points(manifest.max_total), r.status,
                         sheet_cell("; ".join(r.problems)), g.commit or "", " ".join(g.not_run), _points(g.raw),
                         "" if g.late_days is None else str(g.late_days), f"{g.penalty:.4g}" if r.late and g.scored else "",
                         sheet_cell(" | ".join(g.flags)), g.status, sandbox_column(r)])
    return buf.getvalue()


def write(out: Path, manifest: Manifest) -> list[StudentRecord]:
    """class.json, grades.csv, summary.md and its pictures for the students of ``manifest``."""
    rows = [records.load(student_folder(out, sid), sid) for sid in manifest.students]
    write_whole(out / MANIFEST, json.dumps(manifest.as_dict(), indent=2) + "\n")
    write_whole(out / GRADES, grades_csv(manifest, rows))
    skipped = {r.student: not_run(manifest, r) for r in rows}
    write_whole(out / SUMMARY, summary.write(out, manifest.labs, rows, skipped))
    write_whole(out / dashboard.NAME, dashboard.render(manifest, rows, skipped))
    return rows
