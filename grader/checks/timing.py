"""Timing: the statistics, the stopping rule and :class:`TimedRun`, which drives the student's
worker and the trusted baselines' worker sample by sample, interleaved."""

from __future__ import annotations

import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..context import carried
from ..host.gpu import key_of
from ..host.procgroup import TEARDOWNS
from ..isolation.build import baseline_library
from ..isolation.options import secret_seed
from ..isolation.replies import Reply
from ..isolation.runner import TaskResult, WorkerSession
from ..isolation.submission import Submission
from ..labspec.paths import problem_to_import
from ..labspec.spec import Benchmark, LabSpec, Timing
from ..worker.protocol import Status, Task, timing_close, timing_open, timing_prepare, timing_sample
from .correctness import launcher_spec
from .samples import (
    RETAKES,
    WALL_MARGIN_MS,
    WALL_SLACK,
    bound_by_round_trips,
    cannot_settle,
    far_too_slow,
    round_trip_allowance,
    round_trip_floor,
    should_stop,
    summarize,
)

#: Where the trusted worker saves the last timed call's inputs and outputs (in its outbox).
CLOSING_FOLDER = "timing"


class _FarTooSlow(Exception):
    pass


class _Ungated(Exception):
    """A timing gate did not hold (it expired, or the worker has none): the samples so far were
    not all taken the same way."""


class SampleFailed(Exception):
    """A timing task failed in ``who``'s worker (a baseline's, or "student")."""

    def __init__(self, who: str, result: TaskResult):
        super().__init__(result.reason)
        self.who, self.result = who, result


@dataclass
class Measurement:
    """Samples per kernel ("student" and each baseline), in ms, and what the trusted worker read
    of the student's buffers at the end (``closing``: the last call's outputs and inputs)."""

    samples: dict[str, list[float]]
    walls: dict[str, list[float]]
    trips: dict[str, list[float]]  # the grader's round trip of each timed call
    device: dict[str, Any] = field(default_factory=dict)
    closing: Reply | None = None
    #: the last timed call's inputs and outputs as the trusted worker saved them: (its folder,
    #: file names of the inputs by name)
    inputs: tuple[Path, dict[str, str]] | None = None
    by_wall: int = 0  # student samples timed by the wall clock
    by_clock: int = 0  # student samples raised to the grader's round trip
    retaken: dict[str, int] = field(default_factory=dict)  # samples taken again, per kernel (see ``RETAKES``)
    noisy: list[str] = field(default_factory=list)
    stopped_early: bool = False  # the student's kernel was far too slow to sample further
    gated: bool = True  # every call was timed behind a timing gate (see worker.sampling.Gate)
    gate_note: str = ""  # why not: what the call that found no gate held said ("expired", ...)
    phase_s: dict[str, float] = field(default_factory=dict)  # "open", "sampling", "close": where the time went
    #: of the sampling: "refill" (fresh inputs and a flushed L2 before each call, warm-up
    #: included), "calls" (the timed calls' round trips)
    split_s: dict[str, float] = field(default_factory=lambda: {"refill": 0.0, "calls": 0.0})


def timing_seed(spec: LabSpec, secret: str) -> int:
    """The seed of a lab's timed inputs (secret where the course sets one)."""
    assert spec.benchmark is not None
    return secret_seed(secret, spec.id, "timing", spec.benchmark.seed)


def opening(spec: LabSpec, libraries: dict[str, str], seed: int, copy: bool) -> Task:
    """The task that opens a timing session of ``spec`` over ``libraries`` (name -> path)."""
    assert spec.benchmark is not None
    problem = str(problem_to_import(spec.files.problem))  # the trusted worker imports it
    return timing_open(libraries, launcher_spec(spec), dict(spec.benchmark.params), problem, seed, copy)


def in_session(spec: LabSpec, task: Task) -> Task:
    """``task`` for the lab's own timing session: the baselines' worker keeps one per lab."""
    return {**task, "session": spec.id}


def baselines_of(bench: Benchmark) -> list[str]:
    return sorted({c.baseline for c in bench.checks})


def baselines_opening(spec: LabSpec, archs: tuple[str, ...], cache_dir: Path | None, secret: str) -> Task:
    """The task that opens ``spec``'s baselines' timing session (building them if need be): the
    same task for every student of a process, so their worker keeps the session open between them."""
    assert spec.benchmark is not None
    libs = {b: str(baseline_library(spec, b, archs, cache_dir)) for b in baselines_of(spec.benchmark)}
    return in_session(spec, opening(spec, libs, timing_seed(spec, secret), True))


def inputs_only(spec: LabSpec, secret: str) -> Task:
    """A session of ``spec``'s timing without a library: its inputs generated and compared, so the
    kernels that does are compiled before any library is built."""
    return in_session(spec, opening(spec, {}, timing_seed(spec, secret), True))


