"""The command line in a subprocess, as CI runs it, without a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml, Skipped

ROOT = Path(__file__).resolve().parent.parent
WRONG_PROTOTYPE = "labs/tiled_matmul/solutions/wrong/wrong_prototype.cu"
NO_GPU_REASON = "needs a GPU: GPU checks disabled by GRADER_NO_GPU"


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """One build cache for the module, so the reference is compiled once across invocations."""
    e = dict(os.environ)
    for var in ("GRADER_ARCHS", "GRADER_LABS_DIR", "GITHUB_STEP_SUMMARY", "CUDA_VISIBLE_DEVICES"):
        e.pop(var, None)
    e["GRADER_CACHE_DIR"] = str(tmp_path_factory.mktemp("cli-cache"))
    e["GRADER_LOG"] = str(tmp_path_factory.mktemp("cli-log") / "internal-errors.log")
    e["GRADER_NO_GPU"] = "1"
    return e


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "grader", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr, proc.stderr
    return proc


def test_labs_lists_tiled_matmul(env):
    proc = cli(env, "labs")
    assert proc.returncode == 0, proc.stderr
    assert "tiled_matmul" in proc.stdout
    assert "Tiled matrix multiplication (24 points)" in proc.stdout


# ------------------------------------------------------------------ grading the reference


@pytest.fixture(scope="module")
def graded(env, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    return cli(env, "grade", "tiled_matmul", "--out", str(out)), out


def test_grade_reference_without_gpu(graded):
    proc, _ = graded
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "== tiled_matmul: Tiled matrix multiplication -- reference/tiled_matmul/reference.cu" in out
    assert "compile: compiled for sm_90" in out
    (static,) = [line for line in out.splitlines() if "shared_memory_tiles:" in line]
    assert static.split()[:2] == ["PASS", "2/2"]
    assert "shared-memory instructions (LDS/STS) in the SASS" in static
    # one line for the eleven checks a GPU would run, each named, the reason said once
    (skip_line,) = [line for line in out.splitlines() if line.lstrip().startswith("SKIP")]
    assert skip_line.split()[:4] == ["SKIP", "0/22", "11", "checks"] and skip_line.endswith(f"): {NO_GPU_REASON}")
    assert "correctness[width=16], correctness[width=48]" in skip_line and "global_load_reduction" in skip_line
    assert out.count(NO_GPU_REASON) == 1
    assert "score 2/24 (22 points not checked here)" in out
    assert "[tiled_matmul] compiling reference/tiled_matmul/reference.cu for sm_90" in proc.stderr


def test_grade_writes_reports(graded):
    _, out = graded
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md", "report.xml"]

    xml = JUnitXml.fromfile(str(out / "report.xml"))
    (suite,) = list(xml)
    assert suite.name == "tiled_matmul"
    assert suite.tests == 13
    assert suite.skipped == 11
    assert suite.failures == 0 and suite.errors == 0
    skipped = [c for c in suite if c.result and isinstance(c.result[0], Skipped)]
    assert len(skipped) == 11
    assert all(c.result[0].message == NO_GPU_REASON for c in skipped)
    names = [c.name for c in suite]
    assert names[0] == "compile"
    assert "correctness[width=16] (2 pts)" in names
    assert "shared_memory_tiles (2 pts)" in names
    props = {p.name: p.value for p in suite.properties()}
    assert props["score"] == "2" and props["max_score"] == "24" and props["skipped_points"] == "22"
    assert props["archs"] == "sm_90"

    doc = json.loads((out / "report.json").read_text())
    assert doc["score"] == 2 and doc["max_score"] == 24
    (lab,) = doc["labs"]
    outcomes = [c["outcome"] for c in lab["checks"]]
    assert outcomes == ["pass", "pass"] + ["skipped"] * 11
    assert lab["environment"]["gpu"] == "none: GPU checks disabled by GRADER_NO_GPU"
    assert any("matmul_tiled" in k["name"] and k["smem_bytes"] == 2048 for k in lab["kernels"])

    md = (out / "report.md").read_text()
    assert md.startswith("# CUDA lab grade: 2/24")
    assert "| ⏭️ | `correctness[width=16]` | 0/2 |" in md


def test_fail_under_percentage(graded, env):
    proc = cli(env, "grade", "tiled_matmul", "--fail-under", "50%", "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "score 2 is below --fail-under 50%" in proc.stderr
    assert "score 2/24" in proc.stdout
    assert "compiling" not in proc.stderr  # -q
    # 2 points are enough for --fail-under 2 (the build is cached by now)
    proc = cli(env, "grade", "tiled_matmul", "--fail-under", "2", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fail_under_rejects_garbage_before_compiling(env):
    proc = cli(env, "grade", "tiled_matmul", "--fail-under", "abc")
    assert proc.returncode == 2
    assert "--fail-under: expected a number of points or a percentage, got 'abc'" in proc.stderr
    assert "compiling" not in proc.stderr
    assert proc.stdout == ""


# ------------------------------------------------------------------ other submissions


def test_grade_stub(env):
    proc = cli(env, "grade", "tiled_matmul", "--stub")
    assert proc.returncode == 0, proc.stderr
    assert "-- student_template/labs/tiled_matmul/student.cu" in proc.stdout
    lines = proc.stdout.splitlines()
    assert next(line for line in lines if " compile:" in line).split()[0] == "PASS"
    static = next(line for line in lines if "shared_memory_tiles:" in line)
    assert static.split()[:2] == ["FAIL", "0/2"]
    assert "0 shared-memory instructions" in static
    assert "stage tiles of M and" in static  # the lab's hint
    assert "score 0/24 (22 points not checked here)" in proc.stdout


def test_grade_wrong_prototype(env):
    proc = cli(env, "grade", "tiled_matmul", WRONG_PROTOTYPE)
    assert proc.returncode == 0, proc.stderr
    compile_line = next(line for line in proc.stdout.splitlines() if " compile:" in line)
    assert compile_line.split()[0] == "ERROR"
    assert f"compile error: {WRONG_PROTOTYPE}:6: error" in compile_line
    assert '"matmul" has "C" linkage' in compile_line
    assert 'the launcher must be exactly: extern "C" void matmul(const float* M, const float* N, float* P, int width);' in compile_line
    assert "not graded: the file did not compile" in proc.stdout
    assert "score 0/24" in proc.stdout
    assert "SKIP" not in proc.stdout


def test_unknown_lab(env):
    proc = cli(env, "grade", "nosuchlab")
    assert proc.returncode == 2
    assert "error: unknown lab 'nosuchlab' (known labs: " in proc.stderr
    assert "tiled_matmul" in proc.stderr.split("known labs:")[1]
    proc = cli(env, "grade", "tiled_matmu")
    assert proc.returncode == 2
    assert "did you mean 'tiled_matmul'?" in proc.stderr


def test_missing_source_file(env):
    proc = cli(env, "grade", "tiled_matmul", "missing.cu")
    assert proc.returncode == 2
    assert "error: missing.cu: file not found" in proc.stderr
    assert proc.stdout == ""


def test_source_and_stub_together(env):
    proc = cli(env, "grade", "tiled_matmul", WRONG_PROTOTYPE, "--stub")
    assert proc.returncode == 2
    assert "not both" in proc.stderr


def test_bad_arch(env):
    proc = cli(env, "grade", "tiled_matmul", "--arch", "hopper")
    assert proc.returncode == 2
    assert "--arch: expected something like sm_90, got 'hopper'" in proc.stderr


def test_arch_sm80(env, tmp_path):
    report = tmp_path / "r.json"
    proc = cli(env, "grade", "tiled_matmul", "--arch", "sm_80", "--json", str(report), "-q")
    assert proc.returncode == 0, proc.stderr
    assert "compile: compiled for sm_80" in proc.stdout
    (lab,) = json.loads(report.read_text())["labs"]
    assert lab["environment"]["archs"] == "sm_80"
    assert lab["checks"][0]["message"] == "compiled for sm_80"
    assert lab["kernels"] and lab["kernels"][0]["smem_bytes"] == 2048
    assert not (tmp_path / "report.xml").exists()  # only what was asked for


# ------------------------------------------------------------------ check-lab


def test_check_lab_ok(env):
    proc = cli(env, "check-lab", "tiled_matmul")
    assert proc.returncode == 0, proc.stderr
    assert "lab.yaml: ok (5 correctness cases, 24 points)" in proc.stdout


def test_check_lab_malformed_copy(env, tmp_path):
    lab = tmp_path / "labs" / "tiled_matmul"
    shutil.copytree(ROOT / "labs" / "tiled_matmul", lab)
    yaml_path = lab / "lab.yaml"
    text = yaml_path.read_text()
    yaml_path.write_text(text.replace("launcher:\n  name: matmul", "launcher:\n  name: matmul\n bad: [", 1))
    proc = cli(env, "check-lab", str(yaml_path))
    assert proc.returncode == 2
    assert f"error: {yaml_path}: malformed YAML: line " in proc.stderr
    assert proc.stdout == ""


def test_check_lab_spec_error_in_copy(env, tmp_path):
    for sub in ("labs/tiled_matmul", "reference/tiled_matmul", "student_template/labs/tiled_matmul"):
        shutil.copytree(ROOT / sub, tmp_path / sub)
    yaml_path = tmp_path / "labs" / "tiled_matmul" / "lab.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("tolerance:", "tolerence:", 1))
    proc = cli(env, "check-lab", str(yaml_path.parent))  # the folder works too
    assert proc.returncode == 2
    assert f"{yaml_path}: tolerence: unknown key; did you mean 'tolerance'?" in proc.stderr


# ------------------------------------------------------------------ a whole student repository


def test_grade_repo_of_the_template_gives_one_suite_per_lab(env, tmp_path):
    from grader.labspec.labs import lab_ids

    proc = cli(env, "grade-repo", "student_template", "--out", str(tmp_path), "-q")
    assert proc.returncode == 0, proc.stderr
    suites = list(JUnitXml.fromfile(str(tmp_path / "report.xml")))
    assert [s.name for s in suites] == lab_ids()
    assert f"== total over {len(lab_ids())} labs: 0/" in proc.stdout
    data = json.loads((tmp_path / "report.json").read_text())
    assert [r["lab"] for r in data["labs"]] == lab_ids()
    assert all(r["submission"] == f"labs/{r['lab']}/student.cu" for r in data["labs"])
    assert "# CUDA lab grade: 0/" in (tmp_path / "report.md").read_text()


def test_grade_repo_with_a_missing_lab_still_grades_the_others(env, tmp_path):
    repo = tmp_path / "repo"
    (repo / "labs" / "tiled_matmul").mkdir(parents=True)
    shutil.copy(ROOT / "reference" / "tiled_matmul" / "reference.cu", repo / "labs" / "tiled_matmul" / "student.cu")
    (repo / "labs" / "memory_types" / "student.cu").mkdir(parents=True)  # a folder where the file belongs
    proc = cli(env, "grade-repo", str(repo), "--lab", "tiled_matmul", "--lab", "memory_types", "--lab", "histogram",
               "--json", str(tmp_path / "r.json"), "-q")
    assert proc.returncode == 0, proc.stderr
    labs = {r["lab"]: r for r in json.loads((tmp_path / "r.json").read_text())["labs"]}
    assert labs["tiled_matmul"]["checks"][0]["outcome"] == "pass"
    assert labs["tiled_matmul"]["score"] == 2  # the shared-memory check; the rest needs a GPU
    first = labs["memory_types"]["checks"][0]
    assert first["outcome"] == "error"
    assert first["message"] == "labs/memory_types/student.cu is a directory, not a file: the lab's file must be at labs/memory_types/student.cu"
    assert labs["histogram"]["checks"][0]["message"].startswith("labs/histogram/student.cu not found")
    assert all(c["outcome"] == "fail" for c in labs["histogram"]["checks"][1:])


def test_grade_repo_of_a_file_is_a_clear_error(env):
    proc = cli(env, "grade-repo", "README.md")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: README.md: expected the folder of a student repository, got a file"


def test_grade_repo_fail_under_uses_the_total(env, tmp_path):
    proc = cli(env, "grade-repo", "student_template", "--lab", "tiled_matmul", "--fail-under", "1", "-q")
    assert proc.returncode == 1
    assert "score 0 is below --fail-under 1" in proc.stderr


# ------------------------------------------------------------------ instructors' commands


def test_readme_check_passes_on_the_committed_readmes(env):
    proc = cli(env, "readme", "--check")
    assert proc.returncode == 0, proc.stderr


def test_validate_without_gpu_compares_what_can_run(env):
    proc = cli(env, "validate", "tiled_matmul", "-q")
    assert proc.returncode == 0, proc.stdout
    assert "== validate tiled_matmul: 16 known solutions" in proc.stdout
    assert "all verdicts as expected" in proc.stdout
    assert "checks could not run on this machine and were not compared" in proc.stdout


# ------------------------------------------------------------------ bad input: one clear message each


@pytest.mark.parametrize("name,content,message", [
    ("empty.cu", b"", "empty.cu is empty: write the lab's launcher in it"),
    ("blank.cu", b"  \n\t\n", "blank.cu is empty: write the lab's launcher in it"),
    ("folder.cu", None, "folder.cu is a directory"),
])
def test_a_source_that_cannot_be_compiled_is_the_students_compile_error_naming_their_file(env, tmp_path, name, content, message):
    """The student's own file is empty or no file: one message, as a compile error is (the later
    checks fail, not graded), with the file as the student names it, never the grader's folders."""
    repo = tmp_path / "repo"
    path = repo / "labs" / "tiled_matmul" / "student.cu"
    path.parent.mkdir(parents=True)
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    proc = cli(env, "grade-repo", str(repo), "--lab", "tiled_matmul", "--no-gpu", "--json", str(tmp_path / "r.json"))
    assert proc.returncode != 2, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    checks = {c["id"]: c for lab in report["labs"] for c in lab["checks"]}
    assert checks["compile"]["outcome"] == "error"
    assert checks["compile"]["message"].startswith(message.replace(name, "labs/tiled_matmul/student.cu")), checks["compile"]
    assert {c["outcome"] for cid, c in checks.items() if cid != "compile"} <= {"fail", "skipped"}
    assert "not graded: the grader failed" not in proc.stdout and str(tmp_path) not in checks["compile"]["message"]


