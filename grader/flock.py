"""Waiting for an exclusive ``flock`` on an open file (the profiler's lock and the GPU's lock),
and the folder each GPU's locks live in."""

from __future__ import annotations

import fcntl
import math
import os
import stat
import tempfile
import time
from pathlib import Path


def wait_exclusive(fd: int, poll_s: float, time_limit_s: float = math.inf, what: object = "lock") -> float:
    """Take an exclusive lock on ``fd``, polling; the seconds waited. TimeoutError(what) past the limit."""
    started = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return time.monotonic() - started
        except BlockingIOError:
            if time.monotonic() - started >= time_limit_s:
                raise TimeoutError(what) from None
            time.sleep(poll_s)


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
