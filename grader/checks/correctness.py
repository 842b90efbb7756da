"""Correctness cases: inputs from the lab's generator, one worker call per run, outputs compared
with the lab's fp64 oracle in the grader (the worker never sees the expected results)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

import numpy as np

from ..host.safeio import load_npy, replacing
from ..isolation.compilerlog import demangle
from ..isolation.launch import RunDirs
from ..isolation.options import secret_given, secret_seed
from ..isolation.runner import MEMORY_POLL_S, MEMORY_WAIT_S, TaskResult, WorkerSession
from ..isolation.submission import Submission
from ..labspec.spec import Case, CounterCheck, LabSpec, SanitizerCheck
from ..outcome import CheckResult, Outcome, Stage
from ..worker import protocol
from ..worker.protocol import ArgSpec, LauncherSpec, Status, Task, case_task, drop_task, poison_pattern, read_task, share_task, tool_case_task
from . import compare as oracle
from .compare import compare


def launcher_spec(spec: LabSpec) -> LauncherSpec:
    """The launcher as the worker needs it to build buffers and call it."""
    return LauncherSpec(name=spec.launcher.name, args=[
        ArgSpec(name=a.name, role=a.role, dtype=a.dtype or "", shape=list(a.shape), init=a.init, ctype=a.ctype or "",
                value=a.value, host=a.host)
        for a in spec.launcher.args
    ])


def write_inputs(spec: LabSpec, problem: ModuleType, params: Mapping[str, Any], seed: int,
                 folder: Path, cache_dir: Path | None = None, on_disk: bool = True) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Generate a case's inputs into ``folder`` (one only the grader writes): (arrays, .npy paths);
    kept in the run alone unless ``on_disk`` (see :mod:`grader.checks.compare`)."""
    folder.mkdir(parents=True, exist_ok=True)
    inputs = oracle.generated(spec, problem, params, seed, cache_dir, on_disk)
    paths = {}
    for arg in spec.launcher.args:
        if arg.role == "input":
            path = folder / f"{arg.name}.npy"
            with replacing(path) as fh:  # never through a link (the folder may be under --keep-work)
                np.save(fh, inputs[arg.name])
            paths[arg.name] = str(path)
    return inputs, paths


CUDA_ERROR_HINTS = (
    (("InvalidConfiguration", "InvalidValue", "LaunchOutOfResources"),
     "check the launch configuration: at most 1024 threads per block, every grid dimension at least 1, "
     "shared memory within the device's limit"),
    (("IllegalAddress", "MisalignedAddress"), "a kernel read or wrote outside its buffers: check the index arithmetic and bounds"),
)


def failure_from_task(result: TaskResult, cid: str, stage: Stage, points: float) -> CheckResult:
    """A non-ok worker result as a check: errors for crashes, hangs and CUDA errors."""
    if result.status == Status.CUDA_ERROR.value:
        msg = f"CUDA error: {result.reason}"
        for names, hint in CUDA_ERROR_HINTS:
            if any(n in result.reason for n in names):
                msg += f" ({hint})"
                break
    elif result.status == Status.WORKER_ERROR.value:
        msg = "internal grader error while running your code (see the log)"
    elif result.status == Status.OUT_OF_MEMORY.value:
        msg = f"{result.reason}; the next case runs in a fresh process"
    else:
        msg = result.reason
    details = result.reason if result.status == Status.WORKER_ERROR.value else ""
    if result.log_tail:
        details = (details + "\n" if details else "") + "output of your program:\n" + result.log_tail
    return CheckResult(cid, stage, Outcome.ERROR, 0, points, msg, details, {"status": result.status}, result.seconds)


def repeats_summary(wrong_runs: int, runs: int, distinct_answers: int) -> str:
    """How a case run ``runs`` times on the same input went wrong; a race is suggested only when
    the runs disagree (a deterministic bug gives the same wrong answer every time)."""
    if distinct_answers > 1:
        return f"wrong on {wrong_runs} of {runs} runs of the same input, and the runs disagree (a race?)"
    return f"wrong on {wrong_runs} of {runs} runs of the same input, the same answer every time"


def output_limit(want: np.ndarray) -> int:
    """The most an output file of ``want``'s shape may hold (the .npy header included)."""
    return int(want.nbytes) + (64 << 10)


