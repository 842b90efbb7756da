"""What grading each student takes, and which students a run may skip.

A student's results live in ``OUT/students/<id>/``; the folder is written whole under a
temporary name and renamed into place, so a run killed mid-way leaves either the previous
results or none, never half. A student whose folder holds a report with the same content hash
(submitted files, lab files, grader, options: see ``grader.engine.identity``) is skipped on a rerun
unless ``force`` is given.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..context import LabsLocation
from ..engine.identity import Identity, file_hashes, identify
from ..engine.repo import submission_rel
from ..errors import INTERNAL_ERROR
from ..gradebook.records import STUDENTS_DIR, student_folder
from ..isolation import gitinfo
from ..isolation.options import GradeOptions
from ..labspec.spec import LabSpec
from . import checkout
from .roster import Student

PARTIAL = ".partial-"
OLD = ".old-"
#: Where the on-time commits' files go in a run's scratch folder (no student id starts with ``_``).
ONTIME = "_ontime"


@dataclass(frozen=True)
class OnTime:
    """The on-time commit of a late student whose late policy keeps the better of the two
    (``graded_commit: best``): its files and the identity of its grading (on time: no penalty)."""

    root: Path
    identity: Identity


@dataclass(frozen=True)
class StudentJob:
    """One student's grading, planned: where their files are and who they are."""

    student: Student
    labs: tuple[str, ...]
    root: Path | None  # the folder graded (the repository, or the files of the roster's commit)
    failure: str  # why nothing of theirs can be graded ("" when it can)
    identity: Identity
    folder: Path  # OUT/students/<id>
    ontime: OnTime | None = None  # graded too, the better of the two counts


def _locate(student: Student, rels: list[str], scratch: Path) -> tuple[Path | None, str | None, str]:
    """(folder to grade, commit, failure) for one student."""
    path = student.path
    where = f"{path}" + (f" (roster line {student.line})" if student.line else "")
    if student.problem:  # the collected roster says why there is nothing to grade
        return None, None, student.problem
    if path.is_symlink():
        # a link to a classmate's folder (or anywhere) is not this student's work
        return None, None, f"is a symbolic link (to {os.readlink(path)}), not the student's own folder: {where}"
    if not path.exists():
        return None, None, f"repository not found: {where}"
    if not path.is_dir():
        return None, None, f"not a folder: {where}"
    with gitinfo.StudentRepository(path) as git:
        if git.problem:
            return None, None, git.problem
        if student.commit is None:
            root, commit = path, git.resolve()
        else:
            commit = git.resolve(student.commit)
            if commit is None:
                why = "no such commit" if git.is_repository else "not a git repository"
                return None, None, f"cannot grade commit {student.commit!r} of {where}: {why}"
            root = checkout.export(path, commit, rels, scratch / student.id)  # read through ``git``, still open
    if not (root / "labs").is_dir() and not (root / "labs").is_symlink():
        # the student's reports show this: their repository, not the TA's folder it was cloned to
        what = f"commit {commit[:12]} of the repository" if student.commit and commit else "the repository"
        return None, commit, f"{what} has no labs/ folder (expected labs/<lab>/student.cu)"
    return root, commit, ""


def plan_student(student: Student, specs: list[LabSpec], options: GradeOptions, out: Path, scratch: Path,
                 where: str = "", labs: LabsLocation | None = None, outputs: Mapping[str, str] | None = None) -> StudentJob:
    rels = [submission_rel(spec.id) for spec in specs]
    try:
        root, commit, failure = _locate(student, rels, scratch)
    except OSError as exc:  # an unreadable folder: that student's problem, not the class's
        root, commit, failure = None, None, f"cannot read {student.path}: {exc.strerror or exc}"
    files = file_hashes(root, rels) if root is not None else {rel: None for rel in rels}
    identity = identify(specs, files, options, student=student.id, repository=student.path, commit=commit, where=where,
                        location=labs, outputs=outputs, late=student.late)
    # the on-time commit too where it may count (also where the late one has no labs/ folder)
    ontime, identity = _ontime(student, specs, scratch, identity) if commit is not None else (None, identity)
    return StudentJob(student, tuple(s.id for s in specs), root, failure, identity, student_folder(out, student.id), ontime)


def _ontime(student: Student, specs: list[LabSpec], scratch: Path, late: Identity) -> tuple[OnTime | None, Identity]:
    """The on-time commit to grade beside the late one, where the roster says the better of the two
    counts (``graded_commit: best``), and the late one's identity (flagged where that commit is
    not in the repository: then the late one alone is graded)."""
    info = student.late or {}
    if info.get("graded_commit") != "best":
        return None, late
    rels = [submission_rel(spec.id) for spec in specs]
    try:
        commit = gitinfo.resolve(student.path, str(info["ontime_commit"]))
        root = checkout.export(student.path, commit, rels, scratch / ONTIME / student.id) if commit else None
    except OSError:
        root = commit = None
    if root is None or commit is None:
        flag = f"the on-time commit {str(info['ontime_commit'])[:12]} is not in the repository: the late one is graded"
        return None, dataclasses.replace(late, late={**info, "flags": [*info["flags"], flag]})
    on_time = {**info, "collected_at": "", "late_days": 0, "penalty": 0.0}
    return OnTime(root, dataclasses.replace(late, commit=commit, files=file_hashes(root, rels), late=on_time)), late


def graded_hash(folder: Path) -> str | None:
    """The content hash of the settled results published in ``folder`` (None: none, unreadable, or
    holding an error of the grader's own)."""
    try:
        doc = json.loads((folder / "report.json").read_text(encoding="utf-8"))
        value = doc["identity"]["content_hash"]
        messages = [str(c.get("message", "")) for lab in doc.get("labs", []) for c in lab.get("checks", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if any(INTERNAL_ERROR in m for m in messages):
        return None
    return value if isinstance(value, str) else None


def is_done(job: StudentJob) -> bool:
    """Whether ``job``'s published results are current: graded from the same files, labs, grader
    and options, and settled (a grading that ended in the grader's own error, an interrupt among
    them, is graded again)."""
    return graded_hash(job.folder) == job.identity.content_hash


def partial_folder(folder: Path) -> Path:
    """A fresh folder to write a student's results into before :func:`publish`."""
    partial = folder.with_name(f"{PARTIAL}{folder.name}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    return partial


def publish(partial: Path, folder: Path) -> None:
    """Put ``partial`` in the place of ``folder`` (the previous results go only once the new are there)."""
    old = folder.with_name(f"{OLD}{folder.name}")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(partial, folder)
    shutil.rmtree(old, ignore_errors=True)


def recover(out: Path) -> None:
    """Tidy what a killed run left: half-written folders go; results moved aside come back."""
    base = out / STUDENTS_DIR
    if not base.is_dir():
        return
    for entry in base.iterdir():
        if entry.name.startswith(PARTIAL):
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name.startswith(OLD):
            home = entry.with_name(entry.name[len(OLD):])
            if home.exists():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                os.replace(entry, home)
