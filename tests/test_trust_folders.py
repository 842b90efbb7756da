"""A student folder is what it says, and the sandbox hides the course wherever it lives.

Each test is an attack that worked: a folder borrowing a classmate's history through a ``gitdir:``
file or a link, a FIFO among git's files stalling the class, a course under a system folder the
sandbox binds, a user namespace created inside the sandbox, and bidirectional controls and
workflow commands from the compiler reaching the reports. Sandbox attacks run as root and, where
this machine can, again as an unprivileged user (``nobody`` through ``setpriv``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from importable import copy_grader

from grader.classroom import plan, roster
from grader.classroom.progress import Display
from grader.classroom.run import ClassOptions, grade_class
from grader.isolation import gitinfo
from grader.isolation import sandbox as sandboxing
from grader.isolation.options import GradeOptions
from grader.labspec.labs import PROJECT_ROOT

ROOT = Path(__file__).resolve().parent.parent
SANDBOX = sandboxing.detect()
NOBODY = 65534
LAB = "tiled_matmul"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
needs_sandbox = pytest.mark.skipif(not SANDBOX.active, reason=f"no sandbox here: {SANDBOX.reason}")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x", "GIT_COMMITTER_NAME": "s",
           "GIT_COMMITTER_EMAIL": "s@x", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def _repo(path: Path, source: Path) -> Path:
    """A git repository whose one commit holds ``source`` as the lab's student file."""
    target = path / "labs" / LAB / "student.cu"
    target.parent.mkdir(parents=True)
    shutil.copy(source, target)
    _git(path, "init", "-q")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "submitted")
    return path


def _grade(students: list[roster.Student], out: Path) -> dict[str, tuple[str, float, tuple[str, ...]]]:
    run = grade_class(students, GradeOptions(gpu=False), ClassOptions(out, (LAB,)), Display(quiet=True))
    return {r.student: (r.status, r.total, r.problems) for r in run.rows}


REFERENCE = ROOT / "reference" / LAB / "reference.cu"
STUB = ROOT / "student_template" / "labs" / LAB / "student.cu"


# ------------------------------------------------------------------ (a) a .git that is someone else's


@needs_git
def test_a_gitdir_file_pointing_at_a_classmate_is_refused_and_the_classmate_graded(tmp_path):
    repos = tmp_path / "repos"
    _repo(repos / "bob", REFERENCE)
    mallory = repos / "mallory"
    (mallory / "labs" / LAB).mkdir(parents=True)
    shutil.copy(STUB, mallory / "labs" / LAB / "student.cu")
    (mallory / ".git").write_text("gitdir: ../bob/.git\n")
    (tmp_path / "roster.csv").write_text("student,path,commit\nbob,repos/bob,HEAD\nmallory,repos/mallory,HEAD\n")
    rows = _grade(roster.load(tmp_path / "roster.csv"), tmp_path / "out")
    assert rows["bob"][0] == "ok" and rows["bob"][1] > 0, rows["bob"]
    status, total, problems = rows["mallory"]
    assert total == 0, rows["mallory"]
    (problem,) = problems
    assert str(mallory / ".git") in problem and "'gitdir:'" in problem and "their own .git folder" in problem, problem
    report = json.loads((tmp_path / "out" / "students" / "mallory" / "report.json").read_text())
    assert report["identity"]["commit"] is None  # bob's commit is not recorded as mallory's


@needs_git
def test_a_repository_that_borrows_objects_or_links_its_git_folder_is_refused(tmp_path):
    bob = _repo(tmp_path / "bob", REFERENCE)
    alt = _repo(tmp_path / "alt", STUB)
    (alt / ".git" / "objects" / "info" / "alternates").write_text(str(bob / ".git" / "objects") + "\n")
    assert "borrows another repository's history" in gitinfo.repository_problem(alt)
    assert gitinfo.resolve(alt) is None
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".git").symlink_to(bob / ".git")
    assert "is a symbolic link, not a folder" in gitinfo.repository_problem(linked)
    assert gitinfo.resolve(linked, "HEAD") is None
    assert gitinfo.repository_problem(bob) == "" and gitinfo.resolve(bob) is not None


# ------------------------------------------------------------------ (b) a student folder that is a link


def test_a_student_folder_that_links_to_a_classmate_is_refused(tmp_path):
    repos = tmp_path / "repos"
    (repos / "bob" / "labs" / LAB).mkdir(parents=True)
    shutil.copy(REFERENCE, repos / "bob" / "labs" / LAB / "student.cu")
    (repos / "mallory").symlink_to("bob")
    rows = _grade(roster.from_folder(repos), tmp_path / "out")
    assert rows["bob"][0] == "ok" and rows["bob"][1] > 0, rows["bob"]
    status, total, (problem,) = rows["mallory"]
    assert total == 0 and "is a symbolic link (to bob), not the student's own folder" in problem, rows["mallory"]
    # the same for the last part of a roster's path; links above it are the TA's layout
    (tmp_path / "class").symlink_to(repos)
    (tmp_path / "roster.csv").write_text("student,path\nbob,class/bob\nmallory,class/mallory\n")
    rows = _grade(roster.load(tmp_path / "roster.csv"), tmp_path / "out2")
    assert rows["bob"][0] == "ok" and "symbolic link" in rows["mallory"][2][0]