#: Free GPU memory after a call under which the call is asked whether it kept the GPU's memory:
#: this, or 1/64 of the GPU's memory where that is more.
STARVED_BELOW_BYTES = 256 << 20
#: How long an ended worker's memory is waited for, polling every ``MEMORY_POLL_S / 5``.
RELEASE_WAIT_S = 5.0

#: A case killed at its time limit is run once more with this many times the limit (see ``_run_again``).
RETRY_FACTOR = 3.0
#: A call whose kernels ran on shared memory another context had cleared is run again, at most this often.
CLEARED_RERUNS = 3
#: Room after each device buffer of a tool run other than memcheck (``case_tool_task``): a stray
#: store 16 KiB past an output (memory_types' known-wrong ``write_past_end.cu``) lands in it.
STRAY_PAD_BYTES = 1 << 20


class SharingFailed(RuntimeError):
    """The trusted worker could not share or read a case's buffers: the grader's failure."""


def grade_case(sub: Submission, worker: WorkerSession, trusted: WorkerSession, case: Case, folder: str) -> CheckResult:
    """Run a case ``repeat`` times on the same inputs; the first wrong run decides.

    The buffers are the trusted worker's: the student's worker maps them and calls the launcher,
    and the trusted worker reads the outputs, the guard words and the inputs afterwards."""
    spec = sub.spec
    cid = f"correctness[{case.label}]"
    seed = secret_seed(sub.secret, spec.id, cid, case.seed)
    on_disk = secret_given(sub.secret)  # (a run's own secret is never drawn again: its cases stay in the run)
    inputs, paths = write_inputs(spec, sub.problem, case.params, seed, worker.dirs.inbox / folder, sub.cache_dir, on_disk)
    expected = oracle.expected(spec, sub.problem, inputs, case.params, sub.cache_dir, on_disk)
    guard = spec.correctness.guard_elements
    limit = spec.correctness.time_limit_s
    shared = _share(worker, trusted, share_task(launcher_spec(spec), dict(case.params), paths, guard), sub.time_left(limit))
    if shared.status == Status.OUT_OF_MEMORY.value:
        return failure_from_task(shared, cid, Stage.CORRECTNESS, case.points)
    if shared.status != Status.OK.value:
        raise SharingFailed(f"the trusted worker could not make the buffers of {cid}: {shared.reason}")
    share = shared.answer.share
    readings = trusted.dirs.outbox / f"{spec.id}-{folder}-{share}"
    try:
        return _run_case(sub, worker, trusted, case, cid, shared, readings, expected)
    finally:
        for fd in shared.fds:
            os.close(fd)
        trusted.run(drop_task(share), 30.0)
        shutil.rmtree(readings, ignore_errors=True)


def _share(worker: WorkerSession, trusted: WorkerSession, task: Task, limit: float) -> TaskResult:
    """The trusted worker's buffers for a case. Where the GPU's memory is taken, the student's
    worker (if it lives) is ended, and if that gives the memory back, its code held it: the case is
    an error against the submission. Memory another process holds is waited for, as a worker's
    start waits."""
    waited_until = time.monotonic() + MEMORY_WAIT_S
    while True:
        result = trusted.run(task, limit)
        if result.status != Status.OUT_OF_MEMORY.value:
            return result
        if worker.proc is not None and worker.proc.poll() is None:
            held = _memory_kept(worker, trusted, None)
            if held:
                return dataclasses.replace(result, reason=held)
        if time.monotonic() >= waited_until:
            return dataclasses.replace(result, status=Status.WORKER_ERROR.value)
        time.sleep(MEMORY_POLL_S)


