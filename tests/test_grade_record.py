"""One grade of record per student, used by every output of a class: the late penalty, which
collected commit counts (``graded_commit: latest`` or ``best``), students not due yet or who handed
nothing in, and LMS files written from final grades only.

Collections come from local bare repositories with a fixed clock; a class graded on the CPU has
its GPU checks skipped, so its grades are partial by nature. Final grades (a GPU named in each
report) are built as the students' published ``report.json`` files directly and go through the
same commands (``merge``, ``diff``)."""

from __future__ import annotations

import contextlib
import csv
import datetime
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_collect import DAY, DEADLINE, HOUR, POLICY, Student, _git

from grader import cli
from grader.classroom import roster
from grader.classroom.collect import ROSTER, STATE, collect, load_entries
from grader.errors import GraderError, SpecError
from grader.gradebook import lms
from grader.gradebook.late import LatePolicy, load_policy
from grader.labspec.labs import find_lab

LAB = "tiled_matmul"
GPU = "NVIDIA H100 80GB HBM3"
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


# ------------------------------------------------------------------ repositories and results built here


def _push(remote: Student, source: Path, note: str, dated: datetime.datetime) -> str:
    """Commit ``source`` (with ``note``) as the student's lab file at ``dated`` and push it."""
    commit = remote.commit(note, dated, source)
    remote.push()
    return commit


def _reference() -> Path:
    return find_lab(LAB).files.reference


def _stub() -> Path:
    return Path(__file__).resolve().parent.parent / "student_template" / "labs" / LAB / "student.cu"


def _main(*args: str) -> tuple[int, str]:
    """The command's exit code and what it printed (for fixtures shared by a module's tests)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return code, out.getvalue() + err.getvalue()


def _csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return {r["student"]: r for r in csv.DictReader(fh)}


def _valid(out: Path) -> None:
    """Every row of grades.csv and every student's report.json as their schemas describe them."""
    import jsonschema

    schemas = Path(__file__).resolve().parent.parent / "schemas"
    rows = jsonschema.Draft202012Validator(json.loads((schemas / "grades.schema.json").read_text()))
    text = ("student", "status", "problems", "commit", "not_run", "late_flags", "grade_status", "sandbox")
    for row in _csv(out / "grades.csv").values():
        rows.validate({k: v if k in text or v == "" else int(v) if k == "late_days" else float(v) for k, v in row.items()})
    reports = jsonschema.Draft202012Validator(json.loads((schemas / "report.schema.json").read_text()))
    for report in (out / "students").glob("*/report.json"):
        reports.validate(json.loads(report.read_text()))


def _lines(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))


LABS = [{"id": "tiled_matmul", "title": "Tiled matrix multiplication", "max_points": 24, "version": "v1"},
        {"id": "histogram", "title": "Parallel histogram", "max_points": 32, "version": "v2"}]


def _check(check: str, outcome: str, points: float, most: float, message: str = "") -> dict[str, Any]:
    return {"id": check, "outcome": outcome, "points": points, "max_points": most, "message": message}


def _graded(tiled: float, hist: float) -> list[dict[str, Any]]:
    return [{"lab": "tiled_matmul", "score": tiled, "max_score": 24,
             "checks": [_check("compile", "pass", 0, 0), _check("correctness[small]", "pass", tiled, 24)]},
            {"lab": "histogram", "score": hist, "max_score": 32,
             "checks": [_check("compile", "pass", 0, 0), _check("correctness[small]", "pass", hist, 32)]}]


def _failed(message: str) -> list[dict[str, Any]]:
    """Every lab stopped by one reason, as the class's plan records a student with nothing to grade."""
    return [{"lab": lab["id"], "score": 0, "max_score": lab["max_points"],
             "checks": [_check("compile", "error", 0, 0, message),
                        _check("correctness[small]", "fail", 0, lab["max_points"], "not graded: nothing to grade")]}
            for lab in LABS]


