"""Gradebook files Canvas and Moodle import as they are, checked against each format's rules:
Canvas's gradebook import (the shape of its own export: five identity columns, ``Title (id)``
assignment columns, a Points Possible row) and Moodle's CSV grade import (one identifier column,
every student known)."""

from __future__ import annotations

import csv
import io
import re
import shutil

import pytest

from grader import cli
from grader.errors import GraderError
from grader.gradebook import lms
from grader.gradebook.records import LabScore, StudentRecord
from grader.labspec.labs import find_lab

LABS = [{"id": "tiled_matmul", "title": "Tiled matrix multiplication", "max_points": 24},
        {"id": "histogram", "title": "Parallel histogram", "max_points": 32}]
CANVAS_EXPORT = """Student,ID,SIS User ID,SIS Login ID,Section,Tiled matrix multiplication (4411),Quiz 1 (4409),Current Score
    Points Possible,,,,,24.00,10.00,(read only)
"Doe, Jane",101,2001,jdoe,CS 4xx Section 1,,8.00,80.00
"Roe, Rick",102,2002,rroe,CS 4xx Section 2,,7.00,70.00
"Student, Test",103,,test-student,CS 4xx Section 1,,,
"""


def _record(sid: str, tiled: float, hist: float, penalty: float | None = None) -> StudentRecord:
    late = {"late_days": 1, "penalty": penalty, "flags": []} if penalty is not None else None
    return StudentRecord(sid, (LabScore("tiled_matmul", tiled, 24), LabScore("histogram", hist, 32)), (), late=late)


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def check_canvas_rules(text: str, export: str) -> None:
    """Canvas's gradebook import: the identity columns first, as its export names them; each
    assignment column ``Title (assignment id)`` (without an id Canvas makes a new assignment); the
    Points Possible row; one row per student whose identity cells are the export's; scores numbers
    within the points possible."""
    rows, source = _rows(text), _rows(export)
    assert rows[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    known_ids = {m.group(1) for h in source[0] if (m := re.fullmatch(r".*\((\d+)\)", h))}
    for column in rows[0][5:]:
        m = re.fullmatch(r"(.+\S) \((\d+)\)", column)
        assert m is None or m.group(2) in known_ids, column
    assert rows[1][0].strip() == "Points Possible" and all(float(p) > 0 for p in rows[1][5:])
    identities = {tuple(r[:5]) for r in source[2:]}
    for row in rows[2:]:
        assert tuple(row[:5]) in identities
        for score, possible in zip(row[5:], rows[1][5:]):
            assert score == "" or 0 <= float(score) <= float(possible)


def test_canvas_reuses_the_exports_identities_and_assignment_ids(tmp_path):
    export = tmp_path / "canvas-export.csv"
    export.write_text(CANVAS_EXPORT)
    text, notes = lms.canvas_csv(LABS, [_record("jdoe", 24, 30), _record("rroe", 12, 16, penalty=0.25)], export, "SIS Login ID")
    check_canvas_rules(text, CANVAS_EXPORT)
    rows = _rows(text)
    assert rows[0][5:] == ["Tiled matrix multiplication (4411)", "Parallel histogram"]
    assert notes == ["no column for 'Parallel histogram' in the Canvas export: Canvas will make it a new assignment"]
    assert rows[1] == ["    Points Possible", "", "", "", "", "24", "32"]
    assert rows[2] == ["Doe, Jane", "101", "2001", "jdoe", "CS 4xx Section 1", "24", "30"]
    assert rows[3][3:] == ["rroe", "CS 4xx Section 2", "9", "12"]  # a quarter taken for lateness
    by_user_id, _ = lms.canvas_csv(LABS, [_record("2002", 1, 1)], export, "SIS User ID")
    assert _rows(by_user_id)[2][0] == "Roe, Rick"


def test_canvas_refuses_a_student_it_cannot_match_and_a_file_that_is_not_its_export(tmp_path):
    export = tmp_path / "canvas-export.csv"
    export.write_text(CANVAS_EXPORT)
    with pytest.raises(GraderError, match=r"2 students of the results have no 'SIS Login ID' here: alice, bob; "
                                          r"the import file was not written"):
        lms.canvas_csv(LABS, [_record("jdoe", 1, 1), _record("alice", 1, 1), _record("bob", 1, 1)], export, "SIS Login ID")
    export.write_text("student,total\nalice,3\n")
    with pytest.raises(GraderError, match=r"canvas-export.csv: not a Canvas gradebook export: no 'Student', 'ID'"):
        lms.canvas_csv(LABS, [_record("alice", 1, 1)], export, "SIS Login ID")
    with pytest.raises(GraderError, match="--lms-key: canvas matches students by"):
        lms.check_key("canvas", "email")


def test_moodle_is_keyed_by_the_chosen_identifier_and_refuses_an_unknown_student(tmp_path):
    mapping = tmp_path / "moodle-ids.csv"
    mapping.write_text("student,email,idnumber\njdoe,jane@uni.example,S1\nrroe,rick@uni.example,S2\n")
    text, _ = lms.moodle_csv(LABS, [_record("jdoe", 24, 30), _record("rroe", 12, 16, penalty=0.5)], mapping, "email")
    assert _rows(text) == [["email", "Tiled matrix multiplication", "Parallel histogram"],
                           ["jane@uni.example", "24", "30"], ["rick@uni.example", "6", "8"]]
    with pytest.raises(GraderError, match=r"1 student of the results has no 'idnumber' here: alice"):
        lms.moodle_csv(LABS, [_record("jdoe", 1, 1), _record("alice", 1, 1)], mapping, "idnumber")
    mapping.write_text("student,idnumber\njdoe,S1\nrroe,S1\n")
    with pytest.raises(GraderError, match="two students share the idnumber 'S1'"):
        lms.moodle_csv(LABS, [_record("jdoe", 1, 1), _record("rroe", 1, 1)], mapping, "idnumber")
    with pytest.raises(GraderError, match="expected a header with 'student' and 'username' columns"):
        lms.moodle_csv(LABS, [_record("jdoe", 1, 1)], mapping, "username")


def test_an_export_without_its_map_stops_before_anything_is_graded(tmp_path, capsys):
    code = cli.main(["grade-class", str(tmp_path), "--out", str(tmp_path / "out"), "--export", "canvas"])
    assert code == 2 and "--export canvas needs --lms-map CSV (the gradebook exported from Canvas)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    code = cli.main(["grade-class", str(tmp_path), "--out", str(tmp_path / "out"), "--lms-key", "email"])
    assert code == 2 and "go with --export" in capsys.readouterr().err


def test_grade_class_writes_the_moodle_file_beside_grades_csv(tmp_path, capsys):
    """Graded on the CPU the grades are partial: the file is written only as asked (--allow-partial),
    under its partial name."""
    repos = tmp_path / "repos"
    for sid in ("jdoe", "rroe"):
        target = repos / sid / "labs" / "tiled_matmul" / "student.cu"
        target.parent.mkdir(parents=True)
        shutil.copy(find_lab("tiled_matmul").files.reference, target)
    mapping = tmp_path / "ids.csv"
    mapping.write_text("student,username\njdoe,jane\nrroe,rick\n")
    out = tmp_path / "out"
    code = cli.main(["grade-class", str(repos), "--out", str(out), "--lab", "tiled_matmul", "--no-gpu", "-q",
                     "--export", "moodle", "--lms-map", str(mapping), "--lms-key", "username", "--allow-partial"])
    printed = capsys.readouterr().out
    assert code == 0 and f"moodle: {out / 'moodle.partial.csv'} (2 students, matched by username) NOT FINAL" in printed
    with open(out / "grades.csv", newline="", encoding="utf-8") as fh:
        grades = {r["student"]: r["tiled_matmul"] for r in csv.DictReader(fh)}
    assert not (out / "moodle.csv").exists()
    assert _rows((out / "moodle.partial.csv").read_text()) == [["username", "Tiled matrix multiplication"],
                                                       ["jane", grades["jdoe"]], ["rick", grades["rroe"]]]
