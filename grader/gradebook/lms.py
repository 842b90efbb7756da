"""Gradebook files a learning management system imports as they are, from the students' grades of
record (``grader.gradebook.record``): each lab's points less the student's late penalty.

**Canvas** (``canvas.csv``): the gradebook import format, the shape of the CSV Canvas exports: the
export's own student columns (``Student, ID, SIS User ID, SIS Login ID, Section``, or without the
SIS columns ``Student, ID, Section`` for a TA who may not see SIS data, with ``Integration ID`` or
``Root Account`` where the export has them: every form Canvas's importer reads), then one column
per lab named ``Lab title (assignment id)``, a ``Points Possible`` row, then one row per student.
Canvas matches a student by ``ID``, ``SIS User ID`` or ``SIS Login ID`` and an assignment by the id
in its column's name; a column without one makes a new assignment. The identities and the
assignment ids come from a gradebook export the TA downloads from Canvas (``--lms-map``): a
student of the results is found by ``--lms-key`` (default ``SIS Login ID``, else the first of
``SIS User ID`` and ``ID`` the export has), a lab by its title or id in a column name. **Moodle**
(``moodle.csv``): one identifier column (``idnumber``, ``email`` or ``username``: ``--lms-key``,
taken from a ``student,<key>`` CSV given as ``--lms-map``), then one column per lab named by its
title. Moodle stops the whole import at one unknown user, so a student without an identifier
stops the file from being written at all.

Only final grades go to an LMS: a student whose checks did not all run (``partial``) or whose
grading failed (``error``) stops the export, unless a partial one is asked for: then the file is
``canvas.partial.csv`` or ``moodle.partial.csv``. A student not due yet or who handed nothing in
gets blank cells, which both LMSs import as "leave this grade as it is", never a 0. A map is read
and checked against the class's students before any grading (:func:`load`, :func:`check_students`).

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
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import GraderError
from ..host.safeio import read_file, write_whole
from ..outcome import fmt_points
from ..textutil import formula_safe, plural
from .record import GradeOfRecord, grade_of_record
from .records import StudentRecord

FORMATS = ("canvas", "moodle")
CANVAS_KEYS = ("SIS Login ID", "SIS User ID", "ID", "Integration ID")
POINTS_POSSIBLE = "    Points Possible"
MOODLE_KEYS = ("idnumber", "email", "username")
FILES = {"canvas": "canvas.csv", "moodle": "moodle.csv"}
#: The most a mapping file (a Canvas export, a Moodle map) may hold.
MAP_LIMIT_BYTES = 64 << 20
PARTIAL_FILES = {"canvas": "canvas.partial.csv", "moodle": "moodle.partial.csv"}
#: The student columns of a Canvas export, as its importer reads them: the name, ``ID``, then the
#: SIS columns the TA may see, then ``Section``.
CANVAS_NAMES = (("Student",), ("LastName", "FirstName"))
CANVAS_SIS = ((), ("SIS Login ID",), ("SIS User ID", "SIS Login ID"), ("SIS User ID", "SIS Login ID", "Integration ID"),
              ("SIS User ID", "SIS Login ID", "Root Account"), ("SIS User ID", "SIS Login ID", "Integration ID", "Root Account"))


#: An LMS file asked for: its format, its map, the key given (None: the format's default).
Asked = tuple[str, Path, str | None]


@dataclass(frozen=True)
class Target:
    """One LMS file to write, its map read and checked."""

    fmt: str  # canvas or moodle
    mapping: Path
    key: str  # the map's column that holds the results' student ids
    columns: tuple[str, ...]  # the identity columns the file starts with
    header: tuple[str, ...]  # the map's whole header (Canvas: its assignment columns)
    people: Mapping[str, tuple[str, ...]]  # student id -> their identity cells


def check_key(fmt: str, key: str) -> None:
    keys = CANVAS_KEYS if fmt == "canvas" else MOODLE_KEYS
    if key not in keys:
        raise GraderError(f"--lms-key: {fmt} matches students by {', '.join(repr(k) for k in keys)}, not {key!r}")


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        text = read_file(path, MAP_LIMIT_BYTES, "a mapping file").decode("utf-8-sig")
    except UnicodeDecodeError:
        raise GraderError("not UTF-8 text (save it as CSV UTF-8)", path=path) from None
    try:
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in (reader.fieldnames or [])]
        rows = [{(k or "").strip(): (v if isinstance(v, str) else "").strip() for k, v in row.items()} for row in reader]
    except csv.Error as exc:
        raise GraderError(f"not a CSV file ({exc})", path=path) from None
    return header, rows


def canvas_identity(header: Sequence[str], path: Path) -> tuple[str, ...]:
    """The export's student columns (its name column(s), ``ID``, its SIS columns, ``Section``)."""
    for names in CANVAS_NAMES:
        for sis in CANVAS_SIS:
            columns = (*names, "ID", *sis, "Section")
            if tuple(header[: len(columns)]) == columns:
                return columns
    absent = [repr(c) for c in ("Student", "ID", "Section") if c not in header]
    found = (f"no {', '.join(absent)} column" if absent else
             f"its student columns are {', '.join(header[: list(header).index('Section') + 1])}")
    raise GraderError(f"not a Canvas gradebook export: {found}, where Canvas's are Student, ID[, SIS User ID, SIS Login ID"
                      "[, Integration ID]], Section (download it from Grades > Export)", path=path)


