"""Waiting for an exclusive ``flock`` on an open file (the build locks in the private build cache;
the locks between graders on a GPU are :mod:`grader.host.hostlock`'s)."""

from __future__ import annotations

import fcntl
import math
import time


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