def rehearse(spec: LabSpec, archs: tuple[str, ...], cache_dir: Path | None, secret: str, worker: WorkerSession) -> None:
    """Open ``spec``'s baselines' session in ``worker`` and call each baseline once, untimed: the
    CuPy kernels that generating, flushing and comparing need are compiled now, into the trusted
    kernel cache, and the session stays open for the first student. Raises SampleFailed."""
    bench = spec.benchmark
    assert bench is not None
    tasks = [baselines_opening(spec, archs, cache_dir, secret)]
    tasks += [in_session(spec, t) for b in baselines_of(bench) for t in (timing_prepare(b), timing_sample(b, False))]
    for task in tasks:
        result = worker.run(task, bench.time_limit_s)
        if result.status != Status.OK.value:
            raise SampleFailed("baselines", result)


class TimedRun:
    """One lab's timing against its baselines, in two halves: ``open()`` readies both workers
    (inputs generated, libraries loaded: nothing timed), ``sample()`` times them interleaved,
    sample by sample, until the stopping rule is met. Both raise SampleFailed. A repository's
    labs are all opened at once, then sampled in turn."""

    def __init__(self, sub: Submission, worker: WorkerSession, baselines_worker: WorkerSession) -> None:
        spec = sub.spec
        assert spec.benchmark is not None
        self.sub, self.worker, self.bench = sub, worker, spec.benchmark
        self.trusted = baselines_worker
        self.baselines = baselines_of(self.bench)
        self.owner = {**{b: baselines_worker for b in self.baselines}, "student": worker}
        self.names = [*self.baselines, "student"]
        self.m = Measurement({n: [] for n in self.names}, {n: [] for n in self.names}, {n: [] for n in self.names},
                             retaken={n: 0 for n in self.names})
        self.gpu = key_of(sub.gpu)  # a GPU's timings take turns
        self.open_s = 0.0
        #: the trusted worker's session that owns the student's buffers (refilled and read there)
        self.shared_session = f"{spec.id}/student-{secrets.token_hex(6)}"
        self.shared_open = False

    def _call(self, who: str, task: Task, fds: tuple[int, ...] = ()) -> TaskResult:
        result = self.owner[who].run(in_session(self.sub.spec, task), self.sub.time_left(self.bench.time_limit_s), fds)
        if result.status != Status.OK.value:
            raise SampleFailed(who, result)
        return result

    def _shared(self, task: Task) -> TaskResult:
        """A task of the trusted worker's session of the student's buffers. Its failures are the
        student's where they are its doing (the GPU's memory taken); otherwise the grader's."""
        result = self.trusted.run({**task, "session": self.shared_session}, self.sub.time_left(self.bench.time_limit_s))
        if result.status != Status.OK.value:
            raise SampleFailed("student" if result.status == Status.OUT_OF_MEMORY.value else "buffers", result)
        return result

    def _opened(self, who: str, task: Task, fds: tuple[int, ...] = ()) -> TaskResult:
        try:
            return self._call(who, task, fds)
        except SampleFailed as failed:
            if failed.result.status != Status.OUT_OF_MEMORY.value:
                raise
            TEARDOWNS.wait(self.gpu)  # the previous repository's workers, still ending, held the memory
            return self._call(who, task, fds)

    def open(self) -> None:
        """The trusted worker makes the student's buffers, then both workers set up at once
        (nothing is timed yet), while earlier workers may still be ending."""
        sub, spec = self.sub, self.sub.spec
        started = time.monotonic()
        seed = timing_seed(spec, sub.secret)
        export: Task = {**opening(spec, {}, seed, False), "export": True}
        try:
            buffers = self._shared(export)
        except SampleFailed as failed:
            if failed.result.status != Status.OUT_OF_MEMORY.value:
                raise
            TEARDOWNS.wait(self.gpu)  # the previous repository's workers, still ending, held the memory
            buffers = self._shared(export)
        self.shared_open = True
        try:
            student = opening(spec, {"student": str(sub.library)}, seed, False)
            student["share"], student["buffers"] = buffers.answer.share, list(buffers.answer.buffers or ())
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="timing-open") as pool:
                student_open = pool.submit(carried(self._opened), "student", student, buffers.fds)
                self.m.device = self._opened(self.baselines[0], baselines_opening(spec, sub.archs, sub.cache_dir, sub.secret)).answer.device
                student_open.result()
        except BaseException:
            self.release()
            raise
        finally:
            for fd in buffers.fds:
                os.close(fd)
        self.open_s = time.monotonic() - started

    def release(self) -> None:
        """Free the student's buffers in the trusted worker, if the close has not."""
        if self.shared_open:
            self.shared_open = False
            self.trusted.run({**timing_close(""), "session": self.shared_session}, 30.0)

    def sample(self) -> Measurement:
        """Time the opened workers once every worker being ended on the GPU is gone."""
        m = self.m
        marks = [time.monotonic()]  # the start and end of each phase
        TEARDOWNS.wait(self.gpu)
        marks.append(time.monotonic())
        try:
            try:
                try:
                    _sample(m, self.names, self._take, self.bench.timing)
                except _Ungated:
                    _sample(m, self.names, self._take, self.bench.timing)  # from the start, every kernel timed the same way
            except _FarTooSlow:
                m.stopped_early = True
            marks.append(time.monotonic())
            self._call("student", timing_close(""))
            # what the last call ran on and left, read by the trusted worker that owns the buffers,
            # into a folder of this run's own: the worker serves every submission graded on this GPU
            folder = self.trusted.dirs.outbox / f"{CLOSING_FOLDER}-{self.sub.spec.id}-{secrets.token_hex(6)}"
            self.shared_open = False
            m.closing = self._shared(timing_close(str(folder))).answer
            m.inputs = (folder, {str(k): str(v) for k, v in m.closing.check_inputs.items()})
        finally:
            self.release()
        marks.append(time.monotonic())
        m.phase_s = {name: round(end - begin, 3) for name, begin, end in zip(("open", "sampling", "close"), marks, marks[1:])}
        m.phase_s["open"] = round(m.phase_s["open"] + self.open_s, 3)
        m.phase_s.update({f"sampling.{k}": round(v, 3) for k, v in m.split_s.items()})
        m.by_clock = bound_by_round_trips(m.samples["student"], m.trips["student"],
                                          [(m.walls[b], m.trips[b]) for b in self.baselines])
        return m

    def _take(self, n: str, gated: bool) -> None:
        """One sample of ``n``; a gated one that looks disturbed is taken again (see ``RETAKES``)."""
        m = self.m
        for attempt in range(RETAKES + 1):
            reported, late, wall, trip = self._call_timed(n, gated)
            too_slow = n == "student" and far_too_slow(reported, [m.samples[b] for b in self.baselines])
            if too_slow or not gated or attempt == RETAKES or not self._disturbed(n, reported, late, trip):
                break
            m.retaken[n] += 1
        m.samples[n].append(reported)
        m.walls[n].append(wall)
        m.trips[n].append(trip)
        m.by_wall += late and n == "student"
        if too_slow:
            raise _FarTooSlow

    def _call_timed(self, n: str, gated: bool) -> tuple[float, bool, float, float]:
        """One timed call of ``n``: its time (by the wall clock where it ran late), whether it did,
        its wall time and the grader's round trip, in ms."""
        m = self.m
        began = time.monotonic()
        if n == "student":
            self._shared(timing_prepare(n))  # fresh inputs in the student's buffers, by the trusted worker
        self._call(n, timing_prepare(n))
        prepared = time.monotonic()
        result = self._call(n, timing_sample(n, m.gated and gated))
        m.split_s["refill"] += prepared - began
        m.split_s["calls"] += time.monotonic() - prepared
        data = result.answer
        if m.gated and gated and data.gate != "held":
            # the gate expired (the launcher waited for the GPU) or there is none: no gate, for every kernel
            m.gated = False
            m.gate_note = data.gate[:300]  # the student's worker says it: bounded
            raise _Ungated
        late = data.wall_ms > data.ms * WALL_SLACK + WALL_MARGIN_MS
        return (data.wall_ms if late else data.ms), late, data.wall_ms, result.seconds * 1e3

    def _disturbed(self, n: str, reported: float, late: bool, trip: float) -> bool:
        """Whether a sample ran late, or (the student's) reports less than its round trip allows
        by the baselines' calls so far."""
        if late or n != "student":
            return late
        allowance = round_trip_allowance([(self.m.walls[b], self.m.trips[b]) for b in self.baselines])
        return allowance is not None and reported < round_trip_floor(trip, allowance)


