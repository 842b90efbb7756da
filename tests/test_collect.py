"""``cuda-grader collect``: the commit each student had at their deadline, from local bare
repositories (no network): deadlines, extensions, late days, force pushes, commits whose dates lie,
missing and empty repositories; and the roster it writes, graded with the late policy applied."""

from __future__ import annotations

import csv
import datetime
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import cli
from grader.classroom import roster
from grader.classroom.collect import ROSTER, STATE, Entry, collect, load_entries, parse_time
from grader.errors import GraderError, SpecError
from grader.gradebook.late import LatePolicy, load_policy
from grader.labspec.labs import find_lab

DEADLINE = datetime.datetime(2026, 12, 1, 23, 59, tzinfo=datetime.timezone.utc)
HOUR, DAY = datetime.timedelta(hours=1), datetime.timedelta(days=1)
POLICY = LatePolicy(late_days=3, penalty_per_day=10, grace_minutes=15)
LOCAL = "collected from a folder of this machine, not a hosted repository (--allow-local): "
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str, when: datetime.datetime | None = None) -> str:
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x", "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@x"}
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when.isoformat()
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Student:
    """A student's work folder and the bare repository they push to."""

    def __init__(self, base: Path, name: str) -> None:
        self.bare, self.work = base / "remotes" / f"{name}.git", base / "work" / name
        self.bare.parent.mkdir(parents=True, exist_ok=True)
        _git(base, "init", "--quiet", "--bare", "--initial-branch=main", str(self.bare))
        self.work.mkdir(parents=True)
        _git(self.work, "init", "--quiet", "--initial-branch=main")
        _git(self.work, "remote", "add", "origin", str(self.bare))

    def commit(self, text: str, dated: datetime.datetime, source: Path | None = None) -> str:
        target = self.work / "labs" / "tiled_matmul" / "student.cu"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.read_text() + f"\n// {text}\n" if source else f"// {text}\n")
        _git(self.work, "add", "-A")
        _git(self.work, "commit", "--quiet", "-m", text, when=dated)
        return _git(self.work, "rev-parse", "HEAD")

    def push(self, force: bool = False) -> None:
        _git(self.work, "push", "--quiet", *(["--force"] if force else []), "origin", "main")


def _entries(students: dict[str, Student], extension: dict[str, str] | None = None, base: Path | None = None) -> list[Entry]:
    path = (base or next(iter(students.values())).bare.parent.parent) / "collect.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["student,repository,extension"] + [f"{n},{s.bare},{(extension or {}).get(n, '')}" for n, s in students.items()]
    path.write_text("\n".join(lines) + "\n")
    return load_entries(path, DEADLINE)


def _rows(folder: Path) -> dict[str, dict[str, str]]:
    """roster.csv's rows, without the flag every local repository of these tests gets (``--allow-local``)."""
    with open(folder / ROSTER, newline="", encoding="utf-8") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    for row in rows.values():
        flags = row["flags"].split(" | ") if row["flags"] else []
        assert not row["commit"] or any(f.startswith(LOCAL) for f in flags), row
        row["flags"] = " | ".join(f for f in flags if not f.startswith(LOCAL))
    return rows


def test_the_commit_at_the_deadline_is_graded_and_later_work_is_late_by_when_it_was_collected(tmp_path):
    alice = Student(tmp_path, "alice")
    first = alice.commit("v1", DEADLINE - DAY)
    alice.push()
    out = tmp_path / "collected"
    entries = _entries({"alice": alice})
    early = collect(entries, out, POLICY, allow_local=True, now=DEADLINE - HOUR)
    assert early[0].commit == "" and "not collected yet" in early[0].problem and "not yet due" in early[0].note
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE + datetime.timedelta(minutes=2))  # the job at the deadline, a little late
    row = _rows(out)["alice"]
    assert (row["commit"], row["late_days"], row["penalty"], row["flags"], row["problem"]) == (first, "0", "0", "", "")
    again = collect(entries, out, POLICY, allow_local=True, now=DEADLINE + 10 * HOUR)
    assert again[0].commit == first and again[0].note.startswith("unchanged since")
    second = alice.commit("v2", DEADLINE + 20 * HOUR)
    alice.push()
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE + 30 * HOUR)  # first seen 30 h late: two days (a part of one counts)
    row = _rows(out)["alice"]
    assert (row["commit"], row["late_days"], row["penalty"]) == (second, "2", "0.2")
    assert row["collected_at"] == "2026-12-03T05:59:00Z"
    # the on-time commit is named beside the late one, for graded_commit: best to grade both
    assert (row["ontime_commit"], row["graded_commit"]) == (first, "latest")
    alice.commit("v3 after the cut-off", DEADLINE + 4 * DAY)
    alice.push()
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE + 4 * DAY)
    assert _rows(out)["alice"]["commit"] == second  # the last collection before the cut-off stands
    state = json.loads((out / STATE).read_text())["students"]["alice"]
    assert [c["commit"][:7] for c in state["collections"]][:2] == [first[:7], second[:7]] and len(state["collections"]) == 3


