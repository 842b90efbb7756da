"""Stopping a class run: Ctrl-C, SIGTERM (a scheduler ending the job) or SIGHUP (the terminal
closed). Once a stop is asked for, no student being graded is published: whatever the stop did
to their grading (a pool shut down under it, a worker killed) never becomes a result, and a
resumed run grades them again. Students published before the stop are whole, as always."""

from __future__ import annotations

import signal
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


def install() -> None:
    """Make each stopping signal set the stop, then interrupt the main thread (this process's)."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _stop)
