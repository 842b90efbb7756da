"""Stopping a class run: Ctrl-C, SIGTERM (a scheduler ending the job) or SIGHUP (the terminal
closed). Once a stop is asked for, no student being graded is published: whatever the stop did
to their grading (a pool shut down under it, a worker killed) never becomes a result, and a
resumed run grades them again. Students published before the stop are whole, as always."""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

_STOP = threading.Event()
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """Raised where a student's results would have been published after a stop."""


def requested() -> bool:
    return _STOP.is_set()


def _stop(signum: int, frame: FrameType | None) -> None:
    _STOP.set()
    raise KeyboardInterrupt


def _stop_quietly(signum: int, frame: FrameType | None) -> None:
    if not _STOP.is_set():
        sys.stderr = open(os.devnull, "w")  # (the process ends with it open)
    _stop(signum, frame)


def install(quiet: bool = False) -> None:
    """Make each stopping signal set the stop, then interrupt the main thread (this process's).
    ``quiet`` (a class's lane process): once stopped, the process prints nothing more. The
    interrupt ends it through its pool's machinery, which would print the traceback of each
    signal that reached it; the class's own process says that the run was stopped."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _stop_quietly if quiet else _stop)
