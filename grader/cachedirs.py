"""The grader's folders in the user's cache (below every other module: errors and paths use them)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir", "user_cache_dir"]


def user_cache_dir() -> Path:
    """The grader's folder in the user's cache: ``$XDG_CACHE_HOME/cuda-lab-grader``, by default
    ``~/.cache/cuda-lab-grader``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cuda-lab-grader"


def default_cache_dir() -> Path:
    """The build cache: ``GRADER_CACHE_DIR``, else :func:`user_cache_dir`."""
    env = os.environ.get("GRADER_CACHE_DIR")
    return Path(env) if env else user_cache_dir()
