"""The grader's folders in the user's cache (below every other module: errors and paths use them)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

__all__ = ["default_cache_dir", "user_cache_dir"]


def user_cache_dir() -> Path:
    """The grader's folder in the user's cache: on Linux ``$XDG_CACHE_HOME/cuda-lab-grader``, by
    default ``~/.cache/cuda-lab-grader``."""
    return platformdirs.user_cache_path("cuda-lab-grader", appauthor=False)


def default_cache_dir() -> Path:
    """The build cache: ``GRADER_CACHE_DIR``, else :func:`user_cache_dir`."""
    env = os.environ.get("GRADER_CACHE_DIR")
    return Path(env) if env else user_cache_dir()