def test_a_student_with_an_extension_is_collected_at_their_own_deadline(tmp_path):
    alice, bob = Student(tmp_path, "alice"), Student(tmp_path, "bob")
    alice.commit("a", DEADLINE - DAY)
    alice.push()
    bob.commit("b1", DEADLINE - DAY)
    bob.push()
    out = tmp_path / "collected"
    entries = _entries({"alice": alice, "bob": bob}, {"bob": "2"})
    assert entries[1].deadline == DEADLINE + 2 * DAY
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE)
    rows = _rows(out)
    assert rows["alice"]["commit"] and rows["bob"]["commit"] == "" and "not collected yet" in rows["bob"]["problem"]
    b2 = bob.commit("b2", DEADLINE + DAY)
    bob.push()
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE + 2 * DAY)
    rows = _rows(out)
    assert (rows["bob"]["commit"], rows["bob"]["late_days"], rows["bob"]["deadline"]) == (b2, "0", "2026-12-03T23:59:00Z")
    explicit = _entries({"alice": alice, "bob": bob}, {"bob": "2026-12-05T12:00:00-05:00"}, tmp_path / "other")
    assert explicit[1].deadline == datetime.datetime(2026, 12, 5, 17, 0, tzinfo=datetime.timezone.utc)


def test_a_history_rewritten_between_two_collections_is_flagged(tmp_path):
    alice = Student(tmp_path, "alice")
    alice.commit("v1", DEADLINE - 2 * DAY)
    kept = alice.commit("v2", DEADLINE - DAY)
    alice.push()
    out = tmp_path / "collected"
    entries = _entries({"alice": alice})
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE)
    _git(alice.work, "reset", "--quiet", "--hard", "HEAD~1")
    rewritten = alice.commit("v2, rewritten", DEADLINE - DAY)  # dated before the deadline too
    alice.push(force=True)
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE + 5 * HOUR)
    row = _rows(out)["alice"]
    assert row["commit"] == rewritten and row["late_days"] == "1"
    assert f"(force push): {kept[:12]} is not in the new history" in row["flags"]
    assert "before the deadline, but first collected at 2026-12-02T04:59:00Z" in row["flags"]


def test_a_back_dated_commit_is_late_by_its_collection_and_a_future_dated_one_is_flagged(tmp_path):
    late, future = Student(tmp_path, "late"), Student(tmp_path, "future")
    late.commit("started", DEADLINE - 3 * DAY)
    late.push()
    future.commit("claims to be after the deadline", DEADLINE + 5 * DAY)
    future.push()
    out = tmp_path / "collected"
    entries = _entries({"late": late, "future": future})
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE)
    late.commit("finished, back-dated", DEADLINE - 2 * DAY)
    late.push()
    collect(entries, out, POLICY, allow_local=True, now=DEADLINE + DAY + HOUR)
    rows = _rows(out)
    assert (rows["late"]["late_days"], rows["late"]["penalty"]) == ("2", "0.2")
    assert "commit dated 2026-11-29T23:59:00Z, before the deadline, but first collected" in rows["late"]["flags"]
    assert rows["future"]["late_days"] == "0"
    assert "commit dated 2026-12-06T23:59:00Z, after the deadline, yet collected at 2026-12-01T23:59:00Z" in rows["future"]["flags"]


def test_a_missing_or_empty_repository_is_that_students_row(tmp_path):
    alice = Student(tmp_path, "alice")
    alice.commit("v1", DEADLINE - DAY)
    alice.push()
    empty = tmp_path / "remotes" / "empty.git"
    _git(tmp_path, "init", "--quiet", "--bare", str(empty))
    csv_path = tmp_path / "collect.csv"
    csv_path.write_text(f"alice,{alice.bare}\ngone,{tmp_path / 'remotes' / 'gone.git'}\nempty,remotes/empty.git\n")
    rows = {r.student: r for r in collect(load_entries(csv_path, DEADLINE), tmp_path / "out", POLICY, allow_local=True, now=DEADLINE)}
    assert rows["alice"].commit and not rows["alice"].problem
    assert rows["gone"].problem.startswith("collect: repository not found (gone, renamed, or private to this account): ")
    assert "gone.git' does not appear to be a git repository" in rows["gone"].problem  # git's own words kept
    assert rows["empty"].problem == "collect: the repository is empty (no commit on its default branch)"
    alice_later = collect(load_entries(csv_path, DEADLINE), tmp_path / "out", POLICY, allow_local=True, now=DEADLINE + HOUR)
    assert alice_later[0].commit == rows["alice"].commit