def _late(days: int, penalty: float, **more: Any) -> dict[str, Any]:
    return {"deadline": "2026-12-01T23:59:00Z", "collected_at": "2026-12-02T20:00:00Z", "late_days": days,
            "penalty": penalty, "flags": [], **more}


def _class(out: Path, students: dict[str, tuple[list[dict[str, Any]], dict[str, Any] | None]], gpu: str = GPU,
           shard: str | None = "1/1") -> Path:
    """A results folder as a run publishes it: class.json and each student's report.json."""
    for sid, (labs, late) in students.items():
        folder = out / "students" / sid
        folder.mkdir(parents=True)
        identity = {"student": sid, "commit": "c" * 40, "gpu": gpu, "late": late}
        (folder / "report.json").write_text(json.dumps({"identity": identity, "labs": labs}))
    manifest = {"schema_version": 1, "labs": LABS, "roster": list(students), "students": list(students), "shard": shard,
                "grader": {"version": "0", "source": "s"}, "options": {"gpu": True, "timing": True, "counters": True,
                                                                     "sanitizers": True}}
    (out / "class.json").write_text(json.dumps(manifest))
    return out


#: The class every LMS test exports: a late student, one whose extension is not due, one who
#: handed nothing in, and one on time.
CLASS = {
    "jdoe": (_graded(24, 30), _late(0, 0.0)),
    "late": (_graded(12, 20), _late(1, 0.1)),
    "ext": (_failed("collect: not collected yet (deadline 2026-12-04T23:59:00Z)"), None),
    "gone": (_failed("collect: the repository is empty (no commit on its default branch)"), None),
}
CANVAS_SIS = """Student,ID,SIS User ID,SIS Login ID,Section,Tiled matrix multiplication (4411),Current Score
    Points Possible,,,,,24.00,(read only)
"Doe, Jane",101,2001,jdoe,S1,,
"Late, Lou",102,2002,late,S1,,
"Ext, Eve",103,2003,ext,S2,,
"Gone, Gus",104,2004,gone,S2,,
"""
MOODLE_IDS = "student,idnumber\njdoe,S1\nlate,S2\next,S3\ngone,S4\n"


def _maps(tmp_path: Path) -> tuple[Path, Path]:
    canvas, moodle = tmp_path / "canvas-export.csv", tmp_path / "moodle-ids.csv"
    canvas.write_text(CANVAS_SIS)
    moodle.write_text(MOODLE_IDS)
    return canvas, moodle


# ------------------------------------------------------------------ one grade of record


def test_every_status_of_the_grade_of_record_comes_from_the_published_reports():
    """The closed set of statuses: a not-due extension, an empty repository, a repository without
    labs/, no lab file at all, a CPU-only grading, a lost lane, the grader's own error, access
    denied, and a final grade with its late penalty."""
    from grader.gradebook.record import STATUSES, grade_of_record
    from grader.gradebook.records import record_from

    def status(labs: list[dict[str, Any]], gpu: str = GPU, late: dict[str, Any] | None = None) -> tuple[str, str]:
        g = grade_of_record(record_from({"identity": {"gpu": gpu, "late": late}, "labs": labs}, "s"))
        assert g.status in STATUSES
        return g.status, g.reason

    missing = [{**lab, "checks": [_check("compile", "error", 0, 0, f"labs/{lab['lab']}/student.cu not found: hand it in"),
                                  *lab["checks"][1:]]} for lab in _failed("x")]
    assert status(_failed("collect: not collected yet (deadline 2026-12-04T23:59:00Z)")) == \
        ("not_due", "not collected yet (deadline 2026-12-04T23:59:00Z)")
    assert status(_failed("collect: the repository is empty (no commit on its default branch)"))[0] == "not_handed_in"
    assert status(_failed("the repository has no labs/ folder (expected labs/<lab>/student.cu)"))[0] == "not_handed_in"
    assert status(_failed("repository not found: repos/frank (roster line 7)"))[0] == "not_handed_in"
    assert status(missing)[0] == "not_handed_in"
    assert status(_graded(12, 20), gpu="none: no NVIDIA GPU found") == \
        ("partial", "the GPU checks did not run (no NVIDIA GPU found)")
    assert status(_failed("the grading process died (killed, or out of memory) while grading this student"))[0] == "partial"
    assert status(_failed("internal grader error 1a2b (RuntimeError: x); the trace is in /tmp/x.log"))[0] == "partial"
    assert status(_failed("collect: access denied (private: give this account read access)"))[0] == "error"
    g = grade_of_record(record_from({"identity": {"gpu": GPU, "late": _late(1, 0.1)}, "labs": _graded(12, 20)}, "lou"))
    assert (g.status, g.raw, g.final, g.penalty, g.late_days, g.max) == ("graded", 32, 28.8, 0.1, 1, 56)
    assert (g.lab_final("tiled_matmul"), g.lab_final("histogram")) == (10.8, 18)
    assert g.score_text == "28.8/56 (32 before a 10% late penalty: 1 late day)"


