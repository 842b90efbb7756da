"""The grader's folders in the user's cache (below every other module: errors and paths use them)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["default_cache_dir", "user_cache_dir"]

APP = "cuda-lab-grader"


def user_cache_dir() -> Path:
    """The grader's folder in the user's cache: on Linux ``$XDG_CACHE_HOME/cuda-lab-grader``, by
    default ``~/.cache/cuda-lab-grader``."""
    if not os.path.isabs(os.environ.get("XDG_CACHE_HOME") or "/"):
        # the XDG spec says a relative one is ignored; platformdirs would take it from the working folder
        return Path.home() / ".cache" / APP
    return platformdirs.user_cache_path(APP, appauthor=False)


def default_cache_dir() -> Path:
    """The build cache: ``GRADER_CACHE_DIR``, else :func:`user_cache_dir`."""
    env = os.environ.get("GRADER_CACHE_DIR")
    return Path(env).absolute() if env else user_cache_dir()  # relative to where the grader started