def test_the_collect_roster_is_refused_with_the_line_and_the_problem(tmp_path):
    path = tmp_path / "collect.csv"
    for text, needle in (("alice\n", "expected 3 fields (student, repository, extension), found 1: 'alice'"),
                         ("alice,r\nalice,s\n", "listed twice (first on line 1)"),
                         ("al ice,r\n", "may hold only letters"),
                         ("alice,r,next week\n", "expected an ISO 8601 time")):
        path.write_text(text)
        with pytest.raises(GraderError, match="collect.csv:") as exc:
            load_entries(path, DEADLINE)
        assert needle in str(exc.value)
    with pytest.raises(GraderError, match="has no time zone"):
        parse_time("2026-12-01T23:59:00", "--deadline")
    path.write_text("# the class of 2026\n\nstudent,repository,extension\nalice,r\n")  # a header after comments
    assert [e.student for e in load_entries(path, DEADLINE)] == ["alice"]
    path.write_bytes("\ufeffstudent,repository\nalice,r\n".encode())  # saved by a spreadsheet, with a byte-order mark
    assert [e.student for e in load_entries(path, DEADLINE)] == ["alice"]


def test_the_late_policy_names_the_file_key_and_value(tmp_path):
    path = tmp_path / "late.yaml"
    path.write_text("late_days: 2\npenalty_per_day: 12.5\n")
    policy = load_policy(path)
    assert policy == LatePolicy(2, 12.5, 15.0)
    assert (policy.penalty(0), policy.penalty(2), policy.penalty(3)) == (0.0, 0.25, 1.0)
    for text, needle in (("late_day: 2\n", "late_day: unknown key; did you mean 'late_days'?"),
                         ("late_days: -1\n", "late_days: expected a number of 0 or more, got -1"),
                         ("late_days: 1.5\n", "late_days: expected a whole number of days"),
                         ("penalty_per_day: 120\n", "penalty_per_day: expected a percentage of 100 or less")):
        path.write_text(text)
        with pytest.raises(SpecError) as exc:
            load_policy(path)
        assert str(exc.value) == f"{path}: {needle}" or str(exc.value).startswith(f"{path}: {needle}")