def test_grades_csv_and_summary_give_the_grade_of_record_and_list_the_students_without_one_apart(tmp_path):
    """A student whose extension is not due and one with an empty repository have no points in
    grades.csv (not 0), a status saying why, and their own sections of summary.md, not the errors'."""
    from grader.gradebook import grades as gradebook

    out = _class(tmp_path / "class", CLASS)
    gradebook.write(out, gradebook.read_manifest(out))
    rows = _csv(out / "grades.csv")
    assert [rows[s]["grade_status"] for s in CLASS] == ["graded", "graded", "not_due", "not_handed_in"]
    assert (rows["late"]["total"], rows["late"]["raw_total"], rows["late"]["penalty"], rows["late"]["late_days"]) == \
        ("28.8", "32", "0.1", "1")
    assert [rows["ext"][k] for k in ("tiled_matmul", "histogram", "total", "raw_total")] == ["", "", "", ""]
    assert [rows["gone"][k] for k in ("tiled_matmul", "total")] == ["", ""]
    summary = (out / "summary.md").read_text()
    errors = summary[summary.index("## Students whose grading hit an error"):summary.index("## Not due yet")]
    assert errors.startswith("## Students whose grading hit an error (0)") and "`ext`" not in errors
    assert "## Not due yet (1)\n\n| Student | Why |\n|---|---|\n| `ext` | not collected yet (deadline 2026-12-04T23:59:00Z) |" in summary
    assert "## Not handed in (1)" in summary and "| `gone` | the repository is empty" in summary
    assert "Grades of record: 2 graded, 1 not due yet, 1 not handed in." in summary
    total = next(ln for ln in summary.splitlines() if ln.startswith("| **total** | 56 |"))
    assert total.split("|")[3].strip() == "41.4"  # the mean of 54 and 28.8: the two students with a grade


def test_diff_compares_the_grade_of_record_a_penalty_alone_included(tmp_path):
    """Only the late penalty changed between two runs (a corrected roster): diff says so, exit 1."""
    before = _class(tmp_path / "before", {"late": (_graded(12, 20), _late(1, 0.1))})
    after = _class(tmp_path / "after", {"late": (_graded(12, 20), _late(2, 0.2))})
    code = cli.main(["diff", str(before), str(after)])
    assert code == 1


