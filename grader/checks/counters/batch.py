"""One profiler session for a student's counter runs of several labs.

Each run under Nsight Compute pays for the profiler's and the CUDA context's start (about 2 s of
its 2.8 s on an H100), and the runs of one GPU take turns. Grading a repository therefore
profiles the student's case of every lab in one ncu session: one worker runs them in turn, each
announced by a launch of the grader's marker kernel on a grid of a number of blocks drawn for
this session, and ncu's list of kernels (in launch order) is cut at the markers. The labs are one
student's, so nothing of another student's shares the process.

A lab sends its case once its first correctness case passes. The session is stopped once a
lab's later correctness case hangs (its profiled case would hang too). Whatever the session
cannot attribute with certainty (a worker that did not finish or was stopped, markers missing or
out of place, a case left unrun after one that broke the CUDA context) is profiled alone once the
lab's correctness cases have all passed, as a lab graded alone would be; a lab's verdicts never
depend on the session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import secrets
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ...context import carried
from ...host.gpu import GpuInfo
from ...host.procgroup import AnyOf, Stop
from ...isolation.launch import Isolation, RunDirs
from ...isolation.submission import Submission
from ...isolation.toolrun import ToolRun
from ...outcome import CheckResult
from ...worker.protocol import MARK_KERNEL, Status, Task, marked_tasks
from ..correctness import tool_task
from ..labbatch import LabBatch
from . import ncu as counters
from .ncu import CaseKey, CounterRun, KernelRow, Profiles, failed_run, judged, kernel_rows, run_profiler


@dataclass(frozen=True)
class Request:
    """One lab's case to profile: what to run, which metrics, and how the lab runs it alone."""

    lab: str
    key: CaseKey
    metrics: tuple[str, ...]
    task: Task
    isolation: Isolation
    time_limit_s: float
    dirs: RunDirs
    gpu: GpuInfo | None
    stop: Stop  # set once the lab's verdicts no longer need the run (a correctness case hung)


def requests_of(sub: Submission, profiles: Profiles, staged: Path | None = None) -> list[Request]:
    """The student's cases of ``sub``'s lab that its counter checks profile (inputs written).
    With ``staged`` (a folder an early session sees), the inputs and a copy of the library are
    written there."""
    out = []
    library, isolation = sub.library, sub.isolation
    if staged is not None:
        staged.mkdir(parents=True)
        library = staged / "student.so"
        shutil.copyfile(sub.library, library)
        isolation = dataclasses.replace(isolation, read_only=(*isolation.read_only, staged))
    for key, metrics in profiles.metrics.items():
        if ("student", key) in profiles.runs:  # (kept from an earlier grade)
            continue
        check = next(c for c in profiles.checks if c.id == profiles.first[key])
        dirs = sub.tool_dirs(f"ncu-{check.id}")
        if staged is not None:
            dirs = RunDirs(staged / f"ncu-{check.id}", dirs.outbox)
        out.append(Request(sub.spec.id, key, metrics, tool_task(sub, check, dirs, library), isolation,
                           sub.time_left(check.time_limit_s), dirs, sub.gpu, sub.moot))
    return out


def marks_for(count: int) -> list[int]:
    """Distinct block counts for the markers, drawn afresh for every session."""
    drawn: list[int] = []
    while len(drawn) < count:
        blocks = 1000 + secrets.randbelow(60000)
        if blocks not in drawn:
            drawn.append(blocks)
    return drawn


def split_at_marks(rows: list[KernelRow], marks: list[int]) -> list[list[KernelRow]] | None:
    """The kernels after each marker (up to the next), or None unless the markers are exactly
    ``marks``, in order, with the first kernel a marker."""
    at = [i for i, row in enumerate(rows) if row.name == MARK_KERNEL]
    if not at or at[0] != 0 or [rows[i].grid for i in at] != [f"({m}, 1, 1)" for m in marks]:
        return None
    ends = [*at[1:], len(rows)]
    return [rows[start + 1:end] for start, end in zip(at, ends)]


def combined(isolations: list[Isolation]) -> Isolation:
    """One confinement that sees every lab's files (the labs are one student's, or all the grader's own)."""
    first = isolations[0]
    seen: dict[Path, None] = {}
    for iso in isolations:
        seen.update(dict.fromkeys(iso.read_only))
    return Isolation(first.sandbox, trusted=all(iso.trusted for iso in isolations), read_only=tuple(seen), cupy_cache=first.cupy_cache)


def profile_together(requests: list[Request]) -> dict[tuple[str, CaseKey], CounterRun]:
    """Profile ``requests`` in one session. Returns a run for each request the session settled;
    those missing are to be profiled alone."""
    marks = marks_for(len(requests))
    task = marked_tasks([r.task for r in requests], marks)
    run, early = run_profiler(task, metrics_of(requests), requests[0].dirs.sub("session"), max(r.time_limit_s for r in requests),
                              combined([r.isolation for r in requests]), requests[0].gpu, AnyOf(r.stop for r in requests))
    if run is None:  # no profiler, no permission, counters busy: the same for every lab
        return {} if early.error else {(r.lab, r.key): early for r in requests}
    return settled(requests, marks, run)