def _run_case(sub: Submission, worker: WorkerSession, trusted: WorkerSession, case: Case, cid: str, shared: TaskResult,
              readings: Path, expected: dict[str, np.ndarray]) -> CheckResult:
    spec = sub.spec
    max_err, seconds, wrong_runs = 0.0, 0.0, 0
    first_wrong: tuple[list[str], list[str]] | None = None
    answers: set[str] = set()  # a digest of each run's outputs: do the runs agree?
    launched: set[str] | None = set()
    share = shared.answer.share
    slow_note, reruns = "", 0
    for run in range(case.repeat):
        task = _call_task(sub, case, shared, poison_pattern(cid, run))
        result = worker.run(task, sub.time_left(spec.correctness.time_limit_s), shared.fds)
        if result.status == Status.TIMEOUT.value and not slow_note:
            result, slow_note = _run_again(sub, worker, trusted, task, shared, result, readings / f"{run}-killed")
        for again in range(1, CLEARED_RERUNS + 1):
            if result.status != Status.OK.value or not _ran_on_cleared(result):
                break
            reruns += 1  # the buffers as before the call, and other patterns
            _refill(trusted, shared, readings / f"{run}-cleared{again}", task)
            task = _call_task(sub, case, shared, poison_pattern(cid, run + 1000 * again))
            result = worker.run(task, sub.time_left(spec.correctness.time_limit_s), shared.fds)
        if result.status != Status.OK.value:
            return failure_from_task(result, cid, Stage.CORRECTNESS, case.points)
        names = result.answer.kernels_launched
        if launched is not None and names is not None:
            launched.update(demangle(str(n)) for n in names)
        else:
            launched = None
        seconds += result.seconds
        read = trusted.run(read_task(share, str(readings / str(run)), run + 1 < case.repeat, launcher_spec(spec)), 120.0)
        ok, starved = read.status == Status.OK.value, read.status == Status.OUT_OF_MEMORY.value
        held = _memory_kept(worker, trusted, read.answer.gpu_memory if ok else None) if ok or starved else ""
        if not ok and not held:
            raise SharingFailed(f"the trusted worker could not read the buffers of {cid}: {read.reason}")
        if held:
            taken = dataclasses.replace(result, status=Status.OUT_OF_MEMORY.value, reason=held)
            return failure_from_task(taken, cid, Stage.CORRECTNESS, case.points)
        problems, details = [], []
        digest = hashlib.sha256()
        for name, (before, after) in read.answer.guard_violations.items():
            problems.append(f"wrote outside {name}: {before} bytes changed before it, {after} after it")
        for name in read.answer.inputs_modified:
            problems.append(f"modified its input {name} (inputs must be left unchanged)")
        for out, want in expected.items():
            got = load_npy(readings, f"{run}/{out}.npy", output_limit(want))
            digest.update(np.ascontiguousarray(got).tobytes())
            cmp = compare(out, got, want, spec.tolerance, case.params, spec.correctness.max_mismatches_shown)
            max_err = max(max_err, cmp.max_abs_error)
            if not cmp.ok:
                problems.append(cmp.summary)
                details.append(cmp.details())
        answers.add(digest.hexdigest())
        if problems:
            wrong_runs += 1
            first_wrong = first_wrong or (problems, details)
    measured = {"max_abs_error": max_err, "seconds": round(seconds, 6), "runs": case.repeat, "wrong_runs": wrong_runs,
                "kernels_launched": sorted(launched) if launched is not None else "unknown"}
    if reruns:
        measured["runs_again_on_cleared_shared_memory"] = reruns
    if first_wrong:
        problems, details = first_wrong
        message = "; ".join(problems)
        if case.repeat > 1:
            message = f"{repeats_summary(wrong_runs, case.repeat, len(answers))}; first: {message}"
        return CheckResult(cid, Stage.CORRECTNESS, Outcome.FAIL, 0, case.points, message, "\n".join(details), measured, seconds)
    runs = f", {case.repeat} runs" if case.repeat > 1 else ""
    return CheckResult(
        cid, Stage.CORRECTNESS, Outcome.PASS, case.points, case.points,
        f"correct (largest error {max_err:.2g}{runs}){slow_note}", "", measured, seconds,
    )


def _call_task(sub: Submission, case: Case, shared: TaskResult, pattern: int) -> Task:
    """One call of the launcher on the case's shared buffers, shared memory filled with ``pattern``."""
    return case_task(str(sub.library), launcher_spec(sub.spec), dict(case.params), shared.answer.share,
                     list(shared.answer.buffers or ()), guard=sub.spec.correctness.guard_elements, poison=pattern)


def _ran_on_cleared(result: TaskResult) -> bool:
    """The worker found that a kernel of the call ran on shared memory another context had cleared
    after the grader's fill (``poison.cleared``): what it computed may hide reads of memory it never
    wrote, so the call is run again. (The reply is the student's process's, its count checked with
    the rest of it by ``replies``: at worst it costs a bounded number of calls.)"""
    return result.answer.shared_cleared > 0


