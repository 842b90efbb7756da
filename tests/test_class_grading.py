"""A small real class graded on the CPU (--no-gpu, real nvcc): gradebook, reports against their
schemas, one engine, resume, shards and their merge, diff, and failures that stay with one student."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from grader.gradebook import grades as gradebook
from grader.gradebook import plots
from grader.labspec.labs import find_lab
from grader.labspec.version import lab_version

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
LABS = ("memory_types", "tiled_matmul")
ROSTER_ORDER = ["alice", "bob", "carol", "dave", "erin", "frank"]


def _schema(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / name).read_text()))


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x", "GIT_COMMITTER_NAME": "s",
           "GIT_COMMITTER_EMAIL": "s@x", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def _put(repo: Path, lab: str, source: Path | str) -> None:
    target = repo / "labs" / lab / "student.cu"
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(source, Path):
        shutil.copy(source, target)
    else:
        target.write_text(source)


def _ref(lab: str) -> Path:
    return ROOT / "reference" / lab / "reference.cu"


def _stub(lab: str) -> Path:
    return ROOT / "student_template" / "labs" / lab / "student.cu"


def _committed_references(repo: Path, message: str) -> Path:
    """A git repository holding every lab's reference, committed."""
    for lab in LABS:
        _put(repo, lab, _ref(lab))
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", message)
    return repo


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("class")
    repos = base / "repos"
    _committed_references(repos / "alice", "done")
    bob = repos / "bob"
    _put(bob, "memory_types", ROOT / "labs/memory_types/solutions/wrong/mask_in_global.cu")
    _put(bob, "tiled_matmul", ROOT / "labs/tiled_matmul/solutions/wrong/wrong_prototype.cu")
    (repos / "carol" / "src").mkdir(parents=True)  # no labs/ folder
    _put(repos / "dave", "tiled_matmul", _stub("tiled_matmul"))  # memory_types not handed in
    erin = _committed_references(repos / "erin", "submitted")
    _git(erin, "tag", "submitted")
    _put(erin, "tiled_matmul", _stub("tiled_matmul"))  # after the deadline: not graded
    (base / "roster.csv").write_text("student,path,commit\n" + "\n".join(
        f"{s},{'repos/' + s if s != 'frank' else 'repos/nobody'},{'submitted' if s == 'erin' else ''}" for s in ROSTER_ORDER) + "\n")
    return base


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "GITHUB_STEP_SUMMARY")}
    proc = subprocess.run([sys.executable, "-m", "grader", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def grade(klass: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    lab_args = [a for lab in LABS for a in ("--lab", lab)]
    proc = cli("grade-class", "--roster", str(klass / "roster.csv"), "--out", str(out), "--no-gpu", *lab_args, *extra)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def single(klass) -> Path:
    out = klass / "single"
    proc = grade(klass, out)
    assert "graded 6 students, kept 0 already graded" in proc.stdout
    return out


def _rows(out: Path) -> tuple[list[str], dict[str, dict[str, str]]]:
    with open(out / "grades.csv", newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        return list(reader.fieldnames or []), {r["student"]: r for r in rows}


def _report(out: Path, sid: str) -> dict:
    return json.loads((out / "students" / sid / "report.json").read_text())


TEXT_COLUMNS = ("student", "status", "problems", "commit", "not_run", "late_flags", "grade_status", "sandbox")


def _numeric(row: dict[str, str]) -> dict[str, object]:
    """A row as the schema reads it: numbers converted, an empty cell (no grade, no late days) left as text."""
    def value(k: str, v: str) -> object:
        if k in TEXT_COLUMNS or v == "":
            return v
        return int(v) if k == "late_days" else float(v)
    return {k: value(k, v) for k, v in row.items()}


def test_the_class_log_holds_each_student_s_steps_on_their_lane(single):
    from grader.classroom.progress import LANES_LOG, read_log

    logged = read_log(single / LANES_LOG)
    assert logged[0][1:3] == ("-", "-") and logged[0][3].startswith("run started at")
    steps = [(lane, student, text) for _, lane, student, text in logged[1:]]
    graded = {student for lane, student, text in steps if text.startswith("[") and "/6] " in text}
    assert graded == {"alice", "bob", "carol", "dave", "erin", "frank"}
    assert any(student == "alice" and text.startswith("[tiled_matmul] ") for _, student, text in steps)
    assert all(lane.startswith("cpu") for lane, _, _ in steps)


def test_grades_csv_has_one_row_per_student_and_validates(single):
    header, rows = _rows(single)
    assert header == ["student", *LABS, "total", "max_total", "status", "problems", "commit", "not_run",
                      "raw_total", "late_days", "penalty", "late_flags", "grade_status", "sandbox"]
    assert {r["not_run"] for r in rows.values()} == {"gpu"}  # graded with --no-gpu: no row is a final grade
    assert list(rows) == ROSTER_ORDER
    validator = _schema("grades.schema.json")
    for row in rows.values():
        validator.validate(_numeric(row))
        if row["grade_status"] == "not_handed_in":  # no grade: empty, never 0
            assert [row[k] for k in (*LABS, "total", "raw_total")] == [""] * (len(LABS) + 2)
            continue
        assert float(row["total"]) == pytest.approx(sum(float(row[lab]) for lab in LABS))
        assert float(row["max_total"]) == sum(find_lab(lab).max_points for lab in LABS)
        report = _report(single, row["student"])
        assert float(row["total"]) == report["score"]
        assert {lab: float(row[lab]) for lab in LABS} == {r["lab"]: r["score"] for r in report["labs"]}
    assert float(rows["alice"]["memory_types"]) > float(rows["bob"]["memory_types"])  # constant memory missed
    assert rows["erin"]["tiled_matmul"] == rows["alice"]["tiled_matmul"] != rows["dave"]["tiled_matmul"]
    assert [rows[s]["status"] for s in ROSTER_ORDER] == ["ok", "error", "error", "error", "ok", "error"]
    assert [rows[s]["grade_status"] for s in ROSTER_ORDER] == ["partial", "partial", "not_handed_in", "partial", "partial",
                                                               "not_handed_in"]
    assert rows["bob"]["problems"].startswith("tiled_matmul: compile error: labs/tiled_matmul/student.cu:")
    assert rows["carol"]["problems"].startswith("all labs: ") and "has no labs/ folder" in rows["carol"]["problems"]
    said = [c["message"] for lab in _report(single, "carol")["labs"] for c in lab["checks"]]
    assert said and not any(str(single.parent) in m for m in said), said  # their repository, not the TA's folder
    assert rows["dave"]["problems"] == "not handed in: memory_types"
    assert rows["frank"]["problems"].startswith("all labs: repository not found: ") and "(roster line 7)" in rows["frank"]["problems"]
    assert rows["alice"]["commit"] == _git(single.parent / "repos" / "alice", "rev-parse", "HEAD")
    assert rows["bob"]["commit"] == ""


def test_every_report_validates_and_says_whose_work_it_graded(single, klass):
    validator = _schema("report.schema.json")
    versions = {lab: lab_version(find_lab(lab)) for lab in LABS}
    for sid in ROSTER_ORDER:
        doc = _report(single, sid)
        validator.validate(doc)
        who = doc["identity"]
        assert who["student"] == sid
        assert who["repository"] == str((klass / "repos" / (sid if sid != "frank" else "nobody")).absolute())
        assert who["labs"] == versions
        assert who["gpu"].startswith("none: ")
        assert set(who["files"]) == {f"labs/{lab}/student.cu" for lab in LABS}
        xml = (single / "students" / sid / "report.xml").read_text()
        assert f'name="identity.student" value="{sid}"' in xml and f'name="identity.content_hash" value="{who["content_hash"]}"' in xml
        assert f"student {sid}" in (single / "students" / sid / "report.md").read_text()
    alice = _report(single, "alice")["identity"]
    assert alice["files"]["labs/tiled_matmul/student.cu"] == hashlib.sha256(_ref("tiled_matmul").read_bytes()).hexdigest()
    erin = _report(single, "erin")["identity"]
    assert erin["commit"] == _git(klass / "repos" / "erin", "rev-parse", "submitted")
    # the commit's file was graded, not the work tree's later stub
    assert erin["files"]["labs/tiled_matmul/student.cu"] == alice["files"]["labs/tiled_matmul/student.cu"]
    dave = _report(single, "dave")["identity"]
    assert dave["files"]["labs/memory_types/student.cu"] is None and dave["commit"] is None


def test_gradescope_results_validate_and_match_the_reports(single):
    validator = _schema("gradescope-results.schema.json")
    for sid in ROSTER_ORDER:
        results = json.loads((single / "students" / sid / "results.json").read_text())
        validator.validate(results)
        report = _report(single, sid)
        checks = [(r["lab"], c) for r in report["labs"] for c in r["checks"]]
        assert results["score"] == report["score"] and results["max_score"] == report["max_score"]
        assert [t["name"] for t in results["tests"]] == [f"{lab}: {c['id']}" for lab, c in checks]
        assert [t["score"] for t in results["tests"]] == [c["points"] for _, c in checks]
        assert [t["status"] == "passed" for t in results["tests"]] == [c["outcome"] == "pass" for _, c in checks]
        assert results["extra_data"]["identity"]["content_hash"] == report["identity"]["content_hash"]
        assert results["extra_data"]["gpu"]["name"] == report["identity"]["gpu"] and 0 <= results["execution_time"] < 600
        assert [t["number"] for t in results["tests"]] == [f"{k + 1}.{n + 1}" for k, r in enumerate(report["labs"])
                                                          for n in range(len(r["checks"]))]
        assert [t["tags"][:2] for t in results["tests"]] == [[lab, c["stage"]] for lab, c in checks]
        assert "leaderboard" not in results  # graded without a GPU: nothing was timed


def test_a_student_graded_in_the_class_gets_what_grading_the_repository_alone_gives(single, klass):
    from grader.engine.repo import grade_repo
    from grader.isolation.options import GradeOptions

    for sid in ("alice", "bob", "dave"):
        alone = grade_repo(klass / "repos" / sid, GradeOptions(gpu=False), labs=list(LABS))
        in_class = _report(single, sid)["labs"]
        assert [(r.lab, [(c.id, c.outcome.value, c.points) for c in r.checks]) for r in alone] == \
               [(r["lab"], [(c["id"], c["outcome"], c["points"]) for c in r["checks"]]) for r in in_class]


def test_a_class_graded_without_a_gpu_says_it_is_not_final_everywhere(single):
    summary = (single / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("> **Not a final grade:** the GPU checks (correctness, sanitizers, counters, "
                                              "speed) did not run for 6 of 6 students (")
    rows = {ln.split("|")[1].strip(): ln for ln in summary.splitlines() if ln.startswith("| `correctness[")}
    assert rows and all(ln.rstrip(" |").endswith("not run") for ln in rows.values())  # never "0%"
    assert "| 0% |" not in summary
    results = json.loads((single / "students" / "alice" / "results.json").read_text())
    assert "not a final grade: the GPU checks did not run (" in results["output"]


def test_a_lab_not_handed_in_is_its_own_band_and_leaves_the_pass_rates(single):
    """dave handed tiled_matmul in but not memory_types: his 0 there is in no score band and no
    check's counts of memory_types, and is counted as not handed in, as are carol (no labs/ folder)
    and frank (no repository), who handed nothing in and are in no statistic."""
    summary = (single / "summary.md").read_text()
    after = summary[summary.index("Students per score band"):]
    bands = next(ln for ln in after.splitlines() if ln.startswith("| `memory_types` |"))
    assert bands.split("|")[-2].strip() == "3"
    assert sum(int(c) for c in bands.split("|")[2:8]) == 3
    compile_rows = [ln for ln in summary.splitlines() if ln.startswith("| `compile` |")]  # memory_types', then tiled_matmul's
    assert [sum(int(c) for c in ln.split("|")[2:6]) for ln in compile_rows] == [3, 4]


def test_summary_counts_checks_and_lists_the_students_with_errors(single, tmp_path, monkeypatch):
    summary = (single / "summary.md").read_text()
    assert summary.startswith("# Class summary: 6 students, 2 labs")
    errors = summary[summary.index("## Students whose grading hit an error"):summary.index("## Not handed in")]
    assert errors.startswith("## Students whose grading hit an error (2)")
    assert all(f"`{s}`" in errors for s in ("bob", "dave"))
    assert "`alice`" not in errors and "`erin`" not in errors
    apart = summary[summary.index("## Not handed in (2)"):]
    assert "| `carol` | the repository has no labs/ folder" in apart and "| `frank` | repository not found: " in apart
    passed = sum(1 for sid in ROSTER_ORDER for r in _report(single, sid)["labs"] for c in r["checks"]
                 if r["lab"] == "memory_types" and c["id"] == "mask_in_constant_memory" and c["outcome"] == "pass")
    (line,) = [ln for ln in summary.splitlines() if ln.startswith("| `mask_in_constant_memory` |")]
    assert line.split("|")[2].strip() == str(passed) and passed == 2  # alice and erin
    if plots.available():
        assert "![Score distribution per lab](plots/scores.png)" in summary
        for name in ("scores.png", "checks.png"):
            assert (single / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # without matplotlib: the same summary, no pictures, one line saying why
    copy = tmp_path / "copy"
    shutil.copytree(single, copy, ignore=shutil.ignore_patterns("plots"))
    monkeypatch.setattr(plots, "available", lambda: False)
    gradebook.write(copy, gradebook.read_manifest(copy))
    bare = (copy / "summary.md").read_text()
    assert "![" not in bare and plots.MISSING_NOTE in bare and not (copy / "plots").exists()
    assert bare.replace(plots.MISSING_NOTE + "\n", "") == summary.replace(
        "![Score distribution per lab](plots/scores.png)\n![Pass rate per check](plots/checks.png)\n", "")


def _graded_at(out: Path) -> dict[str, str]:
    return {sid: _report(out, sid)["identity"]["graded_at"] + _report(out, sid)["identity"]["content_hash"]
            for sid in ROSTER_ORDER}


def test_a_killed_run_resumes_with_the_students_it_had_not_finished(single, klass, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(single, out)
    proc = grade(klass, out)
    assert "graded 0 students, kept 6 already graded" in proc.stdout
    before = _graded_at(out)
    # killed while writing alice (her folder half-written under its temporary name), bob's report
    # cut short, and dave handed in memory_types since
    os.replace(out / "students" / "alice", out / "students" / ".partial-alice")
    (out / "students" / ".partial-alice" / "report.json").write_text('{"identity": {"content')
    report = out / "students" / "bob" / "report.json"
    report.write_text(report.read_text()[:100])
    _put(klass / "repos" / "dave", "memory_types", _ref("memory_types"))
    try:
        proc = grade(klass, out)
        assert "graded 3 students, kept 3 already graded" in proc.stdout, proc.stdout
        after = _graded_at(out)
        assert [s for s in ROSTER_ORDER if after[s] == before[s]] == ["carol", "erin", "frank"]
        assert not (out / "students" / ".partial-alice").exists()
        _, rows = _rows(out)
        assert float(rows["dave"]["memory_types"]) == float(rows["alice"]["memory_types"]) > 0
        assert rows["dave"]["status"] == "ok"
        proc = grade(klass, out, "--force")
        assert "graded 6 students, kept 0 already graded" in proc.stdout
        # diff: only dave changed against the first run
        diff = cli("diff", str(single), str(out))
        assert diff.returncode == 1, diff.stderr
        assert diff.stdout.splitlines()[0].startswith("1 students changed")
        assert f"dave: 0 -> {rows['dave']['total']}" in diff.stdout
        assert "  memory_types/compile: error -> pass" in diff.stdout
    finally:
        (klass / "repos" / "dave" / "labs" / "memory_types" / "student.cu").unlink()
        shutil.rmtree(klass / "repos" / "dave" / "labs" / "memory_types")


def test_a_grading_that_ended_in_the_graders_own_error_is_graded_again_on_resume(single, klass, tmp_path):
    """An interrupt can end a student's grading in the grader's own error (a pool shut down under
    it): that result is published, but it is never kept as current."""
    out = tmp_path / "out"
    shutil.copytree(single, out)
    report = out / "students" / "erin" / "report.json"
    doc = json.loads(report.read_text())
    doc["labs"][0]["checks"][0]["message"] = ("internal grader error 1a2b3c (RuntimeError: cannot schedule new futures after "
                                              "interpreter shutdown); the trace is in /tmp/x.log")
    report.write_text(json.dumps(doc))
    proc = grade(klass, out)
    assert "graded 1 student, kept 5 already graded" in proc.stdout, proc.stdout
    assert "internal grader error" not in (out / "students" / "erin" / "report.json").read_text()


@pytest.mark.parametrize("option", [("--no-sanitizers",), ("--gradescope-visibility", "hidden")])
def test_an_option_that_changes_what_is_written_makes_every_result_stale(single, klass, tmp_path, option):
    out = tmp_path / "out"
    shutil.copytree(single, out)
    proc = grade(klass, out, *option)
    assert "graded 6 students, kept 0 already graded" in proc.stdout, proc.stdout
    proc = grade(klass, out, *option)
    assert "graded 0 students, kept 6 already graded" in proc.stdout, proc.stdout


def _normalised(path: Path) -> object:
    """A results file less what differs between two gradings of the same work (time, cache)."""
    if path.suffix == ".md":
        return re.sub(r"graded \d{4}-\S+Z|build_cached: \w+", "", path.read_text())
    if path.suffix != ".json":
        return path.read_bytes()
    doc = json.loads(path.read_text())
    who = doc.get("identity") or doc.get("extra_data", {}).get("identity") or {}
    who.pop("graded_at", None)
    doc.pop("execution_time", None)
    for lab in doc.get("labs", []):
        lab.pop("stage_seconds", None)
        lab.get("environment", {}).pop("build_cached", None)
        for c in lab.get("checks", []):
            c.pop("duration_s", None)
    return doc


def _files(out: Path) -> dict[str, object]:
    return {str(p.relative_to(out)): _normalised(p) for p in sorted(out.rglob("*"))
            if p.is_file() and p.suffix in (".json", ".csv", ".md", ".png")}


def _student_files(out: Path) -> dict[str, object]:
    """Each published student's report.json and results.json, less what differs between runs."""
    return {f"{d.name}/{name}": _normalised(d / name) for d in sorted((out / "students").iterdir())
            if not d.name.startswith(".") for name in ("report.json", "results.json")}


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_an_interrupt_at_any_point_keeps_only_whole_results_and_a_resume_completes_them(single, klass, tmp_path, seed):
    """A class run stopped at a (seeded) moment by Ctrl-C, SIGTERM or SIGHUP: every student folder
    it published is exactly what a clean run writes (none holds what the stop did to a grading),
    and resuming grades the rest to the clean run's results."""
    chance = random.Random(seed)
    signum = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)[seed % 3]
    out = tmp_path / "out"
    lab_args = [a for lab in LABS for a in ("--lab", lab)]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "GITHUB_STEP_SUMMARY")}
    env["GRADER_CACHE_DIR"] = str(tmp_path / "cache")  # cold: the stop comes while the class's builds are under way
    proc = subprocess.Popen([sys.executable, "-m", "grader", "grade-class", "--roster", str(klass / "roster.csv"), "--out",
                             str(out), "--no-gpu", "-q", *lab_args], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(chance.uniform(1.0, 15.0))
    if proc.poll() is None:
        os.killpg(proc.pid, signum)  # as a terminal or a scheduler does: the whole process group
    _, err = proc.communicate(timeout=300)
    assert "Traceback" not in err, err
    clean = _student_files(single)
    if (out / "students").is_dir():
        kept = _student_files(out)
        assert {k: v for k, v in clean.items() if k in kept} == kept, f"signal {signum}: a kept folder differs from a clean run's"
    grade(klass, out)
    assert _student_files(out) == clean


def test_merged_shards_are_what_a_single_run_writes(single, klass, tmp_path):
    one, two, merged = tmp_path / "s1", tmp_path / "s2", tmp_path / "merged"
    grade(klass, one, "--shard", "1/2")
    grade(klass, two, "--shard", "2/2")
    graded = [set(gradebook.read_manifest(d).students) for d in (one, two)]
    assert graded[0] | graded[1] == set(ROSTER_ORDER) and not graded[0] & graded[1]
    assert len(graded[0]) == len(graded[1]) == 3
    _, rows = _rows(one)
    assert set(rows) == graded[0]  # a shard's own gradebook holds its students only
    missing = cli("merge", str(one), "--out", str(merged))
    assert missing.returncode == 2 and missing.stderr.strip() == "error: missing shard 2/2 of this class"
    twice = cli("merge", str(one), str(one), "--out", str(merged))
    assert twice.returncode == 2 and "shard 1/2 is given twice" in twice.stderr
    proc = cli("merge", str(two), str(one), "--out", str(merged))
    assert proc.returncode == 0, proc.stderr
    expected, got = _files(single), _files(merged)
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name] == expected[name], name
    same = cli("diff", str(single), str(merged))
    assert same.returncode == 0 and same.stdout.startswith("no student's score or verdicts changed")


def test_one_students_failure_never_stops_the_class(klass, tmp_path, monkeypatch):
    from grader.classroom import roster, student
    from grader.classroom.progress import Display
    from grader.classroom.run import ClassOptions, grade_class
    from grader.isolation.options import GradeOptions

    repos = tmp_path / "repos"
    shutil.copytree(klass / "repos" / "alice", repos / "alice", ignore=shutil.ignore_patterns(".git"))
    shutil.copytree(klass / "repos" / "alice", repos / "buggy", ignore=shutil.ignore_patterns(".git"))
    (repos / "piped" / "labs" / "tiled_matmul").mkdir(parents=True)
    os.mkfifo(repos / "piped" / "labs" / "tiled_matmul" / "student.cu")  # would block a careless reader forever
    real = student.grade_repo

    def flaky(repo, *args, **kwargs):
        if repo.name == "buggy":
            raise RuntimeError("a bug in the grader")
        return real(repo, *args, **kwargs)

    monkeypatch.setattr(student, "grade_repo", flaky)
    monkeypatch.setenv("GRADER_LOG", str(tmp_path / "errors.log"))
    run = grade_class(roster.from_folder(repos), GradeOptions(gpu=False), ClassOptions(tmp_path / "out", ("tiled_matmul",)),
                      Display(quiet=True))
    rows = {r.student: r for r in run.rows}
    assert [r.student for r in run.graded] == ["alice", "buggy", "piped"]
    assert rows["alice"].status == "ok" and rows["alice"].total == 2
    (problem,) = rows["buggy"].problems
    assert problem.startswith("tiled_matmul: internal grader error ") and "RuntimeError: a bug in the grader" in problem
    assert "Traceback" in (tmp_path / "errors.log").read_text()
    (problem,) = rows["piped"].problems
    assert problem == ("tiled_matmul: labs/tiled_matmul/student.cu is a FIFO (named pipe): a submitted source file must be "
                       "a regular file: the lab's file must be at labs/tiled_matmul/student.cu")
    assert "buggy" in (tmp_path / "out" / "summary.md").read_text().split("## Students whose grading hit an error")[1]


def test_the_slurm_script_grades_one_shard_per_task_and_merges_them(klass, tmp_path):
    """The array job with SLURM's variables and a stand-in sbatch that records the merge step."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/sbatch.log\n')
    (bin_dir / "sbatch").chmod(0o755)
    (tmp_path / "roster.csv").write_text(f"student,path\nalice,{klass}/repos/alice\ndave,{klass}/repos/dave\n")
    script = ROOT / "ci" / "slurm" / "grade-class.sbatch"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GRADER": f"{sys.executable} -m grader",
           "GRADER_NO_GPU": "1", "SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "1",
           "SLURM_CPUS_PER_TASK": "2"}
    results = tmp_path / "results"
    for task in ("1", "2"):
        done = subprocess.run(["bash", str(script), str(tmp_path / "roster.csv"), str(results)], cwd=ROOT, capture_output=True,
                              text=True, env={**env, "SLURM_ARRAY_TASK_ID": task}, timeout=600)
        assert done.returncode == 0, done.stderr
    (merge_call,) = (tmp_path / "sbatch.log").read_text().splitlines()  # submitted once, by the first task
    assert "--dependency=afterany:42" in merge_call and merge_call.endswith(f"--merge {results} 2")
    done = subprocess.run(["bash", str(script), "--merge", str(results), "2"], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    _, rows = _rows(results / "class")
    assert list(rows) == ["alice", "dave"] and float(rows["alice"]["tiled_matmul"]) == 2
    # an sbatch that refuses the merge step keeps no shard from being graded, and says what to run
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: QOSMaxSubmitJobPerUserLimit' >&2\nexit 1\n")
    refused = tmp_path / "refused"
    done = subprocess.run(["bash", str(script), str(tmp_path / "roster.csv"), str(refused)], cwd=ROOT, capture_output=True,
                          text=True, env={**env, "SLURM_ARRAY_TASK_ID": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "warning: could not submit the merge step" in done.stderr and f"--merge {refused} 2" in done.stderr
    assert (refused / "shards" / "1" / "grades.csv").is_file()


def test_the_leaderboard_ranks_each_timed_labs_speed_against_the_reference():
    from grader.engine.identity import Identity
    from grader.gradebook import gradescope
    from grader.outcome import LabReport

    timed = LabReport("tiled_matmul", "Tiled", "labs/tiled_matmul/student.cu", (),
                      timings={"student": {"median_ms": 2.0}, "reference": {"median_ms": 3.0}, "naive": {"median_ms": 9.0}})
    untimed = LabReport("histogram", "Histogram", "labs/histogram/student.cu", (), timings={"reference": {"median_ms": 1.0}})
    doc = gradescope.results([timed, untimed], Identity("ada", None, None, {}, {}, "", gpu="NVIDIA H100 80GB HBM3", driver="580"),
                             execution_time=12.34)
    assert doc["leaderboard"] == [{"name": "tiled_matmul: speed vs reference", "value": 1.5, "order": "desc"}]
    assert doc["execution_time"] == 12.3 and doc["extra_data"]["gpu"] == {"name": "NVIDIA H100 80GB HBM3", "driver": "580"}
    _schema("gradescope-results.schema.json").validate(doc)


def test_a_students_results_json_shows_no_folder_of_the_tas(tmp_path):
    """An internal error's message names the TA's log file; what the student sees keeps only its id."""
    from grader.gradebook import gradescope
    from grader.outcome import CheckResult, LabReport, Outcome, Stage

    log = tmp_path / "ta-home" / ".cache" / "cuda-lab-grader" / "internal-errors.log"
    check = CheckResult("compile", Stage.COMPILE, Outcome.ERROR, 0, 0,
                        f"internal grader error 1a2b3c (RuntimeError: boom); the trace is in {log}")
    doc = gradescope.results([LabReport("tiled_matmul", "Tiled", "labs/tiled_matmul/student.cu", (check,))])
    (test,) = doc["tests"]
    assert str(tmp_path) not in json.dumps(doc)
    assert test["output"] == "internal grader error 1a2b3c (RuntimeError: boom); the course staff have its trace (give them this id)"


def test_a_stopped_class_says_how_many_students_are_kept_and_how_to_go_on(klass, tmp_path):
    """Stopped once a student is published: exit 130, one line that counts the students whose
    results are kept (as many as there are folders) and says to run the command again, and that
    run grades the rest."""
    out = tmp_path / "out"
    lab_args = [a for lab in LABS for a in ("--lab", lab)]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "GITHUB_STEP_SUMMARY")}
    env["GRADER_CACHE_DIR"] = str(tmp_path / "cache")  # cold: six students take a while
    proc = subprocess.Popen([sys.executable, "-m", "grader", "grade-class", "--roster", str(klass / "roster.csv"), "--out",
                             str(out), "--no-gpu", "-q", "-j", "1", *lab_args], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list((out / "students").glob("*/report.json")):
        assert proc.poll() is None and time.monotonic() < deadline, "no student was published"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, with five students still to grade
    _, err = proc.communicate(timeout=120)
    kept = len(list((out / "students").glob("*/report.json")))
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert f"stopped: {kept} of 6 students have their results in {out}/students" in err, err
    assert "run the same command again to grade the rest" in err and kept < 6
    again = grade(klass, out)
    assert f"kept {kept} already graded" in again.stdout
