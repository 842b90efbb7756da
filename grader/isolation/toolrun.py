"""One-shot workers under an external tool (ncu, compute-sanitizer): the tool's report through a
pipe that only the grader reads, everything printed capped, killed at the limit or once stopped."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import GraderError
from ..host import gputurns
from ..host.procgroup import Stop, run_capped
from ..host.safeio import read_beneath, write_private
from ..textutil import CappedOutput, clean
from ..worker.protocol import Status, Task
from . import replies
from .launch import Isolation, RunDirs, worker_command
from .replies import Invalid, Reply
from .runner import INTERFERED, OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES, describe_exit, last_line

RESULT_LIMIT_BYTES = 4 << 20  # a one-shot worker's result.json
#: Stands in a tool's command line for the path of the pipe its log goes to.
TOOL_LOG = "{tool-log}"


@dataclass(frozen=True)
class ToolRun:
    """One task run by a one-shot worker under an external tool (ncu, compute-sanitizer).
    ``log`` is what the tool wrote to its private pipe (the worker closes its copy before any
    student code runs); ``console`` is everything printed, the student's program included, so
    only ``log`` is evidence of what the tool found."""

    returncode: int | None  # None: killed at the time limit
    log: str  # the tool's own report, cleaned
    console: str  # what the tool and the program printed, cleaned
    result: Reply | None  # what the worker reported, checked, if it got that far
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def failure(self, ended_silently: str, trusted: bool = False) -> str:
        """Why the worker did not report success ("" if it did); ``ended_silently`` where it exited
        with status 0 before reporting anything (``trusted``: it ran the grader's own code)."""
        if self.result is None:
            return describe_exit(self.returncode, trusted)[1] if self.returncode else ended_silently
        if self.result.status != Status.OK:
            return self.result.error if self.result.error is not None else "failed"
        return ""


def run_under_tool(
    tool_cmd: list[str], task: Task | int, dirs: RunDirs, time_limit_s: float, isolation: Isolation,
    extra_env: dict[str, str] | None = None, stop: Stop | None = None,
) -> ToolRun:
    """``tool_cmd`` followed by a one-shot worker, in its own process group, killed at the limit
    (or once ``stop`` is set). ``task`` may instead be the read end of a pipe that its job will
    come through (a run started before its job is known: what the job names must lie in
    ``isolation``'s folders); the worker then starts and waits for it. That descriptor stays the
    caller's, open, to close once (closing a number twice can close another thread's file).

    ``TOOL_LOG`` in ``tool_cmd`` becomes the path of a pipe that only the grader reads. A run
    given its task is a step of GPU work in this process's turns (:mod:`grader.host.gputurns`),
    its limit counted once its turn came; one waiting for its job takes its turn when sent it.
    """
    with gputurns.step() if not isinstance(task, int) else contextlib.nullcontext():
        return _run_under_tool(tool_cmd, task, dirs, time_limit_s, isolation, extra_env, stop)


def _run_under_tool(tool_cmd: list[str], task: Task | int, dirs: RunDirs, time_limit_s: float, isolation: Isolation,
                    extra_env: dict[str, str] | None, stop: Stop | None) -> ToolRun:
    started = time.monotonic()
    dirs.make()
    console = CappedOutput(OUTPUT_HEAD_BYTES * 8, OUTPUT_TAIL_BYTES)
    log = CappedOutput(OUTPUT_HEAD_BYTES * 32, OUTPUT_TAIL_BYTES)
    log_r, log_w = os.pipe()
    passing = [log_w]  # run_capped closes these once the process has them; here if it is never reached
    try:
        args = [f"/dev/fd/{log_w}" if a == TOOL_LOG else a for a in tool_cmd]
        job, fds, inputs = _job(task, dirs)
        passing += fds
        args += worker_command(*job, "--result", str(dirs.outbox / "result.json"))
        env_extra = {**(extra_env or {}), "GRADER_CLOSE_FD": f"{log_w}:{os.fstat(log_w).st_ino}"}
        cmd, env = isolation.command(args, dirs, env_extra, read_also=inputs)
        pass_fds, passing = tuple(passing), []
        code = run_capped(cmd, console, started + time_limit_s - time.monotonic(), cwd=dirs.outbox, env=env,
                          pass_fds=pass_fds, pipes={log_r: log}, stop=stop)
    finally:
        os.close(log_r)
        for fd in passing:
            os.close(fd)
    return ToolRun(code, clean(log.text()), clean(console.text()), _read_result(dirs.outbox, isolation.trusted),
                   time.monotonic() - started)


def _job(task: Task | int, dirs: RunDirs) -> tuple[list[str], tuple[int, ...], tuple[Path, ...]]:
    """The worker's arguments naming its job, the descriptors it gets, and the inputs outside
    ``dirs.inbox`` that its sandbox must show."""
    if isinstance(task, int):  # the caller's: the worker gets a copy, and the caller's stays open
        mine = os.dup(task)
        return ["--job-fd", str(mine)], (mine,), ()
    write_private(dirs.inbox / "job.json", json.dumps(task).encode())
    inputs = tuple(Path(p) for one in (task, *task.get("tasks", [])) for p in one.get("inputs", {}).values()
                   if not Path(p).is_relative_to(dirs.inbox))
    return ["--job", str(dirs.inbox / "job.json")], (), inputs


def _read_result(outbox: Path, trusted: bool = False) -> Reply | None:
    """The worker's result, if it wrote one, checked. Unless the worker ran only the grader's code, it was
    written where the student's code runs: one of the wrong shape, or one that reports a failure
    of the worker's own code, is the student's doing and reported as such."""
    try:
        data = json.loads(read_beneath(outbox, "result.json", RESULT_LIMIT_BYTES))
    except (OSError, ValueError, GraderError):  # missing, unreadable, a link, too large
        return None
    parsed = replies.parse_result(data) if isinstance(data, dict) else Invalid("a result that is not a JSON object")
    if isinstance(parsed, Invalid):
        wrong = parsed.why
    else:
        failed = [r for r in (parsed, *(parsed.results or ())) if r.status == Status.WORKER_ERROR]
        if not failed or trusted:
            return parsed
        wrong = f"its own code failed ({last_line(failed[0].error)})"
    if trusted:
        return Reply(Status.WORKER_ERROR, f"the grader's worker wrote a malformed result: {wrong}")
    return Reply(Status.INTERFERED, f"{INTERFERED} ({wrong})")
