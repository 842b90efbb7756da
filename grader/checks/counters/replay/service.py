"""The replayer program and its process: built by the grader with the toolkit's nvcc against the
toolkit's CUPTI (cached by content, like a submission's build), and run as one long-lived process
per GPU that takes one task (a student's module and cases) at a time.

The process is started once and kept (about 1.5 s a student warm against 2.8 s for a process per
student, measured on an H200), in bubblewrap where the grader has it: it runs no student host
code, but it does run the student's device code. A task that hangs past its limit, or a fault
that loses the CUDA context (the replayer says so and ends), ends the process; the next task
starts a fresh one. A task's profiling session holds the GPU's profiling lock, as an Nsight
Compute run does; its preparation and its outputs do not (``Replayer.run``).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping

import filelock

from ....cachedirs import default_cache_dir
from ....context import carried
from ....errors import GraderError
from ....host import gputurns, toolchain
from ....host.gpu import GpuInfo
from ....host.gpulock import lock_folder, profiling_lock
from ....host.hostdirs import private_dir
from ....host.procgroup import kill_group, start_lasting
from ....isolation.build import gencode_flags
from ....isolation.sandbox import Sandbox, confined_env
from .task import BadAnswer, CaseResult, case_result, parse_line

SOURCE = Path(__file__).parents[3] / "cuda" / "replay.cu"
BUILD_TIME_LIMIT_S = 300.0
START_TIME_LIMIT_S = 60.0
PLAN_TIME_LIMIT_S = 60.0
#: The longest a start waits for the GPU's profiling lock (another grader's profiler runs end well within it).
START_WAIT_S = 600.0
#: What CUPTI says where another process holds the GPU's counters.
BUSY = "CUPTI_ERROR_HARDWARE_BUSY"
#: The CUPTI headers the replayer needs (CUDA 12.6 and newer ship the Range Profiler).
CUPTI_HEADER = "cupti_range_profiler.h"
#: Told the seconds of each phase of a replay, by name (``counters.queue``, ... : a lab's stage seconds).
Spent = Callable[[str, float], None]
#: A lab's replay, phase by phase, in the order they run (``collect.replayed``, then ``Replayer.run``).
PHASES = ("ahead", "cases", "record", "extract", "plan", "queue", "prepare", "lock", "profile", "finish", "check")


def spent_nowhere(name: str, seconds: float) -> None:
    """A ``Spent`` that keeps nothing."""


class Phases:
    """Tells ``spent`` the seconds since the last phase ended (or ``since``), as ``counters.NAME``."""

    def __init__(self, spent: Spent, since: float | None = None) -> None:
        self.spent, self.last = spent, time.monotonic() if since is None else since

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.spent(f"counters.{name}", now - self.last)
        self.last = now

    def until(self, name: str, when: float) -> None:
        """Tells ``name`` the seconds from the last phase's end up to ``when`` (bounded by now)."""
        when = min(max(when, self.last), time.monotonic())
        self.spent(f"counters.{name}", when - self.last)
        self.last = when

    def skip(self) -> None:
        """What ran since the last phase is told elsewhere (or not at all)."""
        self.last = time.monotonic()


class ServiceError(RuntimeError):
    """The replayer cannot be built or started here (one line: why; the profiler is used instead)."""


@dataclass(frozen=True)
class Cupti:
    include: Path
    library: Path


def find_cupti() -> Cupti:
    """The toolkit's CUPTI: its headers and ``libcupti.so``."""
    nvcc = toolchain.find("nvcc")
    if nvcc is None:
        raise ServiceError("nvcc not found: the replayer cannot be built")
    root = toolchain.toolkit_root(nvcc)
    includes = [root / "include", root / "extras" / "CUPTI" / "include", root / "targets" / "x86_64-linux" / "include"]
    libs = [root / d / "libcupti.so" for d in ("lib64", "lib", "extras/CUPTI/lib64", "targets/x86_64-linux/lib")]
    include = next((d for d in includes if (d / CUPTI_HEADER).is_file()), None)
    library = next((p for p in libs if p.exists()), None)
    if include is None or library is None:
        raise ServiceError(f"the CUDA toolkit at {root} has no CUPTI Range Profiler ({CUPTI_HEADER}, libcupti.so)")
    return Cupti(include, library)


