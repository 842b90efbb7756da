"""The grader as a student gets it: a wheel, installed into a fresh virtual environment with no
course file anywhere near it, grading the released student repository from its own bundle."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from grader.engine.plan import COURSE_RUNNER, course_only_ids
from grader.labspec.labs import find_lab, lab_ids
from grader.labspec.spec import LabSpec

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.wheel


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def course_secrets(specs: list[LabSpec]) -> tuple[dict[bytes, str], set[str]]:
    """Contents of every reference solution and known solution, and the lines only a reference has
    (not in the stub, the header or any baseline a student may get)."""
    whole: dict[bytes, str] = {}
    reference_lines: set[str] = set()
    for spec in specs:
        assert spec.files.reference is not None
        shared = "\n".join(p.read_text() for p in (spec.files.stub, spec.files.header, *spec.files.baselines.values()))
        whole[spec.files.reference.read_bytes().strip()] = str(spec.files.reference)
        reference_lines |= {line.strip() for line in spec.files.reference.read_text().splitlines()
                            if len(line.strip()) >= 25 and line.strip() not in shared}
        for path in (spec.root / "solutions").rglob("*"):
            if path.is_file():
                whole[path.read_bytes().strip()] = str(path)
    return whole, reference_lines


def assert_no_course_file(tree: Path, specs: list[LabSpec]) -> None:
    whole, reference_lines = course_secrets(specs)
    assert reference_lines, "no reference-only line to look for"
    files = [p for p in tree.rglob("*") if p.is_file()]
    assert files
    for path in files:
        rel = path.relative_to(tree)
        assert not {"reference", "solutions"} & set(rel.parts), rel
        assert path.name != "reference.cu", rel
        data = path.read_bytes()
        assert data.strip() not in whole, f"{rel} is {whole.get(data.strip())}"
        text = data.decode("utf-8", errors="replace")
        leaked = [line for line in reference_lines if line in text]
        assert not leaked, f"{rel} holds reference code: {leaked[:3]}"


@pytest.fixture(scope="module")
def fresh(installed_wheel) -> tuple[Path, dict[str, str], Path]:
    """The wheel installed into a fresh virtual environment, built once per session (conftest's
    ``installed_wheel``): its ``cuda-grader``, the environment to run it in, and its folder."""
    return installed_wheel


def test_without_a_bundle_the_installed_grader_finds_no_labs(fresh):
    grader, env, tmp = fresh
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    for args in (["labs"], ["grade-repo", "."], ["grade", "tiled_matmul", "x.cu"]):
        proc = run([str(grader), *args], empty, env)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        err = proc.stderr
        assert "error: no labs found; looked in:" in err
        assert "$GRADER_LABS_DIR (not set)" in err and "(the grader is not run from a course repository)" in err
        assert f"{empty}/.cuda-grader/labs and in its parent folders" in err
        assert proc.stdout == ""


def test_release_and_grade_the_student_template_from_its_bundle(fresh):
    grader, env, tmp = fresh
    specs = [find_lab(lab_id) for lab_id in lab_ids()]
    repo = tmp / "repo"
    proc = run([str(grader), "--labs", str(ROOT / "labs"), "release", "--out", str(repo)], tmp, env)
    assert proc.returncode == 0, proc.stderr
    assert (repo / ".cuda-grader" / "labs" / "tiled_matmul" / "lab.yaml").is_file()
    assert (repo / ".github" / "workflows" / "grade.yml").is_file()
    assert_no_course_file(repo, specs)

    proc = run([str(grader), "grade-repo", ".", "--own-labs", "--no-gpu", "--out", "report"], repo, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "labs: .cuda-grader/labs (the repository's student bundle" in proc.stderr
    doc = json.loads((repo / "report" / "report.json").read_text())
    assert [lab["lab"] for lab in doc["labs"]] == [s.id for s in specs]
    held = 0.0
    for spec, lab in zip(specs, doc["labs"]):
        checks = {c["id"]: c for c in lab["checks"]}
        course_only = set(course_only_ids(spec))
        assert course_only, f"{spec.id} has no course-only check"
        gated = {s.id for s in spec.static if s.after_correctness}
        assert checks["compile"]["outcome"] == "pass", checks["compile"]
        for static in spec.static:  # what needs no GPU and no course file ran
            want = {"skipped"} if static.id in gated else {"pass", "fail"}
            assert checks[static.id]["outcome"] in want, checks[static.id]
        for cid, check in checks.items():
            if cid in course_only:
                assert check["outcome"] == "skipped" and check["message"].startswith(COURSE_RUNNER), check
                held += check["max_points"]
            elif check["stage"] not in ("compile", "static"):
                assert check["outcome"] == "skipped" and check["message"].startswith("needs a GPU"), check
        assert lab["max_score"] == spec.max_points  # the course's checks all count
    assert f", {held:g} of them graded on the course's runner)" in proc.stdout.splitlines()[-1]

    # one lab, from inside the repository: the bundle is found in a parent folder
    lab_dir = repo / "labs" / "tiled_matmul"
    proc = run([str(grader), "grade", "tiled_matmul", "student.cu", "--own-labs", "--no-gpu", "-q"], lab_dir, env)
    assert proc.returncode == 0, proc.stderr
    assert "score 0/24 (22 points not checked here, 2 of them graded on the course's runner)" in proc.stdout
    proc = run([str(grader), "grade", "tiled_matmul", "--own-labs", "--no-gpu"], lab_dir, env)
    assert proc.returncode == 2 and "a student bundle has no reference solution to grade" in proc.stderr