def measure(sub: Submission, worker: WorkerSession, baselines_worker: WorkerSession) -> Measurement:
    """Open and sample one lab's timing (see :class:`TimedRun`); raises SampleFailed."""
    run = TimedRun(sub, worker, baselines_worker)
    run.open()
    return run.sample()


def _sample(m: Measurement, names: list[str], take: Callable[[str, bool], None], cfg: Timing) -> None:
    """Warm up, then sample every kernel in turn until the stopping rule is met (again once if
    noisy; a first pass that :func:`cannot_settle` is measured again at once).

    Each kernel's first call is taken without the gate: it loads the library's kernels, and
    loading a module waits for the GPU to be idle, which a held gate would not let it be."""
    for n in names:  # warm up
        t_end = time.monotonic() + cfg.warmup_s
        take(n, False)
        while time.monotonic() < t_end:
            take(n, True)
    for again in (True, False):  # measured again once if too noisy
        for n in names:
            for series in (m.samples, m.walls, m.trips):
                series[n].clear()
            m.retaken[n] = 0
        m.by_wall = 0
        t_start = time.monotonic()
        while not should_stop(m.samples, time.monotonic() - t_start, min_samples=cfg.min_samples,
                              max_samples=cfg.max_samples, target_rse=cfg.target_rse, budget_s=cfg.budget_s):
            if again and cannot_settle(m.samples, min_samples=cfg.min_samples, max_samples=cfg.max_samples, max_cv=cfg.max_cv):
                break  # noisy whatever comes: measured again now, not after the rest of the budget
            for n in names:
                take(n, True)
        m.noisy = [n for n in names if summarize(m.samples[n]).cv > cfg.max_cv]
        if not m.noisy:
            break