def test_a_collected_roster_is_graded_with_the_late_penalty_beside_the_raw_score(tmp_path, capsys):
    ontime, late = Student(tmp_path, "ontime"), Student(tmp_path, "late")
    reference = find_lab("tiled_matmul").files.reference
    ontime.commit("done", DEADLINE - DAY, reference)
    ontime.push()
    late.commit("started", DEADLINE - DAY)
    late.push()
    huge = Student(tmp_path, "huge")
    (huge.work / "labs" / "tiled_matmul").mkdir(parents=True)
    (huge.work / "labs" / "tiled_matmul" / "student.cu").write_bytes(bytes(5 << 20))  # over the fetch's size filter
    _git(huge.work, "add", "-A")
    _git(huge.work, "commit", "--quiet", "-m", "huge", when=DEADLINE - DAY)
    huge.push()
    folder = tmp_path / "collected"
    entries = _entries({"ontime": ontime, "late": late, "gone": Student(tmp_path, "gone"), "huge": huge})
    collect(entries, folder, POLICY, allow_local=True, now=DEADLINE)
    late.commit("done late", DEADLINE + DAY, reference)
    late.push()
    collect(entries, folder, POLICY, allow_local=True, now=DEADLINE + 36 * HOUR)
    late_info = roster.load(folder / ROSTER)[1].late
    assert late_info is not None
    ontime_commit = late_info.pop("ontime_commit")
    assert late_info == {"deadline": "2026-12-01T23:59:00Z", "collected_at": "2026-12-03T11:59:00Z",
                         "late_days": 2, "penalty": 0.2, "graded_commit": "latest",
                         "flags": [f"{LOCAL}{late.bare}", f"an on-time commit {ontime_commit[:12]} was collected by the deadline; "
                                   "the later one is graded (graded_commit: latest)"]}
    results = tmp_path / "results"
    code = cli.main(["grade-class", "--roster", str(folder / ROSTER), "--out", str(results), "--lab", "tiled_matmul",
                     "--no-gpu", "-q"])
    assert code == 0, capsys.readouterr()
    with open(results / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    assert rows["ontime"]["raw_total"] == rows["late"]["raw_total"] == rows["ontime"]["total"] != "0"
    assert (rows["late"]["late_days"], rows["late"]["penalty"]) == ("2", "0.2")
    assert float(rows["late"]["total"]) == pytest.approx(round(float(rows["late"]["raw_total"]) * 0.8, 2))
    assert rows["gone"]["status"] == "error" and "collect: the repository is empty" in rows["gone"]["problems"]
    assert "labs/tiled_matmul/student.cu; graded as too large" in _rows(folder)["huge"]["flags"]
    assert rows["huge"]["total"] == "0" and "1,048,577 bytes" in rows["huge"]["problems"]  # left on the server: too large
    assert json.loads((results / "students" / "late" / "report.json").read_text())["identity"]["late"]["late_days"] == 2


def test_the_command_collects_and_says_what_to_grade_next(tmp_path, capsys):
    alice = Student(tmp_path, "alice")
    alice.commit("v1", datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc))
    alice.push()
    (tmp_path / "collect.csv").write_text(f"alice,{alice.bare}\nbob,missing.git\n")
    code = cli.main(["collect", str(tmp_path / "collect.csv"), "--deadline", "2026-01-02T00:00:00Z",
                     "--into", str(tmp_path / "c"), "--allow-local", "-q"])
    out = capsys.readouterr().out
    assert code == 0
    assert "collected 1 of 2 students in " in out and f"--roster {tmp_path / 'c' / ROSTER}" in out
    assert "bob: collect: repository not found" in out
    assert cli.main(["collect", str(tmp_path / "collect.csv"), "--deadline", "tomorrow", "--into", str(tmp_path / "c")]) == 2