def test_a_latin1_comment_compiles_as_nvcc_compiles_it(env, tmp_path):
    path = tmp_path / "latin1.cu"
    path.write_bytes(b'extern "C" void matmul(const float* M, const float* N, float* P, int width) {}  // caf\xe9\n')
    cli(env, "grade", "tiled_matmul", str(path), "--no-gpu", "--json", str(tmp_path / "r.json"))
    checks = {c["id"]: c for lab in json.loads((tmp_path / "r.json").read_text())["labs"] for c in lab["checks"]}
    assert checks["compile"]["outcome"] == "pass", checks["compile"]


def test_grading_with_a_malformed_lab_yaml_names_the_file_and_line(env, tmp_path):
    for sub in ("labs/tiled_matmul", "reference/tiled_matmul", "student_template/labs/tiled_matmul"):
        shutil.copytree(ROOT / sub, tmp_path / sub)
    yaml_path = tmp_path / "labs" / "tiled_matmul" / "lab.yaml"
    yaml_path.write_text(yaml_path.read_text() + "\nextra: [unclosed\n")
    proc = cli({**env, "GRADER_LABS_DIR": str(tmp_path / "labs")}, "grade", "tiled_matmul")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: {yaml_path}: malformed YAML: line ")


def test_a_bad_time_limit_is_refused_before_grading(env):
    proc = cli(env, "grade", "tiled_matmul", "--time-limit", "0")
    assert proc.returncode == 2
    assert "argument --time-limit: '0' is not a positive number of seconds" in proc.stderr