def test_diff_says_which_part_of_the_grade_changed(tmp_path, capsys):
    before = _class(tmp_path / "before", {"late": (_graded(12, 20), _late(1, 0.1)),
                                          "ext": (_failed("collect: not collected yet (deadline x)"), None)})
    after = _class(tmp_path / "after", {"late": (_graded(12, 20), _late(2, 0.2)), "ext": (_graded(24, 32), _late(0, 0.0))})
    assert cli.main(["diff", str(before), str(after)]) == 1
    printed = capsys.readouterr().out
    assert "late: 28.8 -> 25.6 (-3.2)\n  penalty: 0.1 -> 0.2\n  late days: 1 -> 2\n" in printed
    assert "ext: not due -> 56\n  grade_status: not_due -> graded\n" in printed


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> tuple[Path, str]:
    """A class collected from bare repositories at a fixed clock and graded on the CPU with its
    LMS files asked for as partial: ``late`` handed the reference in 20 hours after the deadline
    (1 day late, 10%), ``ext`` has an extension of 3 days (not due at the collection), ``empty``
    pushed nothing, ``ontime`` handed the reference in on time."""
    base = tmp_path_factory.mktemp("collected")
    remotes = {sid: Student(base, sid) for sid in ("late", "ext", "ontime")}
    _push(remotes["late"], _stub(), "started", DEADLINE - DAY)
    _push(remotes["ext"], _stub(), "started", DEADLINE - DAY)
    _push(remotes["ontime"], _reference(), "done", DEADLINE - DAY)
    _git(base, "init", "--quiet", "--bare", str(base / "remotes" / "empty.git"))
    (base / "collect.csv").write_text("student,repository,extension\n" + "\n".join(
        f"{sid},remotes/{sid}.git,{3 if sid == 'ext' else ''}" for sid in ("late", "ext", "empty", "ontime")) + "\n")
    entries = load_entries(base / "collect.csv", DEADLINE)
    folder = base / "collected"
    collect(entries, folder, POLICY, now=DEADLINE, allow_local=True)
    _push(remotes["late"], _reference(), "done late", DEADLINE + HOUR)
    collect(entries, folder, POLICY, now=DEADLINE + 20 * HOUR, allow_local=True)
    (base / "canvas-export.csv").write_text(CANVAS_SIS.replace("jdoe", "ontime").replace(",gone,", ",empty,"))
    (base / "moodle-ids.csv").write_text(MOODLE_IDS.replace("jdoe", "ontime").replace("gone", "empty"))
    out = base / "results"
    code, printed = _main("grade-class", "--roster", str(folder / ROSTER), "--out", str(out), "--lab", LAB, "--no-gpu", "-q",
                          "--allow-partial", "--export", "canvas", "--lms-map", str(base / "canvas-export.csv"),
                          "--export", "moodle", "--lms-map", str(base / "moodle-ids.csv"))
    assert code == 0, printed
    return out, printed


def test_a_collected_class_gives_each_student_one_grade_in_every_output(collected):
    """grades.csv, results.json (Gradescope's score), report.md and the LMS files agree: the late
    student's grade is after the penalty everywhere (raw score beside it), the student whose
    extension is not due and the one who pushed nothing have no grade (blank, never 0)."""
    out, _ = collected
    rows = _csv(out / "grades.csv")
    late = rows["late"]
    raw = float(late["raw_total"])
    assert raw > 0 and float(late["total"]) == round(raw * 0.9, 2)
    assert (late["late_days"], late["penalty"], late["grade_status"]) == ("1", "0.1", "partial")
    results = {sid: json.loads((out / "students" / sid / "results.json").read_text()) for sid in rows}
    assert results["late"]["score"] == float(late["total"])
    assert f"({raw:g} before a 10% late penalty: 1 late day)" in results["late"]["output"]
    md = (out / "students" / "late" / "report.md").read_text()
    assert md.startswith(f"# CUDA lab grade: {late['total']}/24 ({raw:g} before a 10% late penalty: 1 late day)")
    canvas = {r[3]: r[5] for r in _lines(out / "canvas.partial.csv")[2:]}
    moodle = {r[0]: r[1] for r in _lines(out / "moodle.partial.csv")[1:]}
    assert canvas["late"] == moodle["S2"] == late["total"]  # one lab: its points less the penalty are the total
    assert [rows[s]["grade_status"] for s in ("ext", "empty")] == ["not_due", "not_handed_in"]
    assert [rows[s]["total"] for s in ("ext", "empty")] == ["", ""]
    assert (canvas["ext"], canvas["empty"], moodle["S3"], moodle["S4"]) == ("", "", "", "")
    assert "no grade: not due (not collected yet (deadline 2026-12-04T23:59:00Z))" in results["ext"]["output"]
    summary = (out / "summary.md").read_text()
    assert "## Not due yet (1)" in summary and "## Not handed in (1)" in summary
    _valid(out)