# ------------------------------------------------------------------ (f) a FIFO among git's files


@needs_git
@pytest.mark.parametrize("where", ["HEAD", "refs/heads/main", "packed-refs", "config"])
@pytest.mark.parametrize("commit", [None, "HEAD"])
def test_a_fifo_among_gits_files_is_refused_at_once(tmp_path, monkeypatch, where, commit):
    monkeypatch.setattr(gitinfo, "GIT_TIMEOUT_S", 3.0)  # a git that reads the FIFO would wait this long
    repo = _repo(tmp_path / "piped", STUB)
    fifo = repo / ".git" / where
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    started = time.monotonic()
    job = plan.plan_student(roster.Student("piped", repo, commit), [], GradeOptions(gpu=False), tmp_path / "out",
                            tmp_path / "scratch")
    assert time.monotonic() - started < 2.0  # (not the 3 s a reading git would wait)
    assert job.root is None and job.failure == f"{fifo} is a FIFO (named pipe): git's files must be regular files", job.failure


# ------------------------------------------------------------------ sandbox attacks, as root and as a user

# Run by the grader's Python as root, or by the system's Python as nobody: imports the grader from
# argv[1] and does argv[2]'s attack through the grader's own sandbox code; prints one JSON object.
ATTACK = r"""
import json, os, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from grader.context import LabsSearch, RunContext, enter
from grader.isolation import build, sandbox
what, arg = sys.argv[2], sys.argv[3]
box = sandbox.detect()
out = {"active": box.active, "describe": box.describe()}
if what == "userns":
    cmd = box.wrap(["unshare", "-U", "true"])
    done = subprocess.run(cmd, capture_output=True, text=True)
    out["unshare_rc"], out["unshare_err"] = done.returncode, done.stderr.strip()
    code = "import ctypes; l = ctypes.CDLL(None, use_errno=True); print(l.unshare(0x10000000), ctypes.get_errno())"
    done = subprocess.run(box.wrap([sys.executable, "-I", "-c", code]), capture_output=True, text=True)
    out["ctypes"] = done.stdout.strip() or done.stderr.strip()
else:
    course, scratch = Path(arg), Path(sys.argv[4])
    enter(RunContext(labs=LabsSearch(chosen=course / "labs")))  # --labs
    header = course / "labs" / "tiled_matmul" / "interface.h"
    for name, text in (("reference", f'#include "{course}/reference/tiled_matmul/reference.cu"\n'),
                       ("lab_yaml", f'#if __has_include("{course}/labs/tiled_matmul/lab.yaml")\n#error LAB_YAML_VISIBLE\n#endif\n'
                                    f'extern "C" void matmul(const float*, const float*, float*, int) {{}}\n')):
        src = scratch / f"{name}.cu"
        src.write_text(text)
        got = build.build(src, header, ("sm_90",), cache_dir=scratch / "cache", exports=("matmul",), sandbox=box)
        out[name] = {"ok": got.ok, "log": got.log}
print(json.dumps(out))
"""


def _user_mode_problem() -> str:
    if os.geteuid() != 0:
        return "the tests already run as an unprivileged user"
    if not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        return "needs setpriv and a system Python at /usr/bin/python3"
    if not SANDBOX.active:
        return f"no sandbox here: {SANDBOX.reason}"
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3",
                            "-c", "import yaml"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"the system Python cannot import the grader's dependencies ({probe.stderr.strip()[-200:]})"
    return ""


USER_MODE = _user_mode_problem()
MODES = ["root", "user"] if os.geteuid() == 0 else ["user"]


def _public(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def attack(mode: str, *args: str) -> dict:
    """ATTACK run as ``mode``: the grader's own sandbox code, in a process of that user."""
    copy = Path(tempfile.mkdtemp(prefix="grader-copy-", dir="/tmp"))
    try:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if mode == "root" and os.geteuid() == 0 or mode == "user" and os.geteuid() != 0:
            cmd = [sys.executable, "-c", ATTACK, str(PROJECT_ROOT), *args]
        else:
            if USER_MODE:
                pytest.skip(f"cannot run as an unprivileged user: {USER_MODE}")
            copy_grader(copy)
            _public(copy)
            cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", "-I",
                   "-c", ATTACK, str(copy), *args]
            env.update(HOME="/tmp", GRADER_CACHE_DIR=str(copy / "cache"))
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/", timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        result: dict = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["active"], result
        return result
    finally:
        sandboxing.remove_read_only(copy)


# ------------------------------------------------------------------ (d) no user namespace inside


@needs_sandbox
@pytest.mark.parametrize("mode", MODES)
def test_no_user_namespace_can_be_created_inside_the_sandbox(mode):
    seen = attack(mode, "userns", "-")
    assert "new user namespaces allowed" not in seen["describe"], seen["describe"]
    assert seen["unshare_rc"] != 0, seen
    rc, errno = seen["ctypes"].split()
    assert rc == "-1" and int(errno) != 0, seen