def test_output_cut_short_by_its_reader_is_not_an_internal_error():
    """`cuda-grader labs | head -1`: the pipe closes before the listing is written."""
    proc = subprocess.run(f"{sys.executable} -m grader labs | head -c 1", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout == "b"
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_failing_thread_of_the_grader_shows_one_line_and_logs_its_trace(tmp_path):
    """A class run printed whole traces from a thread that ended its workers, among the progress:
    now one line with a short id, as the command's own internal errors, and the trace in the log."""
    log = tmp_path / "internal.log"
    script = ("import threading\nfrom grader.errors import report_thread_errors\nreport_thread_errors()\n"
              "def fail():\n    raise ValueError('a descriptor that was not open')\n"
              "t = threading.Thread(target=fail, name='teardown')\nt.start()\nt.join()\nprint('went on')\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GRADER_LOG": str(log)})
    assert proc.returncode == 0 and proc.stdout == "went on\n"
    [line] = proc.stderr.splitlines()
    short = line.split()[2]
    assert line == (f"internal error {short} in the grader's thread teardown: ValueError: a descriptor that was not open "
                    f"(full trace in {log})")
    trace = log.read_text()
    assert f"--- internal error {short}" in trace and "Traceback" in trace and "in fail" in trace


def test_every_command_reports_failing_threads_so(monkeypatch, capsys):
    import threading

    from grader import cli

    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)  # restored after the test
    assert cli.main(["labs"]) == 0
    assert threading.excepthook.__qualname__.startswith("report_thread_errors")


