"""Where labs come from, and what leaves the course: the student repository `release` writes (and
student_template/ is), the course bundle, and grading from each without a GPU."""

from __future__ import annotations

import dataclasses
import filecmp
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from grader.cli import main
from grader.context import LabsSearch, current, enter
from grader.course.release import release
from grader.engine.grade import grade
from grader.engine.plan import COURSE_RUNNER, course_only_ids, runnable
from grader.errors import GraderError, SpecError
from grader.isolation.options import GradeOptions
from grader.labspec import paths
from grader.labspec.labs import find_lab, lab_ids
from grader.labspec.specload import load_lab
from grader.outcome import Outcome
from grader.report import text

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "student_template"
NO_GPU = GradeOptions(gpu=False)


@pytest.fixture(autouse=True)
def _no_lab_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADER_LABS_DIR", raising=False)
    monkeypatch.setenv("GRADER_LOG", str(tmp_path / "internal-errors.log"))


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("released") / "repo"
    release(ROOT / "labs", out)
    return out


@pytest.fixture(scope="module")
def course_bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("course") / "bundle"
    release(ROOT / "labs", out, course=True)
    return out


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# ------------------------------------------------------------------ where labs are found


def test_no_labs_found_is_an_input_error_that_says_where_it_looked(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(paths, "PROJECT_ROOT", tmp_path / "site-packages")
    monkeypatch.chdir(tmp_path)
    for args in (["labs"], ["grade-repo", "."], ["validate"], ["release", "--out", str(tmp_path / "out")]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error: no labs found; looked in: --labs (not given); $GRADER_LABS_DIR (not set); "), err
        assert f"{tmp_path}/site-packages/labs (the grader is not run from a course repository)" in err
        assert f"{tmp_path}/.cuda-grader/labs and in its parent folders" in err
    assert not (tmp_path / "out").exists()


def test_labs_are_found_in_order(monkeypatch, tmp_path, released):
    monkeypatch.setattr(paths, "PROJECT_ROOT", tmp_path / "not-a-checkout")
    monkeypatch.chdir(released / "labs" / "histogram")  # inside a student repository
    assert paths.labs_dir() == released / ".cuda-grader" / "labs"
    assert paths.locate_labs().how == "the repository's student bundle"
    enter(replace(current(), labs=LabsSearch(repo=TEMPLATE)))  # the repository graded comes before the current folder
    assert paths.labs_dir() == TEMPLATE / ".cuda-grader" / "labs"
    monkeypatch.setattr(paths, "PROJECT_ROOT", ROOT)  # a course checkout comes before any repository's bundle
    assert paths.labs_dir() == ROOT / "labs" and paths.locate_labs().how == "the course repository"
    monkeypatch.setenv("GRADER_LABS_DIR", str(released / ".cuda-grader" / "labs"))
    assert paths.labs_dir() == released / ".cuda-grader" / "labs"
    enter(replace(current(), labs=LabsSearch(chosen=tmp_path / "nowhere")))  # --labs beats everything, and must exist
    with pytest.raises(GraderError, match=r"nowhere: not a folder of labs \(--labs\)"):
        paths.labs_dir()
    enter(replace(current(), labs=LabsSearch(chosen=tmp_path)))
    with pytest.raises(GraderError, match="no labs found: no folder here has a lab.yaml"):
        lab_ids()


def test_labs_option_works_before_and_after_the_command(tmp_path, capsys, released):
    bundle = str(released / ".cuda-grader" / "labs")
    for args in (["--labs", bundle, "labs"], ["labs", "--labs", bundle]):
        assert main(args) == 0
        out, err = capsys.readouterr()
        assert "tiled_matmul       Tiled matrix multiplication (24 points) [student bundle]" in out
        assert "(--labs)" in err
    assert main(["--labs", str(tmp_path / "none"), "labs"]) == 2
    assert "none: not a folder of labs (--labs)" in capsys.readouterr().err


# ------------------------------------------------------------------ what release writes


def test_student_template_is_what_release_writes(released):
    assert _tree(released) == _tree(TEMPLATE), "run `cuda-grader release --out student_template`"
    _, mismatch, errors = filecmp.cmpfiles(released, TEMPLATE, _tree(TEMPLATE), shallow=False)
    assert not mismatch and not errors, f"stale in student_template/: {mismatch + errors}; run `cuda-grader release --out student_template`"


def test_the_student_repository_has_no_reference_and_no_known_solution(released):
    files = _tree(released)
    assert ".cuda-grader/labs/tiled_matmul/baselines/naive.cu" in files  # the lectures' naive kernel
    assert not [f for f in files if "reference" in f or "solutions" in f or "expected.yaml" in f]
    texts = {f: (released / f).read_bytes() for f in files}
    for lab_id in lab_ids():
        spec = find_lab(lab_id)
        assert spec.files.reference is not None
        assert spec.files.reference.read_bytes() not in texts.values()
        for sol in (spec.root / "solutions").rglob("*.cu"):
            assert sol.read_bytes() not in texts.values(), sol


def test_release_refuses_to_ship_a_course_file(tmp_path):
    """Its own last check: a baseline that is a copy of the reference stops the release."""
    for part in ("labs/tiled_matmul", "reference/tiled_matmul", "student_template/labs/tiled_matmul", "ci/github"):
        shutil.copytree(ROOT / part, tmp_path / "course" / part)
    for name in ("README.template.md", "REPO_README.template.md"):
        shutil.copy(ROOT / "labs" / name, tmp_path / "course" / "labs" / name)
    naive = tmp_path / "course" / "reference" / "tiled_matmul" / "naive.cu"
    naive.write_bytes((naive.parent / "reference.cu").read_bytes())
    with pytest.raises(GraderError, match=r"baselines/naive.cu is a copy of .*reference.cu, which students must not get"):
        release(tmp_path / "course" / "labs", tmp_path / "out")


def test_release_writes_only_into_a_new_folder_or_an_earlier_release(tmp_path, released):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(GraderError, match=r"mine: --out: not empty and not an earlier release \(no .cuda-grader/bundle.yaml\)"):
        release(ROOT / "labs", tmp_path / "mine")
    with pytest.raises(GraderError, match="would overwrite the course's own labs"):
        release(ROOT / "labs", ROOT, course=True)
    with pytest.raises(GraderError, match="is a student bundle .*: release from the course repository"):
        release(released / ".cuda-grader" / "labs", tmp_path / "again")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_the_course_bundle_has_the_references_and_no_known_solution(course_bundle):
    files = _tree(course_bundle)
    assert "labs/tiled_matmul/reference.cu" in files and "labs/tiled_matmul/baselines/naive.cu" in files
    assert not [f for f in files if "solutions" in f]
    assert (course_bundle / "bundle.yaml").read_text().splitlines()[1] == "kind: course"


# ------------------------------------------------------------------ the bundled specs


@pytest.mark.parametrize("lab_id", ["boundary_checks", "corner_turning", "histogram", "memory_types", "tiled_matmul"])
def test_a_bundled_lab_is_the_course_lab_with_other_files(lab_id, released, course_bundle):
    course = find_lab(lab_id)
    student = load_lab(released / ".cuda-grader" / "labs" / lab_id)
    assert not student.has_course_files and student.files.reference is None
    assert dataclasses.replace(course, files=student.files, root=student.root, source=student.source) == student
    assert student.files.stub.read_bytes() == course.files.stub.read_bytes()
    assert set(student.files.baselines) <= set(course.files.baselines)
    bundled = load_lab(course_bundle / "labs" / lab_id)
    assert bundled.has_course_files and bundled.files.reference is not None
    assert bundled.files.reference.read_bytes() == course.files.reference.read_bytes()
    assert dataclasses.replace(course, files=bundled.files, root=bundled.root, source=bundled.source) == bundled


def test_every_check_on_the_reference_is_marked_course_only():
    for lab_id in lab_ids():
        spec = find_lab(lab_id)
        assert course_only_ids(spec) == [c.id for c in spec.benchmark.checks if c.baseline == "reference"] + [
            c.id for c in spec.counters if c.kind == "reduction" and c.baseline == "reference"]


def test_a_check_scored_on_the_reference_must_be_marked(tmp_path):
    for part in ("labs/tiled_matmul", "reference/tiled_matmul", "student_template/labs/tiled_matmul"):
        shutil.copytree(ROOT / part, tmp_path / part)
    path = tmp_path / "labs" / "tiled_matmul" / "lab.yaml"
    path.write_text(path.read_text().replace("      course_only: true\n", "", 1))
    with pytest.raises(SpecError, match=r"lab.yaml: benchmark.checks\[1\].baseline: 'reference' is the reference "
                                        r"solution, which students never get: mark the check `course_only: true`"):
        load_lab(path)


def test_a_student_bundle_needs_the_baselines_of_the_checks_it_grades(tmp_path, released):
    lab = tmp_path / "tiled_matmul"
    shutil.copytree(released / ".cuda-grader" / "labs" / "tiled_matmul", lab)
    yaml_path = lab / "lab.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("  baselines:\n    naive: baselines/naive.cu\n", ""))
    with pytest.raises(SpecError, match=r"benchmark.checks\[0\].baseline: unknown baseline 'naive' \(known: \)"):
        load_lab(yaml_path)


def test_an_at_most_comparison_with_the_reference_runs_without_it_in_a_student_bundle(released):
    course = find_lab("corner_turning")
    student = load_lab(released / ".cuda-grader" / "labs" / "corner_turning")
    conflicts = next(c for c in student.counters if c.id == "shared_bank_conflicts")
    assert conflicts.kind == "at_most" and conflicts.baseline == "reference" and not conflicts.course_only
    graded = {c.id: c for c in runnable(student).counters}
    assert graded["shared_bank_conflicts"].baseline == "" and graded["coalesced_loads"].baseline == "naive"
    assert runnable(course) is course
    assert [c.id for c in runnable(student).benchmark.checks] == ["speedup_vs_naive"]


# ------------------------------------------------------------------ grading from each bundle


def test_grading_from_the_student_bundle_skips_the_course_only_checks(released):
    course = find_lab("tiled_matmul")
    student = load_lab(released / ".cuda-grader" / "labs" / "tiled_matmul")
    reference = course.files.reference
    assert reference is not None
    ours, theirs = grade(student, reference, NO_GPU), grade(course, reference, NO_GPU)
    assert [c.id for c in ours.checks] == [c.id for c in theirs.checks]
    assert ours.max_score == theirs.max_score == 24
    for mine, course_check in zip(ours.checks, theirs.checks):
        if mine.id == "speed_vs_reference":
            assert mine.outcome is Outcome.SKIPPED and mine.message.startswith(COURSE_RUNNER)
            assert mine.measured == {"course_only": True}
        else:
            assert (mine.outcome, mine.points, mine.message) == (course_check.outcome, course_check.points, course_check.message)
    assert ours.course_only_points == 2 and theirs.course_only_points == 0
    assert text.score_line(ours) == "score 2/24 (22 points not checked here, 2 of them graded on the course's runner)"
    assert text.score_line(theirs) == "score 2/24 (22 points not checked here)"


def test_a_missing_file_in_a_student_bundle_still_lists_the_course_only_checks(tmp_path, released):
    from grader.engine.repo import grade_repo

    (tmp_path / "labs").mkdir()  # a student repository, without the lab's file
    (report,) = grade_repo(tmp_path, NO_GPU, labs=[str(released / ".cuda-grader" / "labs" / "histogram")])
    by_id = {c.id: c for c in report.checks}
    assert by_id["compile"].outcome is Outcome.ERROR
    assert by_id["speed_vs_reference"].outcome is Outcome.SKIPPED and by_id["coalesced_loads"].outcome is Outcome.FAIL
    assert [c.id for c in report.checks][-4:] == ["speed_vs_global_atomics", "speed_vs_reference", "coalesced_loads",
                                                  "privatized_atomics"]


def test_the_course_bundle_grades_the_template_as_the_course_repository_does(tmp_path, course_bundle, capsys):
    """What the runner does (--labs on the course bundle) against the course repository itself."""
    runs = {}
    for name, extra in (("repository", []), ("bundle", ["--labs", str(course_bundle / "labs")])):
        out = tmp_path / f"{name}.json"
        assert main([*extra, "grade-repo", str(TEMPLATE), "--no-gpu", "--json", str(out), "-q"]) == 0
        runs[name] = json.loads(out.read_text())
    capsys.readouterr()
    strip = [[(c["id"], c["outcome"], c["points"], c["max_points"]) for c in lab["checks"]] for lab in runs["repository"]["labs"]]
    assert strip == [[(c["id"], c["outcome"], c["points"], c["max_points"]) for c in lab["checks"]]
                     for lab in runs["bundle"]["labs"]]
    assert runs["bundle"]["max_score"] == runs["repository"]["max_score"] == sum(find_lab(i).max_points for i in lab_ids())


def test_a_student_bundle_cannot_grade_its_reference_or_validate(capsys, released):
    labs = str(released / ".cuda-grader" / "labs")
    assert main(["--labs", labs, "grade", "tiled_matmul", "--no-gpu"]) == 2
    assert "a student bundle has no reference solution to grade: give your file, e.g. `cuda-grader grade " \
           "tiled_matmul labs/tiled_matmul/student.cu`" in capsys.readouterr().err
    assert main(["--labs", labs, "validate", "tiled_matmul", "--no-gpu"]) == 2
    assert "this lab is a student bundle, without its reference and known solutions" in capsys.readouterr().err
    assert main(["--labs", labs, "readme", "--check"]) == 2
    assert "this lab is a student bundle: its README is written from the course repository" in capsys.readouterr().err


# ------------------------------------------------------------------ on a GPU: the runner's results are the course's


def _checks(doc: dict) -> dict[tuple[str, str], dict]:
    return {(lab["lab"], c["id"]): c for lab in doc["labs"] for c in lab["checks"]}


@pytest.mark.gpu
@pytest.mark.slow
def test_on_a_gpu_the_course_bundle_grades_as_the_course_repository(monkeypatch, tmp_path, released, course_bundle, capsys):
    """The released repository, once with its stubs and once with every lab's reference solution
    handed in, graded three ways with the same secret: from the course repository, from the course
    bundle as the runner does (--labs), and from the repository's own student bundle. The course
    bundle must give the course's verdicts and points; the student bundle the same on every check
    but the course-only ones, which it skips. Speed points may move with timing noise, so for
    those only the verdict must agree (and the points within a quarter of the check's)."""
    monkeypatch.setenv("GRADER_SECRET", "same-inputs-for-every-run")
    with_references = tmp_path / "references"
    shutil.copytree(released, with_references)
    for lab_id in lab_ids():
        shutil.copy(find_lab(lab_id).files.reference, with_references / "labs" / lab_id / "student.cu")
    for repo in (released, with_references):
        runs = {}
        for name, extra in (("repository", []), ("course bundle", ["--labs", str(course_bundle / "labs")]),
                            ("student bundle", ["--labs", str(repo / ".cuda-grader" / "labs")])):
            out = tmp_path / f"{repo.name}-{name.replace(' ', '-')}.json"
            assert main([*extra, "grade-repo", str(repo), "--json", str(out), "-q"]) == 0
            runs[name] = _checks(json.loads(out.read_text()))
        capsys.readouterr()
        course = runs["repository"]
        for name in ("course bundle", "student bundle"):
            got = runs[name]
            assert got.keys() == course.keys(), name
            for key, want in course.items():
                check = got[key]
                if name == "student bundle" and key[1] in course_only_ids(find_lab(key[0])):
                    assert check["outcome"] == "skipped" and check["message"].startswith(COURSE_RUNNER), (name, key, check)
                    continue
                assert check["outcome"] == want["outcome"], (repo.name, name, key, check["message"], want["message"])
                if want["stage"] == "speed":
                    assert abs(check["points"] - want["points"]) <= want["max_points"] / 4, (repo.name, name, key)
                else:
                    assert check["points"] == want["points"], (repo.name, name, key, check["message"], want["message"])
    ran = [c for c in course.values() if c["outcome"] != "skipped"]  # counters may lack permission
    assert sum(c["points"] for c in ran) > 0.9 * sum(c["max_points"] for c in ran)  # the references scored
