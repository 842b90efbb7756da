"""Running a class over its lanes: a CPU pool compiles students ahead in roster order (at a
lower CPU priority than grading), and each lane takes the next student as soon as it is free
(waiting for that student's builds only if the pool is behind). Results come back in roster order."""

from __future__ import annotations

import multiprocessing
import os
import queue as queues
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..context import carried
from ..host.gpus import GpuSlot
from ..isolation import inherit
from ..isolation.options import GradeOptions, usable_cpus
from .lanes import GpuLane, Lane, ThreadLane
from .plan import StudentJob
from .prepare import Build, Builder
from .progress import IDLE, Display
from .student import StudentResult


def cpu_jobs(requested: int | None) -> int:
    return max(1, requested or usable_cpus())


#: How much lower the class's compilers run than its grading (nice values): nvcc on every core
#: must not slow down the workers and profilers of the students being graded.
BUILD_NICENESS = 10


def _lower_priority() -> None:
    """Lower this build thread's CPU priority (Linux: per thread, and inherited by what it starts)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BUILD_NICENESS)
    except (OSError, AttributeError):
        pass


class Scheduler:
    def __init__(self, options: GradeOptions, slots: list[GpuSlot], archs: list[tuple[str, ...]], display: Display,
                 jobs: int | None = None, visibility: str = "visible", health_wait_s: float = 60.0, per_gpu: int = 1) -> None:
        self.options, self.slots, self.display, self.per_gpu = options, slots, display, max(1, per_gpu)
        self.jobs = cpu_jobs(jobs)
        self.builder = Builder(options, archs, baselines=bool(slots) and options.gpu)
        self.visibility, self.health_wait_s = visibility, health_wait_s
        self._events: Any = None
        self._manager: Any = None

    def _lanes(self, labs: tuple[str, ...]) -> list[Lane]:
        if self.slots:
            # a queue served by a manager process: a lane process killed in the middle of sending
            # an event (a student's code took it down) cannot leave a lock taken for the next one
            self._manager = multiprocessing.get_context("spawn").Manager()
            self._events = self._manager.Queue()
            inherited = inherit.capture()  # every lane grades with the labs and secret this process resolved
            # seat by seat: the first students go one to each GPU
            count = self.per_gpu * len(self.slots)
            return [GpuLane(slot, self.options, self._events, self.visibility, self.health_wait_s, labs, inherited, seat,
                            self.per_gpu, count) for seat in range(self.per_gpu) for slot in self.slots]
        return [ThreadLane(f"cpu{k}", self.options, self.display.lane, self.visibility) for k in range(self.jobs)]

    def _forward_events(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                lane, student, message = self._events.get(timeout=0.2)
            except queues.Empty:
                continue
            except (EOFError, OSError, ValueError):
                return
            self.display.lane(lane, student, message)

    def run(self, jobs: list[StudentJob], skipped: int = 0) -> list[StudentResult]:
        if not jobs:
            self.display.begin(0, skipped, [])
            return []
        lanes = self._lanes(tuple(dict.fromkeys(lab for job in jobs if job.root is not None for lab in job.labs)))
        self.display.begin(len(jobs), skipped, [lane.name for lane in lanes])
        results: list[StudentResult | None] = [None] * len(jobs)
        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="class-build", initializer=_lower_priority)
        # one task per build, in roster order (the first students' builds come first), each build once
        submitted: dict[Build, Future[None]] = {}
        built: list[list[Future[None]]] = []
        for job in jobs:
            needs = self.builder.tasks(job)
            for key, task in needs.items():
                if key not in submitted:
                    submitted[key] = pool.submit(carried(task))
            built.append([submitted[key] for key in needs])
        order = iter(range(len(jobs)))
        take = threading.Lock()
        stop = threading.Event()
        failures: list[BaseException] = []

        def lane_loop(lane: Lane) -> None:
            while not stop.is_set():
                with take:
                    i = next(order, None)
                if i is None:
                    return
                job = jobs[i]
                for future in built[i]:
                    try:
                        future.result()
                    except Exception:
                        pass  # grading meets the same problem and reports it
                self.display.lane(lane.name, job.student.id, "starting")
                try:
                    results[i] = lane.run(job)
                except BaseException as exc:  # the lane itself broke: stop the class, keep what is done
                    failures.append(exc)
                    stop.set()
                    return
                self.display.lane(lane.name, "", IDLE)
                self.display.finished(results[i])  # type: ignore[arg-type]

        # the forwarder drains the lanes' events until every lane process has exited: a process
        # whose queue still holds events cannot exit before someone reads them
        drained = threading.Event()
        forwarder = threading.Thread(target=carried(self._forward_events), args=(drained,), daemon=True) if self._events else None
        if forwarder:
            forwarder.start()
        threads = [threading.Thread(target=carried(lane_loop), args=(lane,), name=f"lane-{lane.name}", daemon=True) for lane in lanes]
        finished = False
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(timeout=0.5)
            finished = True
        finally:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            if not finished:
                for lane in lanes:  # every lane told at once, then each given what is left of the grace
                    lane.interrupt()
            for lane in lanes:
                lane.close(wait=finished)
            drained.set()
            if forwarder:
                forwarder.join(timeout=2)
            if self._manager is not None:
                self._manager.shutdown()
                self._manager = None
            self.display.close()
        if failures:
            raise failures[0]
        return [r for r in results if r is not None]