def metrics_of(requests: list[Request]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m for r in requests for m in r.metrics))


def settled(requests: list[Request], marks: list[int], run: ToolRun, early: bool = False) -> dict[tuple[str, CaseKey], CounterRun]:
    """What a completed session's run settled, per request (those missing are profiled alone)."""
    results = run.result.results if run.result is not None else None
    if run.failure("") or results is None:
        return {}
    parts = split_at_marks(kernel_rows(run.log), marks[:len(results)])
    if parts is None:
        return {}
    out: dict[tuple[str, CaseKey], CounterRun] = {}
    for request, result, rows in zip(requests, results, parts):
        if result.status != Status.OK:
            done = failed_run(result.error if result.error is not None else "failed", run)
        else:
            done = judged(request.metrics, rows, result.kernels_launched, run.log, run.seconds)
        out[(request.lab, request.key)] = dataclasses.replace(done, session=len(requests), early=early)
    return out


#: Measures what it can of the student's cases in a lab's profiles instead of the profiler (``grader/checks/counters/replay/collect.py``).
Replay = Callable[[Submission, counters.Profiles], dict[tuple[str, CaseKey], CounterRun]]

#: The most a job sent to an early session may hold: one write to its pipe, which never blocks.
JOB_PIPE_BYTES = 60_000


class EarlySession:
    """A profiler session started before its cases are known: ncu, the interpreter, CuPy and the
    CUDA context start (about 2 s on an H100) beside the correctness cases. It starts once a lab
    has compiled whose cases were not all kept from an earlier grade (:meth:`start`): a regrade
    of unchanged code starts no profiler at all. The labs write their
    cases under ``staged`` (a folder its sandbox sees), and the job comes through a pipe once
    every lab has sent its own. A session that never ran (no profiler, counters busy, a worker
    that did not start) leaves the labs to a session started then, as before. It holds the
    profiler lock while it waits for its job, so it is not used where GPU work takes turns with
    timings (:mod:`grader.host.gputurns`)."""

    def __init__(self, root: Path, metrics: tuple[str, ...], isolation: Isolation, gpu: GpuInfo | None, limit_s: float) -> None:
        self.root, self.staged, self.metrics = root, root / "staged", metrics
        self.staged.mkdir(parents=True)
        isolation = dataclasses.replace(isolation, read_only=(*isolation.read_only, self.staged))
        self._job_r, self._job_w = os.pipe()
        self._stops: list[Stop] = []
        self._cancelled = threading.Event()
        self._lock = threading.Lock()  # the job's pipe: written, or closed, once
        self._deadline = math.inf
        self._outcome: tuple[ToolRun | None, CounterRun] = (None, CounterRun(error="not run"))
        self._thread = threading.Thread(target=carried(self._run), args=(RunDirs(root / "grader", root / "runs"), isolation, gpu, limit_s),
                                        name="counter-session", daemon=True)
        self._started = False

    def start(self) -> None:
        """Start the session (once): a lab has compiled whose cases were not kept from an earlier grade."""
        with self._lock:
            if not self._started and not self._cancelled.is_set():
                self._started = True
                self._thread.start()

    def is_set(self) -> bool:
        """The run's stop: cancelled, past the cases' limit, or a lab's case hung."""
        return self._cancelled.is_set() or time.monotonic() > self._deadline or any(s.is_set() for s in self._stops)

    def _run(self, dirs: RunDirs, isolation: Isolation, gpu: GpuInfo | None, limit_s: float) -> None:
        try:
            self._outcome = run_profiler(self._job_r, self.metrics, dirs, limit_s, isolation, gpu, self)
        finally:  # the pipe's read end is the session's (the run passed a copy on): closed here, once
            self._drop_reader()

    def _drop_reader(self) -> None:
        """Close the job pipe's read end, once."""
        with self._lock:
            fd, self._job_r = self._job_r, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def run(self, requests: list[Request]) -> dict[tuple[str, CaseKey], CounterRun] | None:
        """Send the session its job and wait: what it settled, or None where it never ran (or was
        never started)."""
        if not self._started:
            self.close(keep=True)
            return None
        marks = marks_for(len(requests))
        job = json.dumps(marked_tasks([r.task for r in requests], marks)).encode()
        self._stops = [r.stop for r in requests]
        self._deadline = time.monotonic() + max(r.time_limit_s for r in requests)
        sent = False
        with self._lock:
            if self._job_w >= 0 and set(metrics_of(requests)) <= set(self.metrics) and len(job) <= JOB_PIPE_BYTES:
                with contextlib.suppress(OSError):  # a worker that did not start has closed the pipe
                    sent = os.write(self._job_w, job) == len(job)
        self._close_job(cancel=not sent)
        self._thread.join()
        run, early = self._outcome
        if run is not None:
            return settled(requests, marks, run, early=True)
        return {} if sent and early.error else None  # stopped or timed out on its cases: as a session started then

    def _close_job(self, cancel: bool) -> None:
        if cancel:
            self._cancelled.set()
        with self._lock:
            if self._job_w >= 0:
                os.close(self._job_w)
                self._job_w = -1

    def close(self, keep: bool = False) -> None:
        """Stop the session if it is still waiting for its job, and remove its folder (unless ``keep``)."""
        self._close_job(cancel=True)
        with self._lock:
            started = self._started
        if started:
            self._thread.join()
        else:
            self._drop_reader()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


