"""One GPU, one grading at a time, and one profiler at a time per GPU.

Each GPU gets a folder in the system's temporary folder, named after its UUID, shared by every
grader process on the machine. A lane holds the folder's ``grader-gpu.lock`` while it grades a
student, so a timing never overlaps another grading on that GPU (two class runs, two shards on
one node). The lane also makes the folder its temporary folder: the profiling lock of the
counter checks (``grader-ncu.lock`` in the temporary folder) is then one per GPU, and profilers
on different GPUs run side by side.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from ..flock import wait_exclusive

LOCK_NAME = "grader-gpu.lock"


def gpu_folder(key: str, base: Path | None = None) -> Path:
    """The shared folder of the GPU ``key`` (a private one if another user's is not usable)."""
    root = base or Path(tempfile.gettempdir())
    shared = root / f"cuda-grader-gpu-{key}"
    try:
        shared.mkdir(mode=0o777, exist_ok=True)
        info = os.lstat(shared)
        if stat.S_ISDIR(info.st_mode):
            if info.st_uid == os.getuid():
                os.chmod(shared, 0o1777)  # sticky, like /tmp: every user's graders share it
                return shared
            if info.st_mode & 0o1777 == 0o1777:
                return shared
    except OSError:
        pass
    private = root / f"cuda-grader-gpu-{key}-{os.getuid()}"
    private.mkdir(mode=0o700, exist_ok=True)
    return private


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
