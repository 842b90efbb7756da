"""Stopping a class run: Ctrl-C, SIGTERM (a scheduler ending the job) or SIGHUP (the terminal
closed). Once a stop is asked for, no student being graded is published: whatever the stop did
to their grading (a pool shut down under it, a worker killed) never becomes a result, and a
resumed run grades them again. Students published before the stop are whole, as always."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import Callable

import psutil

from ..errors import internal_error_log, threads_logged
from ..host.procgroup import GONE, below, kill_all

_STOP = threading.Event()
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: How long a stopped process has to end (its lanes are killed 3 s after the stop) before it ends itself.
END_GRACE_S = 15.0
_ENDING: list[float] = []  # (armed once)


class Stopped(Exception):
    """Raised where a student's results would have been published after a stop."""


def requested() -> bool:
    return _STOP.is_set()


def _stopper(quiet: bool, grace_s: float, idle: Callable[[], bool] | None) -> Callable[[int, FrameType | None], None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        if not _STOP.is_set():
            if quiet:
                sys.stderr = open(os.devnull, "w")  # (the process ends with it open)
            end_within(130, grace_s)  # whatever the stop then waits for
        _STOP.set()
        if idle is not None and idle():
            end_now(130)
        raise KeyboardInterrupt

    return stop


def install(quiet: bool = False, grace_s: float = END_GRACE_S, idle: Callable[[], bool] | None = None) -> None:
    """Make each stopping signal set the stop, then interrupt the main thread (this process's);
    ``grace_s`` after the first, the process ends itself if it is still here (:func:`end_within`).
    ``quiet`` (a class's lane process): once stopped, the process prints nothing more (not the
    traceback of each signal that reached it); the class's own process says that the run was
    stopped. ``idle`` (a lane's process, see :func:`end_now`): whether it is between calls; a
    stop that finds it so ends it at once."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, _stopper(quiet, grace_s, idle))


def end_now(code: int) -> None:
    """End this process with ``code``: its exit's clean-ups first (the folders and trusted workers
    it made), then the processes still below it. A lane's process, stopped, ends so once its call
    has unwound, or at once between calls: the pool's worker loop takes an interrupt for its
    call's failure, sends that back and waits for the next call, and one that reaches it while it
    sends a result back is lost in that loop. (A clean-up that hangs meets :func:`end_within`.)"""
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    with contextlib.suppress(Exception):
        kill_all(below(psutil.Process()))
    os._exit(code)


def end_within(code: int, seconds: float = END_GRACE_S) -> None:
    """Once a command is stopped: should the process still be here ``seconds`` later (a thread, a
    pool or a child that its stop or its exit waits for is stuck), record where its threads are
    and which processes are below it, end those processes and end with ``code``, saying so in one
    line. A stopped run must end; what kept it is in the log. Armed once per process."""
    if _ENDING:  # (both calls run in the main thread, a signal's handler among them)
        return
    _ENDING.append(seconds)

    def overdue() -> None:
        log, said = internal_error_log(), "it could not be logged"
        doomed: list[psutil.Process] = []
        children = []
        try:
            doomed = below(psutil.Process())  # (listed once, before any dies: orphans leave the tree)
            for proc in doomed:
                with contextlib.suppress(*GONE):
                    children.append(f"process {proc.pid} {proc.name()} ({proc.status()}): {' '.join(proc.cmdline())[:200]}")
            short = threads_logged(f"not ended {seconds:.0f} s after the stop", log, "\n".join(children))
            said = f"what it waited for is under {short} in {log}"
        except Exception:  # (the log is only for the diagnosis: the process ends regardless)
            pass
        finally:
            with contextlib.suppress(Exception):
                kill_all(doomed)
                print(f"the grader had not ended {seconds:.0f} s after the stop: ended it and the {len(children)} "
                      f"processes below it ({said})", file=sys.stderr, flush=True)
            os._exit(code)

    timer = threading.Timer(seconds, overdue)
    timer.daemon = True  # (a process that ends in time is not held by it)
    timer.start()
