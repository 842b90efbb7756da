"""Parent side of the worker: start it, send tasks, enforce time limits, survive its death.

A hang is killed by process group; a crash, ``exit()`` or sticky CUDA error ends only the worker,
and the next task gets a fresh one. Untrusted workers run inside the sandbox where there is one;
their printed output is read through a pipe and capped.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .labs import PROJECT_ROOT
from .procgroup import kill_group
from .sandbox import Sandbox, worker_runtime
from .textutil import CappedOutput, clean

STARTUP_LIMIT_S = 120.0
# Per file the worker writes: the .npy outputs of the largest benchmark case (memory_types:
# 256 MiB arrays) must fit; a runaway writer is stopped here (SIGXFSZ).
FILE_LIMIT_BYTES = 1 << 30
# What is kept of a program's printed output: its start and its end.
OUTPUT_HEAD_BYTES = 32 << 10
OUTPUT_TAIL_BYTES = 32 << 10
LINE_CHARS = 200  # a reported line of it, at most


@dataclass(frozen=True)
class TaskResult:
    status: str  # ok | cuda_error | timeout | crashed | exited | worker_error | startup_failed
    data: dict = field(default_factory=dict)
    reason: str = ""  # for students, when status is not ok
    log_tail: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class Isolation:
    """How a worker is confined.

    ``trusted`` workers run only the grader's own code (the baselines) and skip the sandbox;
    others run inside it, seeing the worker runtime, ``read_only`` and their scratch folder.
    ``cupy_cache`` is the trusted kernel cache: sandboxed workers start from a copy of it.
    """

    sandbox: Sandbox
    read_only: tuple[Path, ...] = ()
    trusted: bool = False
    cupy_cache: Path | None = None

    @property
    def sandboxed(self) -> bool:
        return self.sandbox.active and not self.trusted

    def for_baselines(self) -> "Isolation":
        """How the grader's own baseline kernels run beside this submission: unconfined, with the
        same trusted kernel cache."""
        return Isolation(self.sandbox, trusted=True, cupy_cache=self.cupy_cache)

    def command(self, args: list[str], scratch: Path, extra_env: dict[str, str] | None = None,
                read_also: tuple[Path, ...] = ()) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that run ``args`` (a worker command line) confined."""
        env = worker_env(extra_env)
        if not self.sandboxed:
            if self.cupy_cache is not None:
                env["CUPY_CACHE_DIR"] = str(self.cupy_cache)
            return args, env
        runtime = worker_runtime()
        env["PYTHONPATH"] = str(runtime)
        kernels = scratch / ".cupy"
        if not kernels.exists():
            if self.cupy_cache is not None and self.cupy_cache.is_dir():
                shutil.copytree(self.cupy_cache, kernels, dirs_exist_ok=True)
            kernels.mkdir(parents=True, exist_ok=True)
        env["CUPY_CACHE_DIR"] = str(kernels)
        cmd = self.sandbox.wrap(args, read_only=(runtime, *self.read_only, *read_also), writable=(scratch,), cwd=scratch)
        return cmd, env


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("GRADER_RESULT_FD", None)
    # The worker caps its own file sizes at start-up: a preexec_fn would not be safe here, where
    # background threads start processes too (a child can deadlock between fork and exec).
    env["GRADER_FILE_LIMIT_BYTES"] = str(FILE_LIMIT_BYTES)
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
            "SIGXFSZ": f"file size limit exceeded (a file of more than {FILE_LIMIT_BYTES >> 20} MiB written)",
            "SIGKILL": "killed (out of memory?)",
        }.get(name, "terminated by a signal")
        return "crashed", f"{what} [{name}]"
    return "exited", f"the process exited with status {returncode} while running your code (exit() called?)"


def _drain(fd: int, sink: CappedOutput) -> bool:
    """Read what is there; False at end of file."""
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if not chunk:
        return False
    sink.feed(chunk)
    return True


