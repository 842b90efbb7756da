"""Where the grader's own files live: the project checkout, the labs, the build cache."""

from __future__ import annotations

import os
from pathlib import Path

#: The folder that holds the ``grader`` package: what a trusted grader process imports from.
PACKAGE_PARENT = Path(__file__).resolve().parent.parent
#: The project checkout (labs/, reference/, student_template/ live here).
PROJECT_ROOT = PACKAGE_PARENT


def labs_dir() -> Path:
    return Path(os.environ.get("GRADER_LABS_DIR", PROJECT_ROOT / "labs"))


def user_cache_dir() -> Path:
    """The grader's folder in the user's cache: ``$XDG_CACHE_HOME/cuda-lab-grader``, by default
    ``~/.cache/cuda-lab-grader``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cuda-lab-grader"


def default_cache_dir() -> Path:
    """The build cache: ``GRADER_CACHE_DIR``, else :func:`user_cache_dir`."""
    env = os.environ.get("GRADER_CACHE_DIR")
    return Path(env) if env else user_cache_dir()


def shown(path: Path, root: Path | None = None) -> str:
    """``path`` as the user knows it: relative to ``root`` (default: the current folder) when inside it."""
    try:
        return str(path.resolve().relative_to((root or Path.cwd()).resolve()))
    except ValueError:
        return str(path)
