"""Lanes: where students are graded, one at a time each. One lane per GPU seat (``--per-gpu``
seats, one by default), in a process of its own that sees only that GPU (``CUDA_VISIBLE_DEVICES``),
holds its seat's lock while it grades, with several seats takes turns with the GPU's other lanes
(their GPU work side by side, each timing alone: :mod:`grader.host.gputurns`) and asks the health
gate before each timing; without a GPU, CPU lanes (threads) grade the checks that need none. A
lane whose process dies records that student's failure and starts afresh.

A lane's process grades with what its parent resolved (``grader.isolation.inherit``): the labs folder the
parent found (``--labs`` among them) and its run secret, handed to the process's initializer, never
found again from the lane's own defaults; its options travel with each job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import multiprocessing
import os
import queue as queues
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, ParamSpec, TypeVar

import psutil

from ..context import carried
from ..engine.rehearsal import rehearse_timings
from ..errors import report_thread_errors
from ..host import gpulock, gputurns, health
from ..host.gpus import GpuSlot, seeing_only
from ..host.procgroup import GONE, ended, kill_tree
from ..isolation import inherit
from ..isolation.options import GradeOptions, usable_cpus
from ..labspec.labs import find_lab
from . import stopping
from .plan import StudentJob
from .student import StudentResult, grade_student

#: How long a lane waits for its student's progress to be sent on before returning the result.
FLUSH_S = 5.0
#: How long an interrupted lane's process has to end before it is killed.
STOP_GRACE_S = 3.0
#: Where lane processes send progress: (lane, student, message).
Events = Callable[[str, str, str], None]


class Lane:
    name = "cpu"

    def run(self, job: StudentJob) -> StudentResult:
        raise NotImplementedError

    def interrupt(self) -> None:
        """Ask the lane to stop at once (the run was interrupted); :meth:`close` then ends it."""

    def close(self, wait: bool = True) -> None:
        pass


class ThreadLane(Lane):
    """Grades in this process (no GPU: compile and compiled-code checks only)."""

    def __init__(self, name: str, options: GradeOptions, events: Events, visibility: str) -> None:
        self.name, self.options, self.events, self.visibility = name, options, events, visibility

    def run(self, job: StudentJob) -> StudentResult:
        sid = job.student.id
        return grade_student(job, self.options, lambda m: self.events(self.name, sid, m), None, self.visibility, self.name)


# ------------------------------------------------------------------ in the lane's own process

_LANE: dict[str, Any] = {}


def blas_threads(lanes: int) -> int:
    """The threads of numpy's BLAS in each of a host's ``lanes`` lane processes: their share of the
    CPUs. Otherwise a lane's oracle (the matmul labs' fp64 products) starts a thread per CPU in
    every lane at once, and those threads spin on after each product. With a class of 24 on four
    H200s (64 CPUs), the lanes' processes spent 746 CPU-s with a thread per CPU each and 245 s with
    one, and a student's lane took 10% less time. A share rather than one thread: the only lane of
    a host keeps every CPU for its products."""
    return max(1, usable_cpus() // max(1, lanes))


def _lane_setup(slot: GpuSlot, queue: Any, health_wait_s: float, inherited: inherit.Inherited, seat: int = 0,
                root: int | None = None, per_gpu: int = 1, lanes: int = 1) -> None:
    from threadpoolctl import threadpool_limits  # (only a lane's process limits its threads)

    threadpool_limits(limits=blas_threads(lanes), user_api="blas")
    folder = gpulock.gpu_folder(slot.key)
    # several students at once on the GPU: their work takes turns with each timing
    inherit.adopt(inherited, gputurns.Turns(folder) if per_gpu > 1 else None)
    report_thread_errors()  # a thread of the lane's that fails says so in one line, not a trace among the progress
    # a stop that reaches the lane (Ctrl-C reaches the whole process group) publishes nothing more
    stopping.install(quiet=True, idle=lambda: not _LANE.get("busy"))
    os.environ.update(seeing_only(slot.index))
    outbox: queues.SimpleQueue[Any] = queues.SimpleQueue()
    threading.Thread(target=carried(_forward), args=(outbox, queue), name="lane-progress", daemon=True).start()
    _LANE.update(slot=slot, seat=seat, name=lane_name(slot, seat), outbox=outbox, folder=folder,
                 gate=health.lane_gate(slot.index, health_wait_s, root))


def _forward(outbox: queues.SimpleQueue[Any], queue: Any) -> None:
    """Send the lane's progress on to the scheduler, in order. The manager's queue answers each
    put over a socket, and on a machine busy with a student's sanitizer runs that answer is slow:
    no grading thread waits for it. An ``Event`` in the outbox is set once all before it are sent."""
    gone = False
    while True:
        item = outbox.get()
        if isinstance(item, threading.Event):
            item.set()
        elif not gone:
            try:
                queue.put(item)
            except Exception:  # the scheduler's manager is gone: progress is only for show
                gone = True


P = ParamSpec("P")
R = TypeVar("R")


def _call(fn: Callable[P, R]) -> Callable[P, R]:
    """A call the lane's process makes for the scheduler. Stopped, the process ends once the call
    has unwound (its student's processes ended): see :func:`stopping.end_now`."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        _LANE["busy"] = True
        try:
            return fn(*args, **kwargs)
        finally:
            _LANE["busy"] = False
            if stopping.requested():
                stopping.end_now(130)

    return call


@_call
def _lane_grade(job: StudentJob, options: GradeOptions, visibility: str) -> StudentResult:
    outbox = _LANE["outbox"]
    sid = job.student.id

    def progress(message: str) -> None:
        outbox.put((_LANE["name"], sid, message))

    try:
        with gpulock.gpu_lock(_LANE["folder"], what=f"grading {sid}", notify=progress, seat=_LANE["seat"]) as waited:
            if waited > 1:
                progress(f"waited {waited:.0f} s for another grader on this GPU")
            gputurns.tell(progress)  # (a long wait for the GPU's turn shows in the class's log)
            return grade_student(job, options, progress, _LANE["gate"], visibility, _LANE["name"])
    finally:
        gputurns.tell(None)
        sent = threading.Event()
        outbox.put(sent)
        sent.wait(FLUSH_S)  # the student's last lines reach the display before its result


@_call
def _lane_rehearse(labs: tuple[str, ...], options: GradeOptions) -> None:
    """Ready the lane's GPU before its first student (see :mod:`grader.engine.rehearsal`), while the
    CPU pool compiles that student."""
    outbox = _LANE["outbox"]
    with gpulock.gpu_lock(_LANE["folder"], seat=_LANE["seat"]):
        rehearse_timings([find_lab(lab) for lab in labs], options, lambda m: outbox.put((_LANE["name"], "", m)))


# ------------------------------------------------------------------ seen from the scheduler


def lane_name(slot: GpuSlot, seat: int) -> str:
    """A lane's name: its GPU's (``gpu0``), and the seat after the first (``gpu0.1``)."""
    return slot.lane if seat == 0 else f"{slot.lane}.{seat}"


class GpuLane(Lane):
    """A process grading one student at a time on one GPU, in ``seat`` of its ``per_gpu`` seats (one
    per student graded at once on it): the grader's processes are those of ``root`` (this process).
    With one seat the lane holds its GPU for each student, as graders sharing a GPU do (give them
    the same ``--per-gpu``); with more, the seats' GPU work takes turns with each timing."""

    def __init__(self, slot: GpuSlot, options: GradeOptions, queue: Any, visibility: str, health_wait_s: float,
                 labs: tuple[str, ...] = (), inherited: inherit.Inherited | None = None, seat: int = 0,
                 per_gpu: int = 1, lanes: int = 1) -> None:
        self.slot, self.options, self.queue, self.visibility = slot, options, queue, visibility
        self.health_wait_s, self.seat, self.per_gpu, self.root = health_wait_s, seat, per_gpu, os.getpid()
        self.lanes = lanes  # (the lanes of the class on this host: they share its CPUs)
        self.inherited = inherited or inherit.capture()  # in this (the parent's) process
        self.name = lane_name(slot, seat)
        self._stopped: float | None = None  # when the lane was interrupted
        self._doomed: list[psutil.Process] = []  # ... and its processes then
        self.pool = self._start()
        # the lane's process starts now and readies its GPU while the first student is compiled
        self.rehearsal: Future[None] | None = self.pool.submit(_lane_rehearse, labs, options) if labs else None

    def _start(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_lane_setup,
                                   initargs=(self.slot, self.queue, self.health_wait_s, self.inherited, self.seat, self.root,
                                             self.per_gpu, self.lanes))

    def _rehearsed(self) -> None:
        """Wait for the rehearsal, which only speeds students up: a lane process it took down is
        started afresh, and its student graded as if there had been none."""
        rehearsal, self.rehearsal = self.rehearsal, None
        try:
            if rehearsal is not None:
                rehearsal.result()
        except BrokenProcessPool:
            self._start_again()
        except Exception:
            pass

    def _refuse_if_stopped(self) -> None:
        """A stopped lane grades no one and starts nothing: its pool would start a process for the
        student, which nothing would end, and a student whose process the stop ended is not failed."""
        if self._stopped is not None:
            raise stopping.Stopped(f"the lane on {self.name} was stopped")

    def _start_again(self) -> None:
        """A fresh process for the lane, in place of one that died (none once the lane was stopped)."""
        self._refuse_if_stopped()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self._start()

    def run(self, job: StudentJob) -> StudentResult:
        self._refuse_if_stopped()
        self._rehearsed()
        try:
            return self.pool.submit(_lane_grade, job, self.options, self.visibility).result()
        except BrokenProcessPool:
            why = "the grading process died (killed, or out of memory) while grading this student"
        except Exception as exc:  # the lane could not run the job at all (it could not be sent, say)
            why = f"the lane on {self.name} failed: {type(exc).__name__}: {exc}"
        self._start_again()
        # (the other commit of a late student is not graded here either: this process grades nothing)
        return grade_student(dataclasses.replace(job, failure=why, ontime=None), self.options, visibility=self.visibility,
                             lane=self.name)

    def _processes(self) -> list[Any]:
        return list(getattr(self.pool, "_processes", {}).values())

    def interrupt(self) -> None:
        """Send the lane's process the stop (SIGTERM: it publishes nothing more)."""
        self._stopped = time.monotonic()
        for proc in self._processes():
            with contextlib.suppress(*GONE):  # (known by its start time too: never another process by its number)
                self._doomed.append(psutil.Process(proc.pid))
            proc.terminate()

    def close(self, wait: bool = True) -> None:
        """Stop the lane's process: after its student (``wait``), or at once (the run was interrupted:
        :meth:`interrupt` first). A process not gone within ``STOP_GRACE_S`` of the stop is killed
        with everything below it: a student's grading can be waiting for a turn on the GPU, or for
        a sanitizer run of a hung kernel, and an interrupted run must end, not wait for them."""
        if wait:
            self.pool.shutdown(wait=True, cancel_futures=True)
            return
        if self._stopped is None:
            self.interrupt()
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = (self._stopped or time.monotonic()) + STOP_GRACE_S
        for proc in self._doomed:  # (watched, not waited for: the pool's own thread reaps them)
            while not ended(proc) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not ended(proc):
                kill_tree(proc)