def load(fmt: str, mapping: Path, key: str | None = None) -> Target:
    """The map of ``fmt`` read and checked: its columns, its key (``key``, or the format's default)."""
    header, rows = _read(mapping)
    if fmt == "canvas":
        columns = canvas_identity(header, mapping)
        key = key or next(k for k in CANVAS_KEYS if k in columns)  # ID at least
        check_key(fmt, key)
        if key not in columns:
            raise GraderError(f"--lms-key {key!r}: this Canvas export has no such column (it has {', '.join(columns)})",
                              path=mapping)
        name = columns[0]
        found = [(r[key], tuple(r.get(c, "") for c in columns)) for r in rows
                 if r.get(key) and "Points Possible" not in r.get(name, "")]
    else:
        key = key or MOODLE_KEYS[0]
        check_key(fmt, key)
        if "student" not in header or key not in header:
            raise GraderError(f"expected a header with 'student' and {key!r} columns, got {', '.join(header) or 'none'}",
                              path=mapping)
        columns = (key,)
        found = [(r["student"], (r[key],)) for r in rows if r.get("student") and r.get(key)]
    twice = sorted(k for k, n in Counter(k for k, _ in found).items() if n > 1)
    if twice:
        raise GraderError(f"{twice[0]!r} is in the {key if fmt == 'canvas' else 'student'} column twice: which row is "
                          "that student's?", path=mapping)
    return Target(fmt, mapping, key, columns, tuple(header), dict(found))


