"""The labs of record come from the course, never from the repository graded.

A student controls every file of their repository, its bundle of labs (``.cuda-grader/labs``)
included: a lab.yaml there may name ``/etc/shadow`` as its header, and its ``problem.py`` is
Python the grader would import. So: every file a lab.yaml names stays inside its lab folder; a
repository's own bundle grades only in a student's mode, announced on every score line and in
every report's identity; ``grade-class`` refuses it; and a class's lane processes grade with
exactly the labs their parent resolved.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader import paths
from grader.cli import main
from grader.errors import SpecError
from grader.release import release
from grader.specload import load_lab

ROOT = Path(__file__).resolve().parent.parent
SHADOW = "/etc/shadow"


@pytest.fixture(autouse=True)
def _no_lab_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADER_LABS_DIR", raising=False)
    monkeypatch.setenv("GRADER_LOG", str(tmp_path / "internal-errors.log"))
    monkeypatch.setattr(paths, "_chosen", None)
    monkeypatch.setattr(paths, "_repo", None)


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("released") / "repo"
    release(ROOT / "labs", out)
    return out


@pytest.fixture
def repo(tmp_path, released) -> Path:
    """A student repository of one's own to make hostile."""
    dest = tmp_path / "student"
    shutil.copytree(released, dest, symlinks=True)
    return dest


def lab_yaml(repo: Path, lab: str = "tiled_matmul") -> Path:
    return repo / ".cuda-grader" / "labs" / lab / "lab.yaml"


def set_file(path: Path, key: str, value: str) -> None:
    """Point ``files.<key>`` of a bundled lab.yaml at ``value``."""
    lines = path.read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if line.startswith(f"  {key}: ")]
    assert len(hits) == 1, lines
    lines[hits[0]] = f"  {key}: {value}"
    path.write_text("\n".join(lines) + "\n")


def refused(path: Path, key: str, value: str) -> str:
    with pytest.raises(SpecError) as info:
        load_lab(path)
    message = str(info.value)
    assert str(path) in message and f"{key}: " in message and repr(value) in message, message
    return message


# ------------------------------------------------------------------ (a) every file a lab.yaml names stays inside its lab


@pytest.mark.parametrize("value", [SHADOW, "../../../../../../../../etc/shadow", "../histogram/interface.h", "./../tiled_matmul/interface.h"])
def test_a_bundled_lab_names_no_file_outside_its_folder(repo, value):
    path = lab_yaml(repo)
    set_file(path, "header", value)
    message = refused(path, "files.header", value)
    assert "absolute path" in message if value.startswith("/") else "goes up a folder ('..')" in message


def test_a_bundled_lab_names_no_file_through_a_link(repo):
    path = lab_yaml(repo)
    lab = path.parent
    (lab / "shadow.h").symlink_to(SHADOW)
    set_file(path, "header", "shadow.h")
    assert "goes through a symbolic link" in refused(path, "files.header", "shadow.h")
    (lab / "baselines").rename(lab / "real")
    (lab / "baselines").symlink_to(lab / "real")  # a link among the folders on the way
    set_file(path, "header", "interface.h")
    assert "goes through a symbolic link" in refused(path, "files.baselines.naive", "baselines/naive.cu")


def test_a_bundled_lab_yaml_is_no_link_either(repo, tmp_path):
    path = lab_yaml(repo)
    elsewhere = tmp_path / "elsewhere.yaml"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    with pytest.raises(SpecError, match="is reached through a symbolic link"):
        load_lab(path)


def test_a_lab_file_must_be_a_regular_file(repo):
    path = lab_yaml(repo)
    (path.parent / "folder.h").mkdir()
    set_file(path, "header", "folder.h")
    assert "is not a regular file" in refused(path, "files.header", "folder.h")


def test_the_course_repository_names_its_references_and_nothing_outside_it(tmp_path):
    """A course checkout's lab.yaml names ../../reference/: inside the course, so allowed; not beyond."""
    for part in ("labs/tiled_matmul", "reference/tiled_matmul", "student_template/labs/tiled_matmul"):
        shutil.copytree(ROOT / part, tmp_path / "course" / part)
    path = tmp_path / "course" / "labs" / "tiled_matmul" / "lab.yaml"
    assert load_lab(path).files.reference == tmp_path / "course" / "reference" / "tiled_matmul" / "reference.cu"
    (tmp_path / "outside.h").write_text("// not the course's\n")
    set_file(path, "header", "../../../outside.h")
    assert "is outside the course repository" in refused(path, "files.header", "../../../outside.h")
    set_file(path, "header", SHADOW)
    refused(path, "files.header", SHADOW)


def test_grading_with_a_hostile_bundle_is_an_input_error_that_shows_nothing_of_the_file(repo, monkeypatch, capsys):
    monkeypatch.setattr(paths, "PROJECT_ROOT", repo.parent / "site-packages")  # installed: no course checkout
    planted = repo / "planted.txt"  # stands in for /etc/shadow where the tests cannot read it
    planted.write_text("root:$6$secret-hash-from-the-host:19000:0:99999:7:::\n")
    set_file(lab_yaml(repo), "header", str(planted))
    monkeypatch.chdir(repo)
    assert main(["grade-repo", ".", "--no-gpu", "--lab", "tiled_matmul", "-q"]) == 2
    out, err = capsys.readouterr()
    assert "secret-hash" not in out + err
    assert f"lab.yaml: files.header: {str(planted)!r} is an absolute path" in err
    assert len(err.strip().splitlines()) == 1, err