class ProfileBatch(LabBatch[Request, CaseKey, CounterRun]):
    """Collects the labs' requests; profiles them together once every lab has sent its own
    (none, for a lab that will not be profiled), then hands each lab its runs. With ``early``,
    in a session already started."""

    name = "counter-session"

    def __init__(self, labs: Iterable[str], early: EarlySession | None = None) -> None:
        super().__init__(labs)
        self.early = early

    def wake(self) -> None:
        """A lab has cases to profile: start the early session, if there is one."""
        if self.early is not None:
            self.early.start()

    def staged(self, lab: str) -> Path | None:
        """Where ``lab`` writes its cases for the early session (None: where it would alone)."""
        return self.early.staged / lab if self.early is not None else None

    def _together(self, requests: list[Request]) -> dict[tuple[str, CaseKey], CounterRun]:
        done = self.early.run(requests) if self.early is not None else None
        return profile_together(requests) if done is None else done

    def _alone(self) -> None:
        self.close(keep=True)

    def close(self, keep: bool = False) -> None:
        """End the early session, if there is one (``keep``: its files stay)."""
        if self.early is not None:
            self.early.close(keep=keep)


def counted(sub: Submission, batch: ProfileBatch | None, correct: Callable[[], bool],
            profiles: counters.Profiles | None = None, reuse: bool = True, replay: Replay | None = None) -> list[CheckResult]:
    """Every counter check of the lab; checks on one case share a profiler run, and the cases of
    a repository's labs share one session (``batch``) where they can. A case the session did not
    settle is profiled alone only once ``correct()`` says every correctness case passed (else the
    checks are gated: none is returned). ``profiles`` (default: the counter checks' cases) may
    hold more cases, profiled alike and left in it (``launched.record``). A case kept from an
    earlier grade of the same code (``kept_file``) is not profiled again, unless not ``reuse``;
    with ``replay`` (``--counters replay``), the cases it measures (the student's, and the
    baselines' not kept yet) are not profiled either."""
    profiles = profiles or counters.Profiles(sub.spec.counters)
    kept = {key: path for key in profiles.metrics if (path := kept_file(sub, profiles, key)) is not None}
    for key, path in kept.items() if reuse else ():
        if (run := counters.cached(path)) is not None and (replay is not None or not run.replayed):  # (ncu asked: its own runs)
            profiles.settle("student", key, run)
    for (whose, key), run in (replay(sub, profiles) if replay is not None else {}).items():
        profiles.settle(whose, key, run)
    if batch is not None:
        batch.send_made(sub.spec.id, lambda: requests_of(sub, profiles, batch.staged(sub.spec.id)))
        for key, run in batch.runs(sub.spec.id).items():
            profiles.settle("student", key, run)
    if any(("student", key) not in profiles.runs for key in profiles.metrics) and not correct():
        return []
    graded = [counters.grade(sub, check, profiles) for check in sub.spec.counters]
    for check in profiles.checks:  # a case no counter check grades (``launched``, ``traffic``) is profiled too
        if check not in sub.spec.counters:
            counters.student_run(sub, check, profiles)
            if check.baseline:
                counters.baseline_run(sub, check, profiles)
    for key, path in kept.items():
        run = profiles.runs.get(("student", key))
        if run is not None and not run.cached:  # (the replayer's runs too: the same code gives the same counts)
            with contextlib.suppress(OSError):  # (kept only to spare the next grade the run)
                counters.store(path, run, profiles.metrics[key])
    return graded


def all_kept(sub: Submission, profiles: counters.Profiles) -> bool:
    """Whether every case in ``profiles`` was kept from an earlier grade of the same code."""
    return all((path := kept_file(sub, profiles, key)) is not None and counters.cached(path) is not None
               for key in profiles.metrics)


def kept_file(sub: Submission, profiles: counters.Profiles, key: CaseKey) -> Path | None:
    """Where the student's run of case ``key`` is kept between grades of the same compiled code on
    the same GPU and driver. A case's inputs are made from the lab's public seed (or filled by the
    worker), never from the run's secret: the same library, problem and case give the same
    kernels and counts, so a regrade of unchanged code profiles nothing again. The checks are
    still judged at each grade (thresholds may have changed), and gated on this grade's
    correctness. None without a GPU."""
    checks = [c for c in profiles.checks if profiles.case(c) == key]
    if not checks or sub.gpu is None:
        return None
    key_text = "student|" + counters.baseline_key(sub.gpu, profiles.metrics[key], checks[0], sub.spec)  # (never a baseline's entry)
    return counters.cache_path(key_text, sub.cache_dir, sub.library)
