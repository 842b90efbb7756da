"""Parent side of the worker: start it, send tasks, enforce time limits, survive its death.

A hang is killed by process group; a crash, ``exit()`` or sticky CUDA error ends only the worker,
and the next task gets a fresh one. Untrusted workers run inside the sandbox where there is one;
their printed output is read through a pipe and capped.

Every run has two folders (``launch.RunDirs``): an inbox that only the grader writes (tasks, inputs; the
sandbox sees it read-only) and an outbox that the run may write (outputs, results), which the
grader reads only through ``safeio``: no link followed, sizes capped. A worker starts from an
allow-listed environment (no secret, no token), with ``python -I`` so that no file in its
working folder or on ``PYTHONPATH`` is imported, and with /dev/null as its standard input.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..host import gputurns
from ..host.procgroup import drain, kill_group, start_lasting
from ..textutil import CappedOutput, clean
from ..worker import shared
from ..worker.protocol import QUIT, Status, Task, makes_shared
from . import replies
from .launch import FILE_LIMIT_BYTES, Isolation, RunDirs, worker_command
from .replies import Invalid, Reply

STARTUP_LIMIT_S = 120.0
#: How a reply that the student's code forged or broke is reported.
INTERFERED = "your code interfered with the grader's worker: its reply was malformed or forged"
#: How long a worker's start waits for GPU memory another process holds, polling every MEMORY_POLL_S.
MEMORY_WAIT_S, MEMORY_POLL_S = 15.0, 0.5
# What is kept of a program's printed output: its start and its end.
OUTPUT_HEAD_BYTES = 32 << 10
OUTPUT_TAIL_BYTES = 32 << 10
LINE_CHARS = 200  # a reported line of it, at most
@dataclass(frozen=True)
class TaskResult:
    status: str  # a ``Status`` value: ok | cuda_error | out_of_memory | timeout | crashed | exited | worker_error | startup_failed | interfered
    reply: Reply | None = None  # the worker's reply, checked; None where it gave none that is believed
    reason: str = ""  # for students, when status is not ok
    log_tail: str = ""
    seconds: float = 0.0
    #: descriptors of shared buffers the worker passed with its reply (the caller closes them)
    fds: tuple[int, ...] = ()

    @property
    def answer(self) -> Reply:
        """The checked reply of a task that ended ok: the fields its kind holds."""
        if self.reply is None:
            raise RuntimeError(f"a task that ended {self.status} has no reply")
        return self.reply


#: How long the grader waits for shared buffers' descriptors once their reply has come.
FDS_WAIT_S = 10.0


def last_line(text: object) -> str:
    """The last line of a worker's error text, cleaned and cut short, for a one-line message."""
    lines = str(text or "").strip().splitlines()
    return clean(lines[-1])[:LINE_CHARS] if lines else "no reason given"


def describe_exit(returncode: int, trusted: bool = False) -> tuple[str, str]:
    """(status, reason) for a worker that ended while running student code (``trusted``: the
    grader's own, a baseline's)."""
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
    if trusted:
        return "exited", f"the process exited with status {returncode} while running the grader's own code"
    return "exited", f"the process exited with status {returncode} while running your code (exit() called?)"