class WorkerSession:
    """A worker process that runs tasks one at a time; restarted after it dies or hangs."""

    def __init__(self, scratch: Path, isolation: Isolation, extra_env: dict[str, str] | None = None):
        self.scratch = scratch
        self.isolation = isolation
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None
        self.rfd: int | None = None
        self.outfd: int | None = None
        self.buffer = b""
        self.starts = 0
        self.ready = False
        self.output = CappedOutput(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES)

    def spawn(self) -> None:
        """Start the worker without waiting for it (it gets ready while the caller goes on)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.close()
        self.scratch.mkdir(parents=True, exist_ok=True)
        rfd, wfd = os.pipe()
        cmd, env = self.isolation.command([sys.executable, "-m", "grader.worker", "--serve"], self.scratch,
                                          {**self.extra_env, "GRADER_RESULT_FD": str(wfd)})
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(wfd,), env=env, cwd=self.scratch,
                start_new_session=True,
            )
        finally:
            os.close(wfd)
        assert self.proc.stdout is not None
        self.outfd = self.proc.stdout.fileno()
        os.set_blocking(self.outfd, False)
        self.rfd, self.buffer = rfd, b""
        self.output = CappedOutput(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES)
        self.starts += 1
        self.ready = False

    def _start(self) -> TaskResult | None:
        self.spawn()
        if self.ready:
            return None
        msg = self._read_message(STARTUP_LIMIT_S)
        self.ready = msg is not None and msg.get("event") == "ready"
        if not self.ready:
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
            fds = [self.rfd] + ([self.outfd] if self.outfd is not None else [])
            ready, _, _ = select.select(fds, [], [], min(left, 0.5))
            if self.outfd is not None and self.outfd in ready:
                if not _drain(self.outfd, self.output):
                    self.outfd = None
                ready = [fd for fd in ready if fd == self.rfd]
                if not ready:
                    continue
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
        if self.proc is None or self.proc.poll() is not None or not self.ready:
            failed = self._start()
            if failed is not None:
                return failed
        started = time.monotonic()
        self.output = CappedOutput(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES)
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
        """What the program printed during the last task: its last lines, and how much was dropped."""
        if self.outfd is not None:  # whatever is still in the pipe
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and select.select([self.outfd], [], [], 0.05)[0]:
                if not _drain(self.outfd, self.output):
                    break
        text = clean(self.output.text())
        kept = [line if len(line) <= LINE_CHARS else f"{line[:LINE_CHARS]} [... {len(line) - LINE_CHARS} more characters]"
                for line in text.splitlines()[-lines:]]
        note = self.output.omitted_note()
        return "\n".join(([note] if note else []) + kept)

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
            kill_group(self.proc.pid)
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
                    kill_group(self.proc.pid)
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    try:
                        pipe.close()
                    except OSError:
                        pass
            kill_group(self.proc.pid)  # anything the student left behind in the group
            self.proc = None
        if self.rfd is not None:
            os.close(self.rfd)
            self.rfd = None
        self.outfd = None

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

    def failure(self, ended_silently: str) -> str:
        """Why the worker did not report success ("" if it did); ``ended_silently`` where it exited
        with status 0 before reporting anything."""
        if self.result is None:
            return describe_exit(self.returncode)[1] if self.returncode else ended_silently
        if self.result.get("status") != "ok":
            return self.result.get("error", "failed")
        return ""


def run_under_tool(
    tool_cmd: list[str], task: dict, scratch: Path, time_limit_s: float, isolation: Isolation,
    log: Path | None = None, extra_env: dict[str, str] | None = None,
) -> ToolRun:
    """``tool_cmd python -m grader.worker --job ...`` in its own process group, killed at the limit."""
    started = time.monotonic()
    scratch.mkdir(parents=True, exist_ok=True)
    job, result = scratch / "job.json", scratch / "result.json"
    result.unlink(missing_ok=True)
    job.write_text(json.dumps(task))
    args = [*tool_cmd, sys.executable, "-m", "grader.worker", "--job", str(job), "--result", str(result)]
    inputs = tuple(Path(p) for p in task.get("inputs", {}).values() if not Path(p).is_relative_to(scratch))
    cmd, env = isolation.command(args, scratch, extra_env, read_also=inputs)
    console = CappedOutput(OUTPUT_HEAD_BYTES * 8, OUTPUT_TAIL_BYTES)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, cwd=scratch, start_new_session=True)
    assert proc.stdout is not None
    out = proc.stdout.fileno()
    os.set_blocking(out, False)
    deadline = started + time_limit_s
    code: int | None = None
    open_pipe = True
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            kill_group(proc.pid)
            proc.wait()
            break
        if open_pipe and select.select([out], [], [], min(left, 0.5))[0]:
            open_pipe = _drain(out, console)
            continue
        if not open_pipe:
            try:
                code = proc.wait(min(left, 0.5))
                break
            except subprocess.TimeoutExpired:
                continue
        if proc.poll() is not None:
            code = proc.returncode
            while select.select([out], [], [], 0)[0] and _drain(out, console):
                pass
            break
    kill_group(proc.pid)  # anything left behind in the group
    proc.stdout.close()
    text = ""
    if log and log.exists():
        with open(log, "rb") as fh:
            text = fh.read(4 << 20).decode(errors="replace")
    text += "\n" + console.text()
    data = None
    if result.exists():
        try:
            data = json.loads(result.read_text())
        except ValueError:
            data = None
    return ToolRun(code, clean(text), data, time.monotonic() - started)