def test_every_argument_of_every_command_says_what_it_is():
    import argparse

    from grader.cli import _parser

    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    bare = [f"{name} {a.dest}" for name, sub in commands.items() for a in sub._actions
            if not isinstance(a, argparse._HelpAction) and not a.help]
    assert bare == []
    labs_help = {name: next(a.help for a in sub._actions if a.dest == "labs_dir") for name, sub in commands.items()}
    assert not [name for name, text in labs_help.items() if "grade with" in str(text)], labs_help


def test_a_class_of_one_is_one_student():
    from grader.textutil import plural

    assert [plural(n, "student") for n in (0, 1, 2)] == ["0 students", "1 student", "2 students"]


def test_without_a_gpu_only_the_students_files_are_compiled(env, tmp_path):
    """The baselines and references run on a GPU alone: a grade without one builds none of them."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "student_template", repo)
    cache = tmp_path / "cache"
    proc = cli({**env, "GRADER_CACHE_DIR": str(cache)}, "grade-repo", str(repo), "-q")
    assert "Traceback" not in proc.stderr, proc.stderr
    builds = [d for d in (cache / "builds").iterdir() if not d.name.startswith(".")]
    assert len(builds) == len(list((repo / "labs").glob("*/student.cu"))) == 5


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_cache_folder_given_relative_to_where_the_grader_starts_works(how, tmp_path, monkeypatch, capsys):
    """A relative --cache-dir or GRADER_CACHE_DIR is the folder below the working one, wherever the
    compiler and the sandbox then run (bubblewrap refused a relative path: every lab failed to compile)."""
    from grader import cli
    from grader.labspec.labs import find_lab

    repo = tmp_path / "repo"
    target = repo / "labs" / "tiled_matmul" / "student.cu"
    target.parent.mkdir(parents=True)
    shutil.copy(find_lab("tiled_matmul").files.reference, target)
    monkeypatch.chdir(tmp_path)
    args = ["grade-repo", "repo", "--lab", "tiled_matmul", "--no-gpu", "-q"]
    if how == "option":
        args += ["--cache-dir", "cache"]
    else:
        monkeypatch.setenv("GRADER_CACHE_DIR", "cache")
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "compile error" not in out and "compile failed" not in out
    assert any((tmp_path / "cache" / "builds").iterdir())


def test_rerun_tools_turns_off_the_kept_tool_runs_for_every_grading_command(tmp_path):
    from grader.cli import _options, _parser

    for command in (["grade", "tiled_matmul"], ["grade-repo", str(tmp_path)], ["grade-class", str(tmp_path), "--out", str(tmp_path / "out")]):
        plain = _parser().parse_args([*command, "--cache-dir", str(tmp_path / "cache"), "--no-gpu"])
        again = _parser().parse_args([*command, "--cache-dir", str(tmp_path / "cache"), "--no-gpu", "--rerun-tools"])
        assert (_options(plain).reuse_tool_runs, _options(again).reuse_tool_runs) == (True, False), command