def replayer_binary(archs: tuple[str, ...], cache_dir: Path | None = None) -> Path:
    """The replayer built for ``archs`` (its own L2-flush kernel runs on the GPU), cached by the
    source, the compiler, CUPTI and the flags; built once, published atomically."""
    cupti = find_cupti()
    nvcc = toolchain.find("nvcc")
    assert nvcc is not None  # (find_cupti found it)
    flags = ["-O2", "-std=c++17", *gencode_flags(archs), f"-I{cupti.include}", f"-L{cupti.library.parent}", "-lcupti",
             "-Xlinker", f"-rpath={cupti.library.parent}"]
    stat = cupti.library.stat()
    key = hashlib.sha256("\0".join([SOURCE.read_text(), toolchain.nvcc_version(), str(cupti.library), str(stat.st_size),
                                    str(stat.st_mtime_ns), *flags]).encode()).hexdigest()[:32]
    cache = private_dir(private_dir(cache_dir or default_cache_dir(), "the grader's cache folder") / "helpers", "the helpers' cache")
    final = cache / f"replay-{key}"
    if (final / "replay").is_file():
        return final / "replay"
    lock = filelock.FileLock(str(cache / f".replay-{key}.lock"), mode=0o600, thread_local=False)
    with lock.acquire(timeout=BUILD_TIME_LIMIT_S + 10):
        if (final / "replay").is_file():
            return final / "replay"
        work = Path(tempfile.mkdtemp(prefix="replay-", dir=cache))
        try:
            done = subprocess.run([str(nvcc), *flags, "-o", str(work / "replay"), str(SOURCE)], capture_output=True,
                                  text=True, errors="replace", timeout=BUILD_TIME_LIMIT_S, stdin=subprocess.DEVNULL, cwd=work)
            if done.returncode != 0 or not (work / "replay").is_file():
                raise ServiceError(f"the replayer did not build: {(done.stderr or done.stdout).strip()[-500:]}")
            os.rename(work, final)
        except subprocess.TimeoutExpired:
            raise ServiceError(f"building the replayer took over {BUILD_TIME_LIMIT_S:g} s") from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final / "replay"


def built(archs: tuple[str, ...], cache_dir: Path | None = None) -> Path | None:
    """``replayer_binary``, or None where it cannot be built here (the replay that needs it says why)."""
    try:
        return replayer_binary(archs, cache_dir)
    except (ServiceError, GraderError, OSError, filelock.Timeout):
        return None


def planned_passes(binary: Path, metric_sets: list[tuple[str, ...]], chip: str) -> list[int | str]:
    """The replay passes CUPTI plans for each metric set on ``chip`` (``GH100``: H100, H200), or why
    it cannot collect a set. Needs no GPU."""
    text = "".join(" ".join(m) + "\n" for m in metric_sets)
    done = subprocess.run([str(binary), "--plan", chip], input=text, capture_output=True, text=True,
                          timeout=PLAN_TIME_LIMIT_S)
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(metric_sets):
        raise ServiceError(f"the replayer's planner failed: {(done.stderr or done.stdout).strip()[-300:]}")
    return [int(line.split()[1]) if line.startswith("passes ") else line.removeprefix("error ") for line in lines]