def _refill(trusted: WorkerSession, shared: TaskResult, scratch: Path, task: Task) -> None:
    """The case's buffers as before the first call, filled again by the trusted worker whatever
    the last call left (read into ``scratch``), for ``task`` to run again."""
    trusted.run(read_task(shared.answer.share, str(scratch), True, task["launcher"]), 120.0)


def _memory_kept(worker: WorkerSession, trusted: WorkerSession, after: tuple[int, int] | None) -> str:
    """The verdict on a call that kept the GPU's memory ("" for one that did not).

    Where the trusted worker found less than ``STARVED_BELOW_BYTES`` free after the call (``after``:
    [free, total]) or could not allocate at all (``after`` None), the student's worker is ended (the
    next case starts a fresh one): what that gives back was the student's. Memory another process
    holds (another lane's) stays taken and blames no one."""
    free, total = after or _gpu_memory(trusted) or (0, 0)
    low = max(STARVED_BELOW_BYTES, total // 64)
    if not total or (after is not None and free >= low):
        return ""
    worker.kill()
    given_back, waited_until = 0, time.monotonic() + RELEASE_WAIT_S
    while given_back < low and time.monotonic() < waited_until:
        time.sleep(MEMORY_POLL_S / 5)
        given_back = max(given_back, (_gpu_memory(trusted) or (free, total))[0] - free)
    return protocol.memory_taken(given_back, total, free) if given_back >= low else ""


def _gpu_memory(trusted: WorkerSession) -> tuple[int, int] | None:
    """[free, total] bytes of the GPU's memory, as the trusted worker finds it now."""
    now = trusted.run(protocol.memory_task(), 30.0)
    return now.answer.gpu_memory if now.status == Status.OK.value else None


def _run_again(sub: Submission, worker: WorkerSession, trusted: WorkerSession, task: Task, shared: TaskResult,
               killed: TaskResult, scratch: Path) -> tuple[TaskResult, str]:
    """A call killed at the case's limit, run once more with ``RETRY_FACTOR`` times as long (as the
    submission's own limit allows): a busy host never decides the verdict. (its result, a note for
    the verdict where it then finished)."""
    limit = sub.spec.correctness.time_limit_s
    longer = sub.time_left(limit * RETRY_FACTOR)
    if longer <= limit:
        return killed, ""
    _refill(trusted, shared, scratch, task)
    again = worker.run(task, longer, shared.fds)
    if again.status == Status.TIMEOUT.value:
        return dataclasses.replace(again, reason=f"did not finish within {limit:g} s, nor within {longer:g} s when run again, "
                                                 "and was killed (infinite loop or deadlock?)"), ""
    return again, (f"; it took {again.seconds:.1f} s, over the case's limit of {limit:g} s, and was run again with "
                   f"{longer:g} s to finish")


def tool_task(sub: Submission, check: SanitizerCheck | CounterCheck, dirs: RunDirs, library: Path | None = None) -> Task:
    """The one-launch case task a sanitizer or profiler runs (of ``library``, by default the
    student's), its inputs written to the inbox (or, for a check on ``filled`` inputs, made by the worker)."""
    return case_tool_task(sub.spec, sub.problem, check, dirs, library or sub.library, sub.cache_dir)


def case_tool_task(spec: LabSpec, problem: ModuleType, check: SanitizerCheck | CounterCheck, dirs: RunDirs, library: Path,
                   cache_dir: Path | None) -> Task:
    """``tool_task`` of any library of the lab's (a baseline's, profiled ahead of any submission)."""
    launcher = launcher_spec(spec)
    # every tool but memcheck, which must see a store past a buffer, runs with room after each: the
    # store lands there (under synccheck, in the tool's own memory it crashed the process, by layout)
    pad = 0 if isinstance(check, SanitizerCheck) and check.tool == "memcheck" else STRAY_PAD_BYTES
    if isinstance(check, CounterCheck) and check.inputs == "filled":
        return tool_case_task(str(library), launcher, dict(check.params), {}, fill=check.seed, pad=pad)
    _, paths = write_inputs(spec, problem, check.params, check.seed, dirs.inbox, cache_dir)
    return tool_case_task(str(library), launcher, dict(check.params), paths, pad=pad)
