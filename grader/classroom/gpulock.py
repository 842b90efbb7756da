"""One GPU, one grading at a time, and one profiler at a time per GPU.

Each GPU gets a folder in the system's temporary folder, named after its UUID, shared by every
grader process on the machine (``flock.gpu_folder``). A lane holds the folder's
``grader-gpu.lock`` while it grades a student, so a timing never overlaps another grading on that
GPU (two class runs, two shards on one node). The profiling lock of the counter checks
(``grader-ncu.lock``) is in the same folder, so profilers on different GPUs run side by side.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from ..flock import gpu_folder, wait_exclusive

__all__ = ["LOCK_NAME", "gpu_folder", "gpu_lock"]

LOCK_NAME = "grader-gpu.lock"


@contextlib.contextmanager
def gpu_lock(folder: Path, poll_s: float = 0.2) -> Iterator[float]:
    """Hold the GPU's lock (waiting as long as it takes); yields the seconds waited."""
    path = folder / LOCK_NAME
    flags = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o666)
    except PermissionError:  # another user's lock file: a read-only descriptor locks as well
        fd = os.open(path, os.O_RDONLY | flags)
    try:
        yield wait_exclusive(fd, poll_s)
    finally:
        os.close(fd)