def test_the_control_a_user_namespace_is_created_outside_the_sandbox():
    """What the sandbox denies above is a real capability here: unshare -U works outside it."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare here")
    done = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"this machine allows no user namespace at all ({done.stderr.strip()})")


# ------------------------------------------------------------------ (c) a course under a bound system folder

SYSTEM_SRC = Path("/usr/local/src")


@pytest.fixture(scope="module")
def course_under_usr():
    """A copy of the course (labs and references) under /usr/local/src, which the sandbox's bind
    of /usr (and of /usr/local, for an nvcc found through a wrapper there) would show."""
    if os.geteuid() != 0:
        pytest.skip("creating a folder under /usr/local/src needs root")
    if not SYSTEM_SRC.is_dir():
        pytest.skip(f"{SYSTEM_SRC} does not exist here")
    course = SYSTEM_SRC / f"grader-course-test-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(ROOT / "labs", course / "labs")
        shutil.copytree(ROOT / "reference", course / "reference")
        _public(course)
        yield course
    finally:
        shutil.rmtree(course, ignore_errors=True)


@needs_sandbox
@pytest.mark.parametrize("mode", MODES)
def test_a_course_under_a_bound_system_folder_is_hidden_from_the_compiler(course_under_usr, mode):
    scratch = Path(tempfile.mkdtemp(prefix="trust-scratch-", dir="/tmp"))
    try:
        _public(scratch)
        if mode == "user":
            os.chown(scratch, NOBODY, NOBODY)
        seen = attack(mode, "course", str(course_under_usr), str(scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    assert not seen["reference"]["ok"], "the reference was included and compiled"
    assert "reference.cu" in seen["reference"]["log"] and "No such file" in seen["reference"]["log"], seen["reference"]
    assert seen["lab_yaml"]["ok"], seen["lab_yaml"]["log"]  # lab.yaml is not there to include


# ------------------------------------------------------------------ (e) compiler output in every report

EVIL = '::error::pwned("\u202e evil");\n'


def test_bidi_controls_and_workflow_commands_from_the_compiler_reach_no_report(tmp_path):
    import junitparser

    repo = tmp_path / "repo"
    (repo / "labs" / LAB).mkdir(parents=True)
    (repo / "labs" / LAB / "student.cu").write_text(f"void f() {{\n{EVIL}}}\n", encoding="utf-8")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "GITHUB_STEP_SUMMARY")}
    done = subprocess.run([sys.executable, "-m", "grader", "grade-repo", str(repo), "--no-gpu", "--lab", LAB, "-v",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    texts = {"terminal": done.stdout + done.stderr, "report.md": (out / "report.md").read_text(encoding="utf-8")}
    xml = junitparser.JUnitXml.fromfile(str(out / "report.xml"))
    parts = []
    for suite in xml:
        for case in suite:
            parts += [case.name or "", case.system_out or ""]
            for result in case.result:
                parts += [result.message or "", result.text or ""]
    texts["report.xml"] = "\n".join(parts)
    assert "pwned" in texts["report.md"] and "pwned" in texts["report.xml"]  # the compiler's echo is there ...
    for name, text in texts.items():  # ... with no override and no workflow command
        assert "\u202e" not in text, name
        for line in text.splitlines():
            assert not line.lstrip().startswith("::"), (name, line)
    results = json.loads((out / "report.json").read_bytes())  # JSON escapes them: data, not a display
    assert "pwned" in json.dumps(results)
    assert "\u202e" not in (out / "report.json").read_text(encoding="utf-8")


@needs_sandbox
def test_classmates_folders_under_a_bound_system_folder_are_hidden_while_a_class_is_graded():
    if os.geteuid() != 0 or not SYSTEM_SRC.is_dir():
        pytest.skip(f"creating a folder under {SYSTEM_SRC} needs root and that folder")
    klass = SYSTEM_SRC / f"grader-class-test-{uuid.uuid4().hex[:8]}"
    try:
        secret = klass / "bob" / "labs" / LAB / "student.cu"
        secret.parent.mkdir(parents=True)
        secret.write_text("// bob's work\n")
        read = ["cat", str(secret)]
        assert subprocess.run(SANDBOX.wrap(read), capture_output=True).returncode == 0  # the control: /usr shows it
        with sandboxing.kept_out([klass / "alice", klass / "bob"]):
            done = subprocess.run(SANDBOX.wrap(read, read_only=[Path("/usr/local")]), capture_output=True, text=True)
        assert done.returncode != 0 and "No such file" in done.stderr, done.stderr
        assert sandboxing.kept_out_now() == ()
    finally:
        shutil.rmtree(klass, ignore_errors=True)


def test_the_toolkit_is_found_by_its_real_folder_through_a_wrapper(tmp_path):
    from grader.host import toolchain

    nvcc = toolchain.find("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc here")
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {nvcc.resolve()} "$@"\n')
    wrapper.chmod(0o755)
    root = toolchain.toolkit_root(wrapper)
    assert root != tmp_path and (root / "bin" / "nvcc").is_file() and root == root.resolve(), root
