"""Errors meant for users, and the short ids that stand in for internal ones."""

from __future__ import annotations

import os
import stat
import sys
import threading
import traceback
import uuid
from pathlib import Path

from .cachedirs import user_cache_dir


class GraderError(Exception):
    """A problem with the user's input: the message names the file and what is wrong.

    These are shown as they are, without a traceback.
    """

    def __init__(self, message: str, *, path: Path | str | None = None, key: str | None = None):
        self.path = str(path) if path is not None else None
        self.key = key
        where = ""
        if self.path:
            where = f"{self.path}: "
        if key:
            where += f"{key}: "
        super().__init__(f"{where}{message}")


class SpecError(GraderError):
    """A lab file (lab.yaml, expected verdicts) is malformed."""


def internal_error_id(exc: BaseException, log_path: Path | None = None) -> str:
    """Record an unexpected exception with its full trace and return a short id for users."""
    return _logged("internal error", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), log_path)


def threads_logged(what: str, log_path: Path, also: str = "") -> str:
    """Record where each of this process's threads is (``what``: why; ``also``: more to say), under
    a short id returned."""
    names = {t.ident: t.name for t in threading.enumerate()}
    stacks = [f"thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame))
              for ident, frame in sys._current_frames().items()]
    return _logged(what, "\n".join([*stacks, also]), log_path)


def _logged(kind: str, text: str, log_path: Path | None) -> str:
    """Append ``text`` to the log under a new short id (returned)."""
    short = uuid.uuid4().hex[:8]
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # never through a link, nor into a file of another user's (the cache folder may be shared)
        try:
            fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
        except OSError:  # a link or a FIFO in its place: the id is still shown
            return short
        with open(fd, "a", encoding="utf-8") as fh:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_nlink == 1:
                fh.write(f"--- {kind} {short}\n{text}")
    return short


#: How every message of a grader's own failure starts (a result that holds one is never kept as current).
INTERNAL_ERROR = "internal grader error"


def internal_error_message(exc: BaseException) -> str:
    """Log an unexpected exception and return what a report shows in its place."""
    log = internal_error_log()
    return f"{INTERNAL_ERROR} {internal_error_id(exc, log)} ({type(exc).__name__}: {exc}); the trace is in {log}"


def internal_error_log() -> Path:
    """Where internal errors' traces go: ``GRADER_LOG``, else the grader's folder in the user's
    cache (which follows ``XDG_CACHE_HOME``, as the build cache does)."""
    return Path(os.environ.get("GRADER_LOG") or user_cache_dir() / "internal-errors.log")


def report_thread_errors() -> None:
    """Show an exception that ends one of the grader's threads as one line with a short id, its
    trace in the log, as the command's own internal errors are (Python's default prints the whole
    trace among the grading's output)."""
    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or isinstance(args.exc_value, SystemExit):
            return
        log = internal_error_log()
        short = internal_error_id(args.exc_value, log)
        thread = args.thread.name if args.thread is not None else "a thread"
        print(f"internal error {short} in the grader's thread {thread}: {args.exc_type.__name__}: {args.exc_value} "
              f"(full trace in {log})", file=sys.stderr)

    threading.excepthook = hook