def test_the_terminal_says_the_gpu_checks_did_not_run_and_the_files_are_partial(collected):
    out, printed = collected
    assert "grades of record: 2 partial, 1 not due yet, 1 not handed in\n  not due yet: ext\n  not handed in: empty\n" in printed
    assert "  ext: tiled_matmul: collect: not collected yet" not in printed  # not among the errors
    assert "not final: 2 of 4 students (the GPU checks did not run (GPU checks turned off (--no-gpu)))" in printed
    assert f"canvas: {out / 'canvas.partial.csv'} (4 students, matched by SIS Login ID) NOT FINAL" in printed
    assert "left blank (the LMS keeps what it has): ext, empty" in printed
    assert not (out / "canvas.csv").exists() and not (out / "moodle.csv").exists()


# ------------------------------------------------------------------ which collected commit counts


def test_the_late_policy_chooses_latest_or_best_and_names_the_on_time_commit(tmp_path):
    """``graded_commit`` in the late policy; from collected.json (bare repositories, a fixed clock)
    the roster's ontime_commit is the last commit collected by the deadline."""
    path = tmp_path / "late.yaml"
    path.write_text("late_days: 3\npenalty_per_day: 10\ngraded_commit: best\n")
    policy = load_policy(path)
    assert policy == LatePolicy(3, 10.0, 15.0, "best")
    path.write_text("graded_commit: highest\n")
    with pytest.raises(SpecError, match=r"late.yaml: graded_commit: expected latest or best, got 'highest'"):
        load_policy(path)
    alice = Student(tmp_path, "alice")
    first = _push(alice, _stub(), "on time", DEADLINE - DAY)
    entries_csv = tmp_path / "collect.csv"
    entries_csv.write_text(f"alice,{alice.bare}\n")
    entries = load_entries(entries_csv, DEADLINE)
    folder = tmp_path / "collected"
    collect(entries, folder, policy, now=DEADLINE + 5 * datetime.timedelta(minutes=1), allow_local=True)
    second = _push(alice, _stub(), "a trivial change after the deadline", DEADLINE + HOUR)
    rows = collect(entries, folder, policy, now=DEADLINE + 2 * HOUR, allow_local=True)
    assert rows[0].commit == second and rows[0].late_days == "1"
    collections = json.loads((folder / STATE).read_text())["students"]["alice"]["collections"]
    assert policy.roster_columns(collections, DEADLINE, second) == {"ontime_commit": first, "graded_commit": "best"}
    assert policy.roster_columns(collections[:1], DEADLINE, first) == {"ontime_commit": "", "graded_commit": "best"}