class Replayer:
    """The replayer process of one GPU, started at its first task and again after one that ended it.
    ``stage`` is the grader's folder for the tasks' files: the only one the sandbox lets it write."""

    def __init__(self, binary: Path, stage: Path, sandbox: Sandbox, gpu: GpuInfo | None = None) -> None:
        self.binary, self.stage, self.sandbox, self.gpu = binary, stage, sandbox, gpu
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.ready: dict[str, Any] = {}
        self.unavailable = ""
        self._lock = threading.Lock()
        self._tasks = 0
        #: The seconds the last task held the profiling lock (the replay's exclusive time).
        self.profiled_seconds = 0.0
        #: The baselines' cases being replayed ahead of the labs (``collect.replay_baselines_ahead``).
        self.ahead: threading.Thread | None = None

    def warm(self) -> None:
        """Start the process now, ahead of its first task (a CUDA context and CUPTI: about 2 s)."""
        with self._lock:
            self._started()

    def ahead_done(self, wait_s: float) -> None:
        """Wait (at most ``wait_s``) for the baselines' cases being replayed ahead."""
        ahead = self.ahead
        if ahead is not None and ahead is not threading.current_thread():
            ahead.join(wait_s)

    def _started(self) -> str:
        """Start the process where none runs: "" once it runs, else why not.

        Its start asks whether the GPU's counters are free, so it holds the GPU's profiling lock
        (the lock, then the turn): a class seat's replayer started while another seat's profiled
        was told the counters were busy (CUPTI_ERROR_HARDWARE_BUSY), and every student of that
        seat went to Nsight Compute. A start refused so all the same (a profiler outside the grader's
        locks) is tried again at the next task; any other reason stands for the run."""
        if self.proc is not None or self.unavailable:
            return self.unavailable
        try:
            with profiling_lock(START_WAIT_S, lock_folder(self.gpu)), gputurns.step():
                why = self._start()
        except TimeoutError as exc:
            return f"the counter replayer could not start: {exc}"
        if BUSY not in why:
            self.unavailable = why
        return why

    def _start(self) -> str:
        """Start the process: "" once it is ready, else why not (it is ended then)."""
        # Answers come through a pipe of their own: what a student's kernel printfs goes to standard output.
        answers, theirs = os.pipe()
        cmd = self.sandbox.wrap([str(self.binary), "--answers", str(theirs)],
                                read_only=(self.binary.parent, find_cupti().library.parent), writable=(self.stage,), cwd=self.stage)
        try:  # (started from the grader's lasting thread: the sandbox ends a process with the thread that started it)
            self.proc = start_lasting(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      cwd=self.stage, env=confined_env(), start_new_session=True, pass_fds=(theirs,))
        except OSError:
            os.close(answers)
            raise
        finally:
            os.close(theirs)
        self.lines = queue.Queue()
        threading.Thread(target=carried(self._read), args=(os.fdopen(answers, "rb"), self.lines), daemon=True, name="replayer-answers").start()
        first = self._answer(START_TIME_LIMIT_S)
        if first.get("status") == "ready" and isinstance(first.get("chip"), str):
            self.ready = first
            return ""
        self.close(kill=True)
        why = first.get("reason") if first.get("status") == "unavailable" else first.get("problem")
        return f"the counter replayer is unavailable here: {str(why)[:300] or 'it did not start'}"

    @staticmethod
    def _read(pipe: BinaryIO, lines: queue.Queue[bytes | None]) -> None:
        with pipe:
            for line in iter(lambda: pipe.readline(64 << 10), b""):
                lines.put(line)
        lines.put(None)

    def _answer(self, wait_s: float, limit_s: float | None = None) -> dict[str, Any]:
        """The next answer line, or {"problem": why} where none came within ``wait_s`` (what is left
        of the limit ``limit_s``) or it was not JSON."""
        try:
            line = self.lines.get(timeout=wait_s)
        except queue.Empty:
            return {"problem": f"no answer within {wait_s if limit_s is None else limit_s:g} s"}
        if line is None:
            return {"problem": "it ended"}
        try:
            return parse_line(line.decode(errors="replace"))
        except BadAnswer as exc:
            return {"problem": str(exc)}

    def task_folder(self) -> Path:
        """A fresh folder in ``stage`` for one task's files (the caller removes it)."""
        self._tasks += 1
        return Path(tempfile.mkdtemp(prefix=f"task{self._tasks}-", dir=self.stage))

    def run(self, text: str, metrics: Mapping[str, tuple[str, ...]], limit_s: float,
            spent: Spent = spent_nowhere) -> dict[str, CaseResult]:
        """Run one task (``task.task_text``) whose cases profile ``metrics`` (case id -> metrics): a
        result for every case, failed ones with the reason.

        Three steps of GPU work: the replayer prepares the task (module, inputs, buffers), then,
        with the GPU's profiling lock held (the lock first, then the turn, as for a profiler run),
        profiles it, then writes the outputs and answers; only the profiling is exclusive.
        ``spent`` is told the seconds of each phase: ``counters.queue`` (the wait for the
        process: another task's, or its start), ``counters.prepare``, ``counters.lock`` (the wait for
        the profiling lock), ``counters.profile`` and ``counters.finish`` (the outputs and answers)."""
        asked = time.monotonic()
        with self._lock:
            why_not = self._started()
            phase = Phases(spent, asked)
            phase("queue")
            if self.proc is None:
                return {case: CaseResult(case, reason=why_not or "the counter replayer did not start") for case in metrics}
            results: dict[str, CaseResult] = {}
            deadline = time.monotonic() + limit_s
            with gputurns.step():
                # written beside the answers, so that a replayer stuck in a kernel cannot hold the grader past the limit
                self._send(text)
                why = self._answers(results, metrics, "prepared", deadline, limit_s)
            phase("prepare")
            if not why and len(results) < len(metrics):
                with profiling_lock(limit_s, lock_folder(self.gpu)) as waited, gputurns.step():
                    phase("lock")
                    deadline, started = deadline + waited, time.monotonic()  # (the wait is not the task's time)
                    self._send("go\n")
                    why = self._answers(results, metrics, "profiled", deadline, limit_s)
                    self.profiled_seconds = time.monotonic() - started
                    phase("profile")
            elif not why:
                self._send("go\n")  # (nothing left to profile)
            if not why:
                with gputurns.step():
                    why = self._answers(results, metrics, "done", deadline, limit_s)
                phase("finish")
            if why and "loading the cubin" not in why:
                self.close(kill=True)  # (the next task starts a fresh process)
            return {case: results.get(case) or CaseResult(case, reason=f"the replayer stopped: {why or 'no answer'}")
                    for case in metrics}

    def _answers(self, results: dict[str, CaseResult], metrics: Mapping[str, tuple[str, ...]], until: str,
                 deadline: float, limit_s: float) -> str:
        """Read answers into ``results`` until the task's ``until`` status: "" then, or why not."""
        while True:
            answer = self._answer(max(0.0, deadline - time.monotonic()), limit_s)
            if "problem" in answer or answer.get("status") == "fatal":
                return str(answer.get("problem") or answer.get("reason"))[:300]
            if "task" in answer:
                if answer.get("status") == until:
                    return ""
                return str(answer.get("reason") or f"the task {answer.get('status')!r} before it was {until}")[:300]
            try:
                result = case_result(answer, metrics)
            except BadAnswer as exc:
                return f"a malformed answer ({exc})"
            results[result.id] = result

    def _send(self, text: str) -> None:
        threading.Thread(target=carried(self._write), args=(self.proc, text), daemon=True, name="replayer-task").start()

    @staticmethod
    def _write(proc: subprocess.Popen[bytes] | None, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # (a replayer that ended: its answers say so)
            assert proc is not None and proc.stdin is not None
            proc.stdin.write(text.encode())
            proc.stdin.flush()

    def close(self, kill: bool = False) -> None:
        """End the process: asked to quit when idle, killed (with its group) after a task went wrong."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if kill or proc.poll() is not None:
                raise OSError("(no quit)")
            assert proc.stdin is not None
            proc.stdin.write(b"quit\n")
            proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            kill_group(proc.pid)
            proc.wait()
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.close()


_REPLAYERS: dict[str, Replayer] = {}
_REGISTRY = threading.Lock()


def replayer_for(gpu: GpuInfo, archs: tuple[str, ...], sandbox: Sandbox, cache_dir: Path | None = None) -> Replayer:
    """This process's replayer for ``gpu`` (one per GPU, started on its first task)."""
    key = f"{gpu.uuid or gpu.index}|{','.join(archs)}|{sandbox.active}"
    with _REGISTRY:
        if key not in _REPLAYERS:
            stage = Path(tempfile.mkdtemp(prefix="grader-replay-"))
            _REPLAYERS[key] = Replayer(replayer_binary(archs, cache_dir), stage, sandbox, gpu)
        return _REPLAYERS[key]


def close_all() -> None:
    """Stop every replayer of this process and remove their folders."""
    with _REGISTRY:
        for replayer in _REPLAYERS.values():
            replayer.close()
            shutil.rmtree(replayer.stage, ignore_errors=True)
        _REPLAYERS.clear()


atexit.register(close_all)
