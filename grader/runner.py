"""Parent side of the worker: start it, send tasks, enforce time limits, survive its death.

A hang is killed by process group; a crash, ``exit()`` or sticky CUDA error ends only the worker,
and the next task gets a fresh one.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .labs import PROJECT_ROOT
from .textutil import cap_lines, clean

STARTUP_LIMIT_S = 120.0
# Per file the worker writes: its log (student output) and the .npy outputs of the largest
# benchmark case (memory_types: 256 MiB arrays). A runaway printer is stopped here.
OUTPUT_LIMIT_BYTES = 1 << 30


@dataclass(frozen=True)
class TaskResult:
    status: str  # ok | cuda_error | timeout | crashed | exited | worker_error | startup_failed
    data: dict = field(default_factory=dict)
    reason: str = ""  # for students, when status is not ok
    log_tail: str = ""
    seconds: float = 0.0


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("GRADER_RESULT_FD", None)
    # The worker caps its own file sizes at start-up: a preexec_fn would not be safe here, where
    # background threads start processes too (a child can deadlock between fork and exec).
    env["GRADER_FILE_LIMIT_BYTES"] = str(OUTPUT_LIMIT_BYTES)
    env.update(extra or {})
    return env


def describe_exit(returncode: int) -> tuple[str, str]:
    """(status, reason) for a worker that ended while running student code."""
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        what = {
            "SIGSEGV": "segmentation fault in host code (a bad pointer dereferenced on the CPU?)",
            "SIGABRT": "the process aborted (abort() or a failed assert)",
            "SIGBUS": "bus error in host code",
            "SIGFPE": "arithmetic error in host code (integer division by zero?)",
            "SIGXFSZ": f"output limit exceeded (more than {OUTPUT_LIMIT_BYTES >> 20} MiB printed or written)",
            "SIGKILL": "killed (out of memory?)",
        }.get(name, "terminated by a signal")
        return "crashed", f"{what} [{name}]"
    return "exited", f"the process exited with status {returncode} while running your code (exit() called?)"


class WorkerSession:
    """A worker process that runs tasks one at a time; restarted after it dies or hangs."""

    def __init__(self, scratch: Path, extra_env: dict[str, str] | None = None):
        self.scratch = scratch
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None
        self.rfd: int | None = None
        self.buffer = b""
        self.starts = 0
        self.log_path = scratch / "worker.log"

    def _start(self) -> TaskResult | None:
        rfd, wfd = os.pipe()
        log = open(self.log_path, "ab")
        self.log_offset = log.tell()
        env = worker_env({**self.extra_env, "GRADER_RESULT_FD": str(wfd)})
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grader.worker", "--serve"],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(wfd,), env=env, cwd=self.scratch,
                start_new_session=True,
            )
        finally:
            os.close(wfd)
            log.close()
        self.rfd, self.buffer = rfd, b""
        self.starts += 1
        msg = self._read_message(STARTUP_LIMIT_S)
        if msg is None or msg.get("event") != "ready":
            reason = (msg or {}).get("error") or "the worker did not start"
            self.kill()
            return TaskResult("startup_failed", reason=f"could not start the GPU worker: {reason}", log_tail=self.log_tail())
        return None

    def _read_message(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.rfd], [], [], min(left, 0.5))
            if not ready:
                if self.proc is not None and self.proc.poll() is not None:
                    # one more non-blocking read below catches a message written just before exit
                    ready2, _, _ = select.select([self.rfd], [], [], 0)
                    if not ready2:
                        return None
                else:
                    continue
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def run(self, task: dict, time_limit_s: float) -> TaskResult:
        if self.proc is None or self.proc.poll() is not None:
            failed = self._start()
            if failed is not None:
                return failed
        started = time.monotonic()
        try:
            assert self.proc is not None and self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(task) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died already: reported below
        msg = self._read_message(time_limit_s)
        seconds = time.monotonic() - started
        if msg is not None:
            data = {k: v for k, v in msg.items() if k not in ("event", "id", "status")}
            status = msg.get("status", "worker_error")
            if status in ("exited", "crashed"):  # reported from inside the dying process
                self.kill(wait_s=3.0)
                code = int(data.get("code", 0)) if status == "exited" else -int(data.get("signal", 9))
                status, reason = describe_exit(code)
                return TaskResult(status, {}, reason, self.log_tail(), seconds)
            reason = data.get("error", "") if status != "ok" else ""
            if status == "cuda_error" and data.get("sticky"):
                self._reap(5.0)
            return TaskResult(status, data, reason, self.log_tail() if status != "ok" else "", seconds)
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
            return TaskResult(
                "timeout",
                reason=f"did not finish within {time_limit_s:g} s and was killed (infinite loop or deadlock?)",
                log_tail=self.log_tail(), seconds=seconds,
            )
        code = self.proc.returncode if self.proc is not None else -9
        self.close()
        status, reason = describe_exit(code)
        return TaskResult(status, reason=reason, log_tail=self.log_tail(), seconds=seconds)

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(getattr(self, "log_offset", 0))
                text = fh.read()[-20000:].decode(errors="replace")
        except OSError:
            return ""
        return cap_lines("\n".join(clean(text).splitlines()[-lines:]), lines)

    def _reap(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.close()

    def kill(self, wait_s: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                pass  # still releasing the GPU: the next task starts a new worker regardless
        self.close()

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None and self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    self.proc.stdin.write(b'{"kind": "quit"}\n')
                    self.proc.stdin.flush()
                    self.proc.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(self.proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            if self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
            # kill anything the student left behind in the group
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc = None
        if self.rfd is not None:
            os.close(self.rfd)
            self.rfd = None

    def __enter__(self) -> "WorkerSession":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


@dataclass(frozen=True)
class ToolRun:
    """One task run by a one-shot worker under an external tool (ncu, compute-sanitizer)."""

    returncode: int | None  # None: killed at the time limit
    output: str  # the tool's log and console output, cleaned
    result: dict | None  # what the worker reported, if it got that far
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_under_tool(
    tool_cmd: list[str], task: dict, scratch: Path, time_limit_s: float,
    log: Path | None = None, extra_env: dict[str, str] | None = None,
) -> ToolRun:
    """``tool_cmd python -m grader.worker --job ...`` in its own process group, killed at the limit."""
    started = time.monotonic()
    scratch.mkdir(parents=True, exist_ok=True)
    job, result, console = scratch / "job.json", scratch / "result.json", scratch / "console.txt"
    result.unlink(missing_ok=True)
    job.write_text(json.dumps(task))
    cmd = [*tool_cmd, sys.executable, "-m", "grader.worker", "--job", str(job), "--result", str(result)]
    with open(console, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=worker_env(extra_env),
            cwd=scratch, start_new_session=True,
        )
        try:
            code: int | None = proc.wait(time_limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    text = (log.read_text(errors="replace") if log and log.exists() else "") + "\n" + console.read_text(errors="replace")
    data = None
    if result.exists():
        try:
            data = json.loads(result.read_text())
        except ValueError:
            data = None
    return ToolRun(code, clean(text), data, time.monotonic() - started)