def _roster(path: Path, rows: list[dict[str, str]]) -> Path:
    columns = ["student", "path", "commit", "collected_at", "deadline", "late_days", "penalty", "flags", "problem",
               "ontime_commit", "graded_commit"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({"collected_at": "2026-12-02T20:00:00Z", "deadline": "2026-12-01T23:59:00Z", **row})
    path.write_text(buf.getvalue())
    return path


def test_a_roster_whose_commit_choice_is_wrong_names_the_line(tmp_path):
    path = _roster(tmp_path / "roster.csv", [{"student": "a", "path": "repos/a", "commit": "1" * 40, "late_days": "1",
                                              "penalty": "0.1", "ontime_commit": "2" * 40, "graded_commit": "newest"}])
    with pytest.raises(GraderError, match=r"roster.csv:2: graded_commit 'newest' must be latest or best"):
        roster.load(path)
    _roster(path, [{"student": "a", "path": "repos/a", "commit": "1" * 40, "late_days": "1", "penalty": "0.1",
                    "ontime_commit": "HEAD~1", "graded_commit": "best"}])
    with pytest.raises(GraderError, match=r"roster.csv:2: ontime_commit 'HEAD~1' is not a full commit hash"):
        roster.load(path)


@pytest.fixture(scope="module")
def chosen(tmp_path_factory) -> tuple[Path, dict[str, tuple[str, str]], str]:
    """Three late students (one day late, 10%), graded on the CPU from a roster that names their
    on-time commit: a trivial push after the deadline with ``best`` and with ``latest``, and a late
    push that is worth its penalty with ``best``."""
    base = tmp_path_factory.mktemp("chosen")
    commits: dict[str, tuple[str, str]] = {}
    for sid, (ontime, late) in {"trivial": (_reference(), _reference()), "latest": (_reference(), _reference()),
                                "improved": (_stub(), _reference())}.items():
        remote = Student(base, sid)
        commits[sid] = (_push(remote, ontime, "on time", DEADLINE - DAY), _push(remote, late, "after the deadline", DEADLINE + HOUR))
    rule = {"trivial": "best", "latest": "latest", "improved": "best"}
    path = _roster(base / "roster.csv", [{"student": sid, "path": f"work/{sid}", "commit": late, "late_days": "1",
                                          "penalty": "0.1", "ontime_commit": ontime, "graded_commit": rule[sid]}
                                         for sid, (ontime, late) in commits.items()])
    out = base / "results"
    code, printed = _main("grade-class", "--roster", str(path), "--out", str(out), "--lab", LAB, "--no-gpu", "-q")
    assert code == 0, printed
    return out, commits, printed


def test_with_best_a_trivial_push_after_the_deadline_never_lowers_the_grade(chosen):
    """``late_days: 3`` with ``graded_commit: best``: the on-time commit counts (no penalty), and the
    TA is told which commit was graded and why; the late one's reports are kept beside."""
    out, commits, _ = chosen
    rows = _csv(out / "grades.csv")
    ontime, late = commits["trivial"]
    row = rows["trivial"]
    assert row["commit"] == ontime and row["total"] == row["raw_total"] != "0" and row["penalty"] == "0"
    raw = float(row["raw_total"])
    assert (f"graded the on-time commit {ontime[:12]}: {raw:g} > {round(raw * 0.9, 2):g} for the late commit {late[:12]} "
            "after its 10% penalty (graded_commit: best)") in row["late_flags"]
    kept = json.loads((out / "students" / "trivial" / "compared" / "report.json").read_text())
    assert kept["identity"]["commit"] == late and kept["identity"]["late"]["penalty"] == 0.1
    results = json.loads((out / "students" / "trivial" / "results.json").read_text())
    assert results["score"] == raw and f"graded the on-time commit {ontime[:12]}" in results["output"]
    _valid(out)


def test_with_latest_the_late_commit_counts_and_the_on_time_one_is_named(chosen):
    out, commits, _ = chosen
    row = _csv(out / "grades.csv")["latest"]
    ontime, late = commits["latest"]
    assert row["commit"] == late and float(row["total"]) == round(float(row["raw_total"]) * 0.9, 2)
    assert (f"an on-time commit {ontime[:12]} was collected by the deadline; the later one is graded "
            "(graded_commit: latest)") in row["late_flags"]
    assert not (out / "students" / "latest" / "compared").exists()


def test_with_best_a_late_commit_worth_its_penalty_counts(chosen):
    out, commits, _ = chosen
    row = _csv(out / "grades.csv")["improved"]
    ontime, late = commits["improved"]
    assert row["commit"] == late and row["penalty"] == "0.1" and row["late_days"] == "1"
    assert f"graded the late commit {late[:12]}: {row['total']} after its 10% penalty > " in row["late_flags"]
    md = (out / "students" / "improved" / "report.md").read_text()
    assert md.startswith(f"# CUDA lab grade: {row['total']}/24 ({row['raw_total']} before a 10% late penalty: 1 late day)")


# ------------------------------------------------------------------ LMS files from final grades only


def test_a_class_that_cannot_be_final_is_refused_an_lms_export_before_any_grading(tmp_path, capsys):
    """Graded on the CPU, no grade is final: --export stops at once with one line (exit 2), and
    nothing is graded."""
    repos = tmp_path / "repos"
    (repos / "jdoe" / "labs" / LAB).mkdir(parents=True)
    shutil.copy(_reference(), repos / "jdoe" / "labs" / LAB / "student.cu")
    canvas, _ = _maps(tmp_path)
    code = cli.main(["grade-class", str(repos), "--out", str(tmp_path / "out"), "--lab", LAB, "--no-gpu", "-q",
                     "--export", "canvas", "--lms-map", str(canvas)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: --export: the GPU checks (correctness, sanitizers, counters, speed) will not run: GPU checks "
                          "turned off (--no-gpu), so no grade of this run would be final")
    assert "--allow-partial" in err and not (tmp_path / "out" / "students").exists()


def test_the_lms_map_is_checked_against_the_class_before_any_grading(tmp_path, capsys):
    repos = tmp_path / "repos"
    for sid in ("jdoe", "zed"):
        (repos / sid).mkdir(parents=True)
    canvas, _ = _maps(tmp_path)
    code = cli.main(["grade-class", str(repos), "--out", str(tmp_path / "out"), "--no-gpu", "--export", "canvas",
                     "--lms-map", str(canvas)])
    err = capsys.readouterr().err
    assert code == 2 and "1 student of the results has no 'SIS Login ID' here: zed" in err
    assert not (tmp_path / "out").exists()


def test_final_grades_reach_canvas_and_moodle_in_one_run_with_blanks_for_students_without_a_grade(tmp_path, capsys):
    """Two exports in one run; the late student's labs less their penalty; the student not due and
    the one who handed nothing in blank (the LMS keeps what it has), never 0."""
    shard = _class(tmp_path / "shard", CLASS)
    canvas, moodle = _maps(tmp_path)
    out = tmp_path / "class"
    code = cli.main(["merge", str(shard), "--out", str(out), "--export", "canvas", "--lms-map", str(canvas),
                     "--export", "moodle", "--lms-map", str(moodle)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"canvas: {out / 'canvas.csv'} (4 students, matched by SIS Login ID)\n" in printed
    assert f"moodle: {out / 'moodle.csv'} (4 students, matched by idnumber)\n" in printed
    assert "grades of record: 2 graded, 1 not due yet, 1 not handed in" in printed
    assert _lines(out / "canvas.csv") == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Tiled matrix multiplication (4411)", "Parallel histogram"],
        ["    Points Possible", "", "", "", "", "24", "32"],
        ["Doe, Jane", "101", "2001", "jdoe", "S1", "24", "30"],
        ["Late, Lou", "102", "2002", "late", "S1", "10.8", "18"],
        ["Ext, Eve", "103", "2003", "ext", "S2", "", ""],
        ["Gone, Gus", "104", "2004", "gone", "S2", "", ""]]
    assert _lines(out / "moodle.csv") == [["idnumber", "Tiled matrix multiplication", "Parallel histogram"],
                                          ["S1", "24", "30"], ["S2", "10.8", "18"], ["S3", "", ""], ["S4", "", ""]]
    grades = _csv(out / "grades.csv")
    assert grades["late"]["total"] == "28.8" == str(round(10.8 + 18, 2))


def test_a_partial_grade_stops_the_export_unless_asked_then_the_files_say_partial(tmp_path, capsys):
    """One student's grading process died: their grade is not final. The export is refused with
    one line (exit 2) and an earlier run's canvas.csv goes; with --allow-partial it is written as
    canvas.partial.csv, and the terminal says so."""
    lost = "the grading process died (killed, or out of memory) while grading this student"
    shard = _class(tmp_path / "shard", {**CLASS, "late": (_failed(lost), _late(1, 0.1))})
    canvas, _ = _maps(tmp_path)
    out = tmp_path / "class"
    out.mkdir()
    (out / "canvas.csv").write_text("stale")
    code = cli.main(["merge", str(shard), "--out", str(out), "--export", "canvas", "--lms-map", str(canvas)])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1
    assert "no LMS file written, an LMS takes final grades only: 1 student of 4 has no final grade: 1 partial: " \
           f"{lost} (late); --allow-partial writes canvas.partial.csv instead" in captured.err
    assert not (out / "canvas.csv").exists() and (out / "grades.csv").is_file()
    assert f"not final: 1 of 4 students ({lost})" in captured.out
    shutil.rmtree(out)
    code = cli.main(["merge", str(shard), "--out", str(out), "--export", "canvas", "--lms-map", str(canvas), "--allow-partial"])
    printed = capsys.readouterr().out
    assert code == 0 and f"canvas: {out / 'canvas.partial.csv'} (4 students, matched by SIS Login ID) NOT FINAL" in printed
    assert not (out / "canvas.csv").exists()
    assert _lines(out / "canvas.partial.csv")[3] == ["Late, Lou", "102", "2002", "late", "S1", "0", "0"]


@pytest.mark.parametrize("header, key, matched", [
    ("Student,ID,Section", None, "ID"),
    ("Student,ID,Section", "ID", "ID"),
    ("Student,ID,SIS Login ID,Section", None, "SIS Login ID"),
    ("Student,ID,SIS User ID,SIS Login ID,Integration ID,Section", "SIS User ID", "SIS User ID"),
    ("LastName,FirstName,ID,SIS User ID,SIS Login ID,Section", None, "SIS Login ID"),
])
def test_every_form_of_canvas_export_its_importer_reads_is_accepted(tmp_path, capsys, header, key, matched):
    """A TA who may not see SIS data downloads ``Student,ID,Section,...``: accepted (matched by
    ID), as are the forms with SIS, integration and split-name columns; canvas.csv keeps the
    export's own student columns."""
    columns = header.split(",")
    ident = {"Student": '"Doe, Jane"', "LastName": "Doe", "FirstName": "Jane", "ID": "101", "SIS User ID": "2001",
             "SIS Login ID": "101" if matched == "ID" else "jdoe", "Integration ID": "i-1", "Section": "S1"}
    sid = {"ID": "101", "SIS User ID": "2001", "SIS Login ID": "jdoe"}[matched]
    export = tmp_path / "canvas-export.csv"
    export.write_text(f"{header},Tiled matrix multiplication (4411)\n    Points Possible{',' * len(columns)}24\n"
                      + ",".join(ident[c] for c in columns) + ",\n")
    shard = _class(tmp_path / "shard", {sid: (_graded(24, 30), None)})
    code = cli.main(["merge", str(shard), "--out", str(tmp_path / "class"), "--export", "canvas", "--lms-map", str(export),
                     *(["--lms-key", key] if key else [])])
    assert code == 0, capsys.readouterr().err
    rows = _lines(tmp_path / "class" / "canvas.csv")
    assert rows[0] == [*columns, "Tiled matrix multiplication (4411)", "Parallel histogram"]
    assert rows[1][0].strip() == "Points Possible" and rows[1][len(columns):] == ["24", "32"]
    assert rows[2][len(columns):] == ["24", "30"] and rows[2][columns.index("ID")] == "101"
    export.write_text("Student,ID,Notes,Section,Lab\nx,1,,S,\n")
    with pytest.raises(GraderError, match="not a Canvas gradebook export: its student columns are Student, ID, Notes, Section"):
        lms.load("canvas", export)