def asked(formats: Sequence[str], maps: Sequence[Path], keys: Sequence[str]) -> list[Asked]:
    """Each ``--export`` with its ``--lms-map`` (the i-th map for the i-th export) and ``--lms-key``
    (each key goes to the format whose keys it is among)."""
    if not formats:
        if maps or keys:
            raise GraderError("--lms-map and --lms-key go with --export canvas or --export moodle")
        return []
    twice = [f for f in dict.fromkeys(formats) if formats.count(f) > 1]
    if twice:
        raise GraderError(f"--export {twice[0]} is given twice (one file per format)")
    if len(maps) > len(formats):
        raise GraderError(f"{len(maps)} --lms-map for {plural(len(formats), '--export')}: give one map per export, in the same order")
    for fmt, path in zip(formats, [*maps, *([None] * (len(formats) - len(maps)))]):
        if path is None or not path.is_file():
            raise GraderError(f"--export {fmt} needs --lms-map CSV (" + ("the gradebook exported from Canvas"
                              if fmt == "canvas" else "student,<idnumber|email|username>") + ")"
                              + (f": {path} is not a file" if path else ""))
    chosen: dict[str, str] = {}
    for key in keys:
        fmt = formats[0] if len(formats) == 1 else "canvas" if key in CANVAS_KEYS else "moodle"
        check_key(fmt, key)
        if fmt not in formats or fmt in chosen:
            raise GraderError(f"--lms-key {key!r} is {fmt}'s: " + (f"there is no --export {fmt}" if fmt not in formats
                                                                    else f"{fmt} already matches by {chosen[fmt]!r}"))
        chosen[fmt] = key
    return [(fmt, path, chosen.get(fmt)) for fmt, path in zip(formats, maps)]


def targets(wanted: Sequence[Asked], students: Sequence[str]) -> list[Target]:
    """The LMS files asked for, their maps read and checked against the class's ``students``
    (before any grading: a map that misses one stops the run at once)."""
    out = [load(fmt, path, key) for fmt, path, key in wanted]
    for target in out:
        check_students(target, students)
    return out


def check_students(target: Target, students: Sequence[str]) -> None:
    """Every one of ``students`` has an identity in the map, and no two share one (Moodle)."""
    missing = [s for s in students if s not in target.people]
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        have = "has" if len(missing) == 1 else "have"
        raise GraderError(f"{plural(len(missing), 'student')} of the results {have} no {target.key!r} here: {shown}; the "
                          "import file was not written (add them, or fix their ids)", path=target.mapping)
    if target.fmt == "moodle":
        chosen = [target.people[s][0] for s in students]
        twice = sorted({i for i in chosen if chosen.count(i) > 1})
        if twice:
            raise GraderError(f"two students share the {target.key} {twice[0]!r}; Moodle would stop its import",
                              path=target.mapping)


def not_final(grades: Sequence[GradeOfRecord]) -> str:
    """Why an LMS may not take these grades as final ("" when it may): who has no final grade and why."""
    held = [g for g in grades if not g.is_final]
    if not held:
        return ""
    reasons: dict[str, list[str]] = {}
    for g in held:
        reasons.setdefault(f"{g.status}: {g.reason}", []).append(g.student)
    why = "; ".join(f"{len(who)} {reason} ({', '.join(who[:5])}{' ...' if len(who) > 5 else ''})" for reason, who in reasons.items())
    return f"{plural(len(held), 'student')} of {len(grades)} {'has' if len(held) == 1 else 'have'} no final grade: {why}"


def _cell(grade: GradeOfRecord, lab: str) -> str:
    """A lab's points after the late penalty; blank (leave the LMS's grade as it is) without a grade."""
    points = grade.lab_final(lab) if grade.status in ("graded", "partial") else None
    return "" if points is None else fmt_points(points)


def canvas_columns(labs: Sequence[Mapping[str, Any]], header: Sequence[str]) -> tuple[list[str], list[str]]:
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


def render(target: Target, labs: Sequence[Mapping[str, Any]], grades: Sequence[GradeOfRecord]) -> tuple[str, list[str]]:
    """The file's text and notes for the TA (every student of ``grades`` must be in the map)."""
    check_students(target, [g.student for g in grades])
    lab_ids = [str(lab["id"]) for lab in labs]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    notes: list[str] = []
    if target.fmt == "canvas":
        columns, notes = canvas_columns(labs, target.header)
        writer.writerow([*target.columns, *columns])
        writer.writerow([POINTS_POSSIBLE, *([""] * (len(target.columns) - 1)),
                         *(fmt_points(float(lab["max_points"])) for lab in labs)])
    else:
        writer.writerow([target.key, *(str(lab["title"]) for lab in labs)])
    for g in grades:
        writer.writerow([*_identity(target, g.student), *(_cell(g, lab) for lab in lab_ids)])
    blank = [g.student for g in grades if g.status in ("not_due", "not_handed_in", "error")]
    if blank:
        notes.append(f"left blank (the LMS keeps what it has): {', '.join(blank)}")
    return buf.getvalue(), notes


