"""Where the grader's own files live: the labs it grades with, the build cache.

Labs are found, in this order: ``--labs DIR``, ``$GRADER_LABS_DIR``, the course repository the
grader runs from (a source checkout: ``pyproject.toml`` beside ``labs/``), and the student bundle
of a repository, ``<repo>/.cuda-grader/labs``: the repository being graded, else the current
folder or the nearest parent that has one. What the run says of them (``--labs``, the repository
graded, ``--own-labs``) is its context's ``LabsSearch`` (:mod:`grader.context`). A course
checkout comes before a repository's bundle, so a TA's grader never grades with a lab file a
student could edit.

The first three are the course's labs. A repository's own bundle is a student's mode: its lab
files are the student's, so a grading with it is feedback, said on every score line and in every
report's identity (``origin``), and a class run refuses it (``course_labs``). Its ``problem.py``
(each lab's generator and oracle) is Python, imported unsandboxed by the grader (the cases'
inputs and answers) and by the trusted worker (which refills the student's buffers with fresh
inputs, on the GPU, between timed calls: too close to the timing to ask a sandboxed process). So
it runs only where the user says the bundle is theirs (``--own-labs``, ``LabsSearch.own``), as a
student grading their own repository does; a TA who forgot ``--labs`` gets an input error before
anything runs (``refuse_unclaimed``), and every import is refused as well (``problem_to_import``).
A process the grader starts to grade (a class's lane) does not look again: it is handed the
location its parent found (``LabsSearch.pinned``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..context import CHECKOUT, ENV, OPTION, REPOSITORY_BUNDLE, LabsLocation, Origin, current
from ..errors import GraderError

#: The folder that holds the ``grader`` package: what a trusted grader process imports from.
PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent
#: The project checkout, when the grader runs from one (labs/, reference/, student_template/).
PROJECT_ROOT = PACKAGE_PARENT
#: A student repository's bundle of labs (written by `cuda-grader release`), relative to its root.
BUNDLE_DIR = ".cuda-grader"
BUNDLE_LABS = f"{BUNDLE_DIR}/labs"

#: Where the course's own labs come from: any grading meant to count takes its labs from one of these.
COURSE_ORIGINS: tuple[Origin, ...] = (OPTION, ENV, CHECKOUT)


def unclaimed_bundle() -> Path | None:
    """The labs folder found, where it is a repository's own bundle and the user has not said it is
    theirs (``--own-labs``); None otherwise."""
    if current().labs.own:
        return None
    found = locate_labs()
    return found.path if found.from_repository else None


def refuse_unclaimed(command: str) -> None:
    """Before ``command`` grades anything: an input error where the labs found are a repository's own
    bundle that the user has not claimed (its ``problem.py`` would run as them)."""
    bundle = unclaimed_bundle()
    if bundle is not None:
        raise GraderError(unclaimed_message(command, bundle))


def problem_to_import(path: Path) -> Path:
    """``path``, a lab's ``problem.py``, once a process of the grader's own (itself, the trusted
    worker) may import it: an input error where it lies in a repository's bundle not claimed."""
    bundle = unclaimed_bundle()
    if bundle is not None and path.resolve().is_relative_to(bundle.resolve()):
        raise GraderError(unclaimed_message("the grader", bundle), path=path)
    return path


def unclaimed_message(what: str, bundle: Path) -> str:
    return (f"{what} will not run the Python of {shown(bundle)}, a repository's own bundle of labs (files a student "
            "can edit): each lab's problem.py there would run as you, outside the sandbox. Pass --labs DIR to grade "
            "with the course's labs (its labs folder, or a course bundle's labs/ from `cuda-grader release --course`), "
            "or --own-labs if this repository is yours (its problem.py then runs as you; the grade is feedback only)")


def has_labs(folder: Path) -> bool:
    try:
        return folder.is_dir() and any((p / "lab.yaml").is_file() for p in folder.iterdir())
    except OSError:
        return False


def locate_labs() -> LabsLocation:
    """Where the labs are, and every place that was looked at (as this run's ``LabsSearch`` says)."""
    search = current().labs
    if search.pinned is not None:
        return search.pinned
    chosen, repo = search.chosen, search.repo
    if chosen is not None:
        return LabsLocation(chosen, (f"{chosen} (--labs)",), OPTION)
    env = os.environ.get("GRADER_LABS_DIR")
    if env:
        return LabsLocation(Path(env), (f"{env} ($GRADER_LABS_DIR)",), ENV)
    looked = ["--labs (not given)", "$GRADER_LABS_DIR (not set)"]
    checkout = PROJECT_ROOT / "labs"
    if (PROJECT_ROOT / "pyproject.toml").is_file() and has_labs(checkout):
        return LabsLocation(checkout, (*looked, str(checkout)), CHECKOUT)
    looked.append(f"{checkout} (the grader is not run from a course repository)")
    starts = [] if repo is None else [repo, *repo.resolve().parents]
    cwd = Path.cwd()
    starts += [cwd, *cwd.parents]
    for start in starts:
        bundle = start / BUNDLE_LABS
        if has_labs(bundle):
            return LabsLocation(bundle, (*looked, str(bundle)), REPOSITORY_BUNDLE)
    where = [f"{repo / BUNDLE_LABS} and in its parent folders"] if repo is not None else []
    where.append(f"{cwd / BUNDLE_LABS} and in its parent folders")
    return LabsLocation(None, (*looked, *where))


def labs_dir() -> Path:
    """The folder of the labs; a clear input error (naming every place looked at) when there is none."""
    return _found()[0]


def _found() -> tuple[Path, LabsLocation]:
    """The labs folder and how it was found; an input error where there is none, or no folder there."""
    found = locate_labs()
    if found.path is None:
        raise GraderError(no_labs_message(found))
    if not found.path.is_dir():
        raise GraderError(f"not a folder of labs ({found.how})", path=found.path)
    return found.path, found


def course_labs(what: str) -> LabsLocation:
    """The course's labs, for ``what`` (a grading meant to count): an input error when the only
    labs found are a repository's own bundle, or none."""
    folder, found = _found()
    if found.origin not in COURSE_ORIGINS:
        raise GraderError(f"{what} grades with the course's labs, never a repository's own: the labs found are "
                          f"{shown(folder)} ({found.how}, files a student can edit); pass --labs DIR, the "
                          "course's labs folder (or a course bundle's labs/, from `cuda-grader release --course`)")
    return found


def no_labs_message(found: LabsLocation) -> str:
    return ("no labs found; looked in: " + "; ".join(found.looked) + ". Grade inside a repository made by "
            f"`cuda-grader release` (its labs are in {BUNDLE_LABS}), or give --labs DIR")


def labs_dir_if_any() -> Path | None:
    """The labs folder if there is one (for keeping it out of sandboxes); never raises."""
    try:
        return locate_labs().path
    except OSError:
        return None


def shown(path: Path, root: Path | None = None) -> str:
    """``path`` as the user knows it: relative to ``root`` (default: the current folder) when inside it."""
    try:
        return str(path.resolve().relative_to((root or Path.cwd()).resolve()))
    except ValueError:
        return str(path)