class WorkerSession:
    """A worker process that runs tasks one at a time; restarted after it dies or hangs."""

    def __init__(self, dirs: RunDirs, isolation: Isolation, extra_env: dict[str, str] | None = None):
        self.dirs = dirs
        self.isolation = isolation
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.tasks: int | None = None  # the write end of the worker's task pipe
        self.rfd: int | None = None
        self.outfd: int | None = None
        self.share: socket.socket | None = None  # the grader's end of the socket shared buffers cross
        self.buffer = b""
        self.starts = 0
        self.ready = False
        self.start_s: float | None = None  # what its first start took, as it says (shown, never judged)
        self.output = CappedOutput(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES)
        self._ending = threading.RLock()  # a timed lab's workers end in the background, and again at its close

    def spawn(self) -> None:
        """Start the worker without waiting for it (it gets ready while the caller goes on)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.close()
        self.dirs.make()
        rfd, wfd = os.pipe()
        task_r, task_w = os.pipe()
        share, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cmd, env = self.isolation.command(worker_command("--serve"), self.dirs,
                                          {**self.extra_env, "GRADER_RESULT_FD": str(wfd), "GRADER_TASK_FD": str(task_r),
                                           "GRADER_SHARE_FD": str(theirs.fileno())})
        try:
            self.proc = start_lasting(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(wfd, task_r, theirs.fileno()), env=env, cwd=self.dirs.outbox,
                start_new_session=True,
            )
        except BaseException:
            for fd in (rfd, task_w):
                os.close(fd)
            share.close()
            raise
        finally:
            os.close(wfd)
            os.close(task_r)
            theirs.close()
        self.tasks, self.share = task_w, share
        assert self.proc.stdout is not None
        self.outfd = self.proc.stdout.fileno()
        os.set_blocking(self.outfd, False)
        self.rfd, self.buffer = rfd, b""
        self.output = CappedOutput(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES)
        self.starts += 1
        self.ready = False

    def spawn_ahead(self) -> None:
        """:meth:`spawn` now, unless GPU work takes turns here (several students on one GPU: the
        worker then starts in its first call's turn, as a step). A host makes CUDA contexts one at
        a time: a worker started ahead makes its context while the caller readies the first call,
        and asks for it before the tool runs started after it."""
        if not gputurns.active():
            self.spawn()

    def _start(self) -> TaskResult | None:
        """Start the worker, waiting up to ``MEMORY_WAIT_S`` for GPU memory that another process
        holds: the submission's own run under a sanitizer, say, of code that keeps every byte."""
        waited_until = time.monotonic() + MEMORY_WAIT_S
        while True:
            failed = self._start_once()
            if failed is None or "out of memory" not in failed.reason:
                return failed
            if time.monotonic() >= waited_until:
                return dataclasses.replace(failed, reason=f"{failed.reason} (the GPU's memory stayed taken by another "
                                                          f"process for {MEMORY_WAIT_S:g} s)")
            time.sleep(MEMORY_POLL_S)

    def _start_once(self) -> TaskResult | None:
        self.spawn()
        if self.ready:
            return None
        msg = self._read_message(STARTUP_LIMIT_S)
        self.ready = msg is not None and msg.get("event") == "ready"
        if self.ready and self.start_s is None and msg is not None:
            self.start_s = replies.start_seconds(msg, STARTUP_LIMIT_S)
        if not self.ready:
            reason = (msg or {}).get("error") or "the worker did not start"
            self.kill()
            return TaskResult("startup_failed", reason=f"could not start the GPU worker: {reason}", log_tail=self.log_tail())
        return None

    def _read_message(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        results = self.rfd
        if results is None:
            return None
        while b"\n" not in self.buffer:
            if len(self.buffer) > replies.REPLY_LIMIT_BYTES:
                self.buffer = b""
                return {"status": Status.INTERFERED.value, "error": f"a reply of more than {replies.REPLY_LIMIT_BYTES >> 20} MiB"}
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            fds = [results] + ([self.outfd] if self.outfd is not None else [])
            ready, _, _ = select.select(fds, [], [], min(left, 0.5))
            if self.outfd is not None and self.outfd in ready:
                if not drain(self.outfd, self.output):
                    self.outfd = None
                ready = [fd for fd in ready if fd == results]
                if not ready:
                    continue
            if not ready:
                if self.proc is not None and self.proc.poll() is not None:
                    # one more non-blocking read below catches a message written just before exit
                    ready2, _, _ = select.select([results], [], [], 0)
                    if not ready2:
                        return None
                else:
                    continue
            chunk = os.read(results, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        return message if isinstance(message, dict) else {"status": Status.INTERFERED.value, "error": "a reply that is not a JSON object"}

    def _read_reply(self, nonce: str, deadline: float) -> dict[str, Any] | None:
        """The worker's answer to the task sent with ``nonce``. Student code in the worker can write
        to the result pipe too: a line without the task's nonce is ignored, except the exit and
        crash reports of the support file (which only end the student's own grade)."""
        while True:
            msg = self._read_message(max(0.0, deadline - time.monotonic()))
            if msg is None or msg.get("id") == nonce or msg.get("status") in ("exited", "crashed", Status.INTERFERED.value):
                return msg

    def _send(self, task: Task) -> bool:
        """Hand the worker a task; False if it is gone (reported by the read that follows)."""
        if self.tasks is None:
            return False
        try:
            os.write(self.tasks, (json.dumps(task) + "\n").encode())
            return True
        except OSError:
            return False

    def run(self, task: Task, time_limit_s: float, fds: tuple[int, ...] = ()) -> TaskResult:
        """Run ``task``; ``fds``: shared buffers' descriptors the task's ``share`` names, passed
        first. A reply that names shared buffers of its own (``share`` and ``buffers``, from the
        trusted worker) comes with their descriptors in ``fds``. The call is a step of GPU work in
        this process's turns (:mod:`grader.host.gputurns`), its limit counted once its turn came."""
        with gputurns.step():
            return self._run(task, time_limit_s, fds)

    def _run(self, task: Task, time_limit_s: float, fds: tuple[int, ...]) -> TaskResult:
        if self.proc is None or self.proc.poll() is not None or not self.ready:
            failed = self._start()
            if failed is not None:
                return failed
        started = time.monotonic()
        self.output = CappedOutput(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES)
        nonce = secrets.token_hex(8)
        if fds and not self._pass_fds(str(task.get("share", "")), fds):
            return self._ended(time.monotonic() - started)
        self._send({**task, "id": nonce})
        msg = self._read_reply(nonce, started + time_limit_s)
        seconds = time.monotonic() - started
        if msg is not None:
            data = {k: v for k, v in msg.items() if k not in ("event", "id", "status")}
            status = msg.get("status", "worker_error")
            if status in ("exited", "crashed"):  # reported from inside the dying process
                self.kill(wait_s=3.0)
                number = data.get("code" if status == "exited" else "signal")
                number = number if isinstance(number, int) and not isinstance(number, bool) and 0 <= number < 256 else 9
                code = number if status == "exited" else -number
                status, reason = describe_exit(code, self.isolation.trusted)
                return TaskResult(status, None, reason, self.log_tail(), seconds)
            reply: Reply | None = None
            if status == Status.INTERFERED.value:
                wrong = str(data.get("error", ""))
            else:
                parsed = replies.parse(task, msg)
                wrong, reply = (parsed.why, None) if isinstance(parsed, Invalid) else ("", parsed)
            if wrong or (status == Status.WORKER_ERROR.value and not self.isolation.trusted):
                return self._interfered(wrong or f"its own code failed ({last_line(data.get('error'))})", seconds)
            # (an ``interfered`` status that came with no error, from outside the task, carries no reply and no reason)
            reason = ((reply.error or "") if reply is not None else "") if status != "ok" else ""
            sticky = reply is not None and reply.sticky
            if (status == "cuda_error" and sticky) or (status == "out_of_memory" and not makes_shared(task)):
                self._reap(10.0)  # it is ending: the next task gets a fresh worker, its memory released
            received: tuple[int, ...] = ()
            if reply is not None and reply.buffers is not None and status == Status.OK.value and self.isolation.trusted \
                    and self.share is not None:
                try:
                    self.share.settimeout(FDS_WAIT_S)
                    received = tuple(shared.receive_fds(self.share, reply.share, len(reply.buffers)))
                except (OSError, shared.SharingError) as exc:
                    return self._interfered(f"no descriptors for its shared buffers ({exc})", seconds)
            return TaskResult(status, reply, reason, self.log_tail() if status != "ok" else "", seconds, received)
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
            return TaskResult(
                "timeout",
                reason=f"did not finish within {time_limit_s:g} s and was killed (infinite loop or deadlock?)",
                log_tail=self.log_tail(), seconds=seconds,
            )
        return self._ended(seconds)

    def _ended(self, seconds: float) -> TaskResult:
        """The result of a task whose worker died."""
        if self.proc is not None:
            try:
                self.proc.wait(3.0)
            except subprocess.TimeoutExpired:
                self.kill()
        code = self.proc.returncode if self.proc is not None and self.proc.returncode is not None else -9
        self.close()
        status, reason = describe_exit(code, self.isolation.trusted)
        return TaskResult(status, reason=reason, log_tail=self.log_tail(), seconds=seconds)

    def _pass_fds(self, tag: str, fds: tuple[int, ...]) -> bool:
        """Send shared buffers' descriptors ahead of the task that uses them; False if the worker is gone."""
        if self.share is None:
            return False
        try:
            self.share.settimeout(FDS_WAIT_S)
            shared.send_fds(self.share, tag, list(fds))
            return True
        except OSError:
            return False

    def _interfered(self, wrong: str, seconds: float) -> TaskResult:
        """A reply that is not what the task asks for. From a worker that runs only the grader's
        code it is a bug of the grader's; from one that loaded student code, the student's code
        changed what the worker does, and the worker is ended: nothing it says is believed."""
        if self.isolation.trusted:
            return TaskResult(Status.WORKER_ERROR.value, reason=f"the grader's worker sent a malformed reply: {wrong}", seconds=seconds)
        tail = self.log_tail()
        self.kill(wait_s=3.0)
        return TaskResult(Status.INTERFERED.value, reason=f"{INTERFERED} ({wrong})", log_tail=tail, seconds=seconds)

    def log_tail(self, lines: int = 40) -> str:
        """What the program printed during the last task: its last lines, and how much was dropped."""
        if self.outfd is not None:  # whatever is still in the pipe
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and select.select([self.outfd], [], [], 0.05)[0]:
                if not drain(self.outfd, self.output):
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
        with self._ending:
            if self.proc is not None and self.proc.poll() is None:
                kill_group(self.proc.pid)
                try:
                    self.proc.wait(wait_s)
                except subprocess.TimeoutExpired:
                    pass  # still releasing the GPU: the next task starts a new worker regardless
            self.close()

    def close(self) -> None:
        with self._ending:
            if self.proc is not None:
                if self.proc.poll() is None and self._send(QUIT):
                    try:
                        self.proc.wait(10)
                    except subprocess.TimeoutExpired:
                        kill_group(self.proc.pid)
                if self.proc.stdout is not None:
                    try:
                        self.proc.stdout.close()
                    except OSError:
                        pass
                kill_group(self.proc.pid)  # anything the student left behind in the group
                self.proc = None
            if self.tasks is not None:
                os.close(self.tasks)
                self.tasks = None
            if self.rfd is not None:
                os.close(self.rfd)
                self.rfd = None
            if self.share is not None:
                self.share.close()
                self.share = None
            self.outfd = None