def _identity(target: Target, student: str) -> list[str]:
    """A student's identity cells as the file holds them: a Canvas cell that starts like a formula
    escaped; a Moodle identifier that would need it stops the file (escaped it would not match)."""
    cells = target.people[student]
    if target.fmt == "canvas":
        return [formula_safe(c) for c in cells]
    unsafe = [c for c in cells if formula_safe(c) != c]
    if unsafe:
        raise GraderError(f"the {target.key} of {student!r}, {unsafe[0]!r}, starts like a spreadsheet formula: escaped it "
                          "would not match in Moodle, as it is a spreadsheet would run it; the import file was not written "
                          "(fix it)", path=target.mapping)
    return list(cells)


def canvas_csv(labs: Sequence[Mapping[str, Any]], records: Sequence[StudentRecord], export: Path,
               key: str | None = None) -> tuple[str, list[str]]:
    """``canvas.csv``'s text for ``records`` (all checks run) from a Canvas export."""
    return render(load("canvas", export, key), labs, [grade_of_record(r, ()) for r in records])


def moodle_csv(labs: Sequence[Mapping[str, Any]], records: Sequence[StudentRecord], mapping: Path,
               key: str | None = None) -> tuple[str, list[str]]:
    """``moodle.csv``'s text for ``records`` (all checks run) from a ``student,<key>`` map."""
    return render(load("moodle", mapping, key), labs, [grade_of_record(r, ()) for r in records])


def export(target: Target, out: Path, labs: Sequence[Mapping[str, Any]], grades: Sequence[GradeOfRecord],
           partial: bool = False) -> tuple[Path, list[str]]:
    """Write ``target``'s file into ``out`` (``*.partial.csv`` with ``partial``), removing the file
    of the other kind an earlier run left there (it no longer matches ``grades.csv``)."""
    text, notes = render(target, labs, grades)
    path = out / (PARTIAL_FILES if partial else FILES)[target.fmt]
    withdraw(out, target.fmt)
    write_whole(path, text)
    return path, notes


def write_all(wanted: Sequence[Target], out: Path, labs: Sequence[Mapping[str, Any]], grades: Sequence[GradeOfRecord],
              allow_partial: bool) -> list[str]:
    """Write each LMS file asked for from ``grades``; what to tell the TA. Grades that are not all
    final stop every file (an error naming who and why; an earlier run's files go) unless
    ``allow_partial``: then each is written under its partial name."""
    why = not_final(grades)
    if why and wanted and not allow_partial:
        for target in wanted:
            withdraw(out, target.fmt)
        names = " and ".join(PARTIAL_FILES[t.fmt] for t in wanted)
        raise GraderError(f"--export: no LMS file written, an LMS takes final grades only: {why}; --allow-partial writes "
                          f"{names} instead (grades.csv and summary.md are written)")
    lines = []
    for target in wanted:
        path, notes = export(target, out, labs, grades, partial=bool(why))
        mark = " NOT FINAL: partial grades, as --allow-partial asked" if why else ""
        lines += [f"{target.fmt}: {path} ({plural(len(grades), 'student')}, matched by {target.key}){mark}",
                  *(f"  {note}" for note in notes)]
    return lines


def withdraw(out: Path, fmt: str) -> list[Path]:
    """Remove the LMS files of ``fmt`` an earlier run wrote into ``out``; the paths removed."""
    gone = []
    for name in (FILES[fmt], PARTIAL_FILES[fmt]):
        path = out / name
        if path.exists() or path.is_symlink():
            path.unlink()
            gone.append(path)
    return gone