def test_a_collected_roster_with_bad_late_columns_names_the_line(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text("student,path,commit,collected_at,deadline,late_days,penalty,flags,problem\n"
                    "alice,repos/alice,,2026-12-02T00:00:00Z,2026-12-01T23:59:00Z,two,0.1,,\n")
    with pytest.raises(GraderError, match=r"roster.csv:2: late_days 'two' and penalty '0.1' must be numbers"):
        roster.load(path)
    path.write_text("student,path,commit,collected_at,deadline,late_days,penalty,flags,problem\n"
                    "alice,repos/alice,,2026-12-02T00:00:00Z,2026-12-01T23:59:00Z,1,1.5,,\n")
    with pytest.raises(GraderError, match="penalty a fraction from 0 to 1"):
        roster.load(path)


def test_a_token_in_a_clone_url_is_never_written_or_shown(tmp_path):
    from grader.classroom.collect import redact

    assert redact("fatal: unable to access 'https://x-access-token:ghp_SECRET@github.com/c/r.git/': 403") == \
        "fatal: unable to access 'https://***@github.com/c/r.git/': 403"
    csv_path = tmp_path / "collect.csv"
    csv_path.write_text("alice,https://x-access-token:ghp_SECRET@127.0.0.1:9/course/alice.git\n")
    rows = collect(load_entries(csv_path, DEADLINE), tmp_path / "out", POLICY, allow_local=True, now=DEADLINE)
    assert rows[0].problem.startswith("collect: ") and not rows[0].commit
    written = (tmp_path / "out" / STATE).read_text() + (tmp_path / "out" / ROSTER).read_text() + rows[0].note
    assert "ghp_SECRET" not in written and "https://***@127.0.0.1:9/course/alice.git" in written


def test_a_run_stopped_part_way_keeps_what_it_collected_with_its_time(tmp_path, monkeypatch):
    from grader.classroom import collect as collecting

    alice, bob = Student(tmp_path, "alice"), Student(tmp_path, "bob")
    for s in (alice, bob):
        s.commit("v1", DEADLINE - DAY)
        s.push()
    real = collecting.fetch

    def stopped_at_bob(source: str, clone: Path, allow_local: bool = False) -> collecting.gitfetch.Fetched:
        if "bob" in source:
            raise KeyboardInterrupt
        return real(source, clone, allow_local)

    monkeypatch.setattr(collecting, "fetch", stopped_at_bob)
    out = tmp_path / "collected"
    with pytest.raises(KeyboardInterrupt):
        collect(_entries({"alice": alice, "bob": bob}), out, POLICY, allow_local=True, now=DEADLINE)
    kept = json.loads((out / STATE).read_text())["students"]
    assert [c["at"] for c in kept["alice"]["collections"]] == ["2026-12-01T23:59:00Z"] and kept["bob"]["collections"] == []


def test_a_transport_that_runs_a_program_is_refused_even_with_local_folders_allowed(tmp_path):
    """``ext::`` runs a shell command, ``fd::`` and any ``<name>::`` a helper program, an unknown
    ``scheme://`` a ``git-remote-<scheme>`` from PATH: none is fetched from, whatever the options."""
    marker = tmp_path / "ran"
    csv_path = tmp_path / "collect.csv"
    csv_path.write_text(f"a,ext::sh -c touch% {marker}\nb,fd::0\nc,gopher://example.com/c.git\n")
    rows = {r.student: r for r in collect(load_entries(csv_path, DEADLINE), tmp_path / "out", POLICY, allow_local=True, now=DEADLINE)}
    assert "the transport ext:: runs a program of its own" in rows["a"].problem and "fd::" in rows["b"].problem
    assert "unknown transport gopher://: collect fetches over https, ssh or git" in rows["c"].problem
    assert not marker.exists() and not any(r.commit for r in rows.values())


def test_a_local_partial_clone_cannot_make_collect_run_its_uploadpack_command(tmp_path):
    """A local source (allowed) that is a partial clone missing an object, whose promisor remote's
    ``uploadpack`` is a shell command: serving the fetch needs the object, yet nothing fetches it
    lazily and the command never runs; the student's row says why nothing was collected."""
    alice = Student(tmp_path, "alice")
    alice.commit("v1", DEADLINE - DAY)
    alice.push()
    marker = tmp_path / "ran"
    blob = _git(alice.work, "rev-parse", "HEAD:labs/tiled_matmul/student.cu")
    for key, value in (("extensions.partialClone", "origin"), ("remote.origin.promisor", "true"),
                       ("remote.origin.url", str(tmp_path / "elsewhere.git")), ("remote.origin.uploadpack", f"touch {marker}; false")):
        _git(alice.bare, "config", key, value)
    kept = _git(alice.bare, "rev-list", "--objects", "--all").split("\n")
    objects = "".join(line.split()[0] + "\n" for line in kept if not line.startswith(blob))
    pack = subprocess.run(["git", "pack-objects", "-q", str(alice.bare / "objects" / "pack" / "kept")], cwd=alice.bare,
                          input=objects, capture_output=True, text=True, check=True).stdout.strip()
    for old in (alice.bare / "objects").rglob("*"):
        if old.is_file() and "kept-" not in old.name and old.parent.name != "info":
            old.unlink()
    (alice.bare / "objects" / "pack" / f"kept-{pack}.promisor").touch()
    rows = collect(_entries({"alice": alice}), tmp_path / "out", POLICY, allow_local=True, now=DEADLINE)
    assert not marker.exists() and not rows[0].commit
    # git's own words, in whichever order its two processes print them
    assert rows[0].problem.startswith("collect: git fetch failed: ") and "fetch" in rows[0].problem.removeprefix("collect: git fetch failed: ")


def test_a_first_collection_that_starts_after_the_deadline_warns_and_names_the_late_students(tmp_path, capsys):
    """Nothing collected yet and the run starts after the deadline: every student would be late by
    when they are collected, so the TA is warned, and the terminal names the late students."""
    from grader.classroom.collect import first_run_late, load_state

    alice = Student(tmp_path, "alice")
    alice.commit("v1", datetime.datetime(2025, 12, 31, tzinfo=datetime.timezone.utc))
    alice.push()
    path = tmp_path / "collect.csv"
    path.write_text(f"student,repository\nalice,{alice.bare}\n")
    policy = tmp_path / "late.yaml"
    policy.write_text("late_days: 366\npenalty_per_day: 10\n")
    code = cli.main(["collect", str(path), "--deadline", "2026-01-01T00:00:00Z", "--into", str(tmp_path / "c"),
                     "--late-policy", str(policy), "--allow-local", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "warning: this is the first collection for the deadline 2026-01-01T00:00:00Z" in err
    assert "late: alice (" in out and "100% off)" in out
    # once something was collected, a later run is no first collection
    state = load_state(tmp_path / "c")
    assert first_run_late(state, DEADLINE, POLICY, now=DEADLINE + DAY) == ""
    assert first_run_late({}, DEADLINE, POLICY, now=DEADLINE + POLICY.grace) == ""
    assert first_run_late({}, DEADLINE, POLICY, now=DEADLINE + HOUR).startswith("this is the first collection")
