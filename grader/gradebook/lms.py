"""Gradebook files a learning management system imports as they are.

**Canvas** (``canvas.csv``): the gradebook import format, the shape of the CSV Canvas exports:
``Student, ID, SIS User ID, SIS Login ID, Section``, then one column per lab named
``Lab title (assignment id)``, a ``Points Possible`` row, then one row per student. Canvas matches
a student by ``ID``, ``SIS User ID`` or ``SIS Login ID`` and an assignment by the id in its
column's name; a column without one makes a new assignment. The identities and the assignment
ids come from a gradebook export the TA downloads from Canvas (``--lms-map``): a student of the
results is found by ``--lms-key`` (default ``SIS Login ID``), a lab by its title or id in a column
name. **Moodle** (``moodle.csv``): one identifier column (``idnumber``, ``email`` or ``username``:
``--lms-key``, taken from a ``student,<key>`` CSV given as ``--lms-map``), then one column per lab
named by its title. Moodle stops the whole import at one unknown user, so a student without an
identifier stops the file from being written at all.

Scores are each lab's points less the student's late penalty (from a collected roster).

The identity cells come from a file a student can reach: a Canvas name is the student's to set. A
TA opens the import file in a spreadsheet before uploading it, where ``=HYPERLINK(...)`` or
``+cmd|...`` would run, so a cell that starts like a formula is escaped with an apostrophe
(``textutil.formula_safe``), as ``grades.csv`` does; a plain number (``-5``) stays as it is. Canvas
matches a row by its ``ID`` (digits, never escaped), so an escaped name or SIS cell still imports;
Moodle matches by the identifier alone, so one that would need escaping stops the file instead.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import GraderError
from ..host.safeio import read_file, write_whole
from ..outcome import fmt_points
from ..textutil import formula_safe, plural
from .records import StudentRecord

FORMATS = ("canvas", "moodle")
CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_KEYS = ("SIS Login ID", "SIS User ID", "ID")
POINTS_POSSIBLE = "    Points Possible"
MOODLE_KEYS = ("idnumber", "email", "username")
FILES = {"canvas": "canvas.csv", "moodle": "moodle.csv"}
#: The most a mapping file (a Canvas export, a Moodle map) may hold.
MAP_LIMIT_BYTES = 64 << 20


def default_key(fmt: str) -> str:
    return CANVAS_KEYS[0] if fmt == "canvas" else MOODLE_KEYS[0]


def check_key(fmt: str, key: str) -> None:
    keys = CANVAS_KEYS if fmt == "canvas" else MOODLE_KEYS
    if key not in keys:
        raise GraderError(f"--lms-key: {fmt} matches students by {', '.join(repr(k) for k in keys)}, not {key!r}")


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        text = read_file(path, MAP_LIMIT_BYTES, "a mapping file").decode("utf-8-sig")
    except UnicodeDecodeError:
        raise GraderError("not UTF-8 text (save it as CSV UTF-8)", path=path) from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items()} for row in reader]
    return header, rows


def _score(record: StudentRecord, lab: str) -> str:
    score = record.score(lab)
    return "" if score is None else fmt_points(round(score * (1 - record.penalty), 2))


def _unmatched(records: Sequence[StudentRecord], known: Mapping[str, Any], path: Path, key: str) -> None:
    missing = [r.student for r in records if r.student not in known]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        have = "has" if len(missing) == 1 else "have"
        raise GraderError(f"{plural(len(missing), 'student')} of the results {have} no {key!r} here: {shown}; the import file was "
                          "not written (add them, or fix their ids)", path=path)


def canvas_columns(labs: Sequence[Mapping[str, Any]], header: list[str]) -> tuple[list[str], list[str]]:
    """Each lab's column name (the export's, with its assignment id, where a column names the lab)
    and what to tell the TA about those that Canvas will create as new assignments."""
    names, notes = [], []
    for lab in labs:
        title, lab_id = str(lab["title"]), str(lab["id"])
        found = [h for h in header if (m := re.fullmatch(r"(.*\S)\s+\((\d+)\)", h)) and m.group(1) in (title, lab_id)]
        names.append(found[0] if found else title)
        if not found:
            notes.append(f"no column for {title!r} in the Canvas export: Canvas will make it a new assignment")
    return names, notes


def canvas_csv(labs: Sequence[Mapping[str, Any]], records: Sequence[StudentRecord], export: Path, key: str) -> tuple[str, list[str]]:
    header, rows = _read(export)
    absent = [c for c in CANVAS_IDENTITY if c not in header]
    if absent:
        raise GraderError(f"not a Canvas gradebook export: no {', '.join(repr(c) for c in absent)} column "
                          "(download it from Grades > Export)", path=export)
    people = {row[key]: row for row in rows if row.get(key) and row.get("Student", "").strip() != "Points Possible"}
    _unmatched(records, people, export, key)
    columns, notes = canvas_columns(labs, header)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*CANVAS_IDENTITY, *columns])
    writer.writerow([POINTS_POSSIBLE, "", "", "", "", *(fmt_points(float(lab["max_points"])) for lab in labs)])
    for r in records:
        person = people[r.student]
        writer.writerow([*(formula_safe(person[c]) for c in CANVAS_IDENTITY), *(_score(r, str(lab["id"])) for lab in labs)])
    return buf.getvalue(), notes


def moodle_csv(labs: Sequence[Mapping[str, Any]], records: Sequence[StudentRecord], mapping: Path, key: str) -> tuple[str, list[str]]:
    header, rows = _read(mapping)
    if "student" not in header or key not in header:
        raise GraderError(f"expected a header with 'student' and {key!r} columns, got {', '.join(header) or 'none'}",
                          path=mapping)
    ids = {row["student"]: row[key] for row in rows if row.get("student") and row.get(key)}
    _unmatched(records, ids, mapping, key)
    chosen = [ids[r.student] for r in records]
    formulas = [(r.student, i) for r, i in zip(records, chosen) if formula_safe(i) != i]
    if formulas:
        sid, ident = formulas[0]
        raise GraderError(f"the {key} of {sid!r}, {ident!r}, starts like a spreadsheet formula: escaped it would not match "
                          f"in Moodle, as it is a spreadsheet would run it; the import file was not written (fix it)",
                          path=mapping)
    twice = sorted({i for i in chosen if chosen.count(i) > 1})
    if twice:
        raise GraderError(f"two students share the {key} {twice[0]!r}; the import file was not written", path=mapping)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([key, *(str(lab["title"]) for lab in labs)])
    for r, ident in zip(records, chosen):
        writer.writerow([ident, *(_score(r, str(lab["id"])) for lab in labs)])
    return buf.getvalue(), []


def export(fmt: str, out: Path, labs: Sequence[Mapping[str, Any]], records: Sequence[StudentRecord], mapping: Path,
           key: str) -> tuple[Path, list[str]]:
    """Write ``FILES[fmt]`` into ``out``; the path and notes for the TA."""
    text, notes = (canvas_csv if fmt == "canvas" else moodle_csv)(labs, records, mapping, key)
    path = out / FILES[fmt]
    write_whole(path, text)
    return path, notes
