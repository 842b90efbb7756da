"""A lab's tool runs beside its correctness cases: the sanitizer and counter runs, each batch in a
thread of its own (they are separate processes), and the seconds each stage took. The progress
says when a stage's runs are all over (in a class, ``lanes.log`` then shows which of a student's
tool runs their timing waited for)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

from ..context import carried
from ..errors import internal_error_message
from ..isolation.options import Progress, no_progress
from ..labspec.spec import LabSpec
from ..outcome import CheckResult, Outcome, Stage
from .plan import planned_checks

#: Seconds spent waiting for the sanitizer and counter runs before timing (not a stage of its own).
WAITING = "waiting_for_tools"

Batch = Callable[[], list[CheckResult]]


class StageClock:
    """Seconds per stage, keyed by :class:`Stage` value (and ``WAITING``, and a stage's phases:
    ``speed.open``, ``counters.profile``, ...)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._guard = threading.Lock()

    def add(self, name: str, seconds: float) -> None:
        """``seconds`` more for ``name`` (from any thread)."""
        with self._guard:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 3)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t0)


class Background:
    """The batches of checks a lab runs in the background, in the order they were started."""

    def __init__(self, spec: LabSpec, clock: StageClock, progress: Progress = no_progress) -> None:
        self.spec, self.clock, self.progress = spec, clock, progress
        self.futures: list[Future[list[CheckResult]]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._stage_start: dict[str, float] = {}
        self._running: dict[str, int] = {}  # batches started and not over, by stage
        self._guard = threading.Lock()

    def open(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"{self.spec.id}-tools")

    def done(self, results: list[CheckResult]) -> None:
        """Results that need no run (a check family turned off), kept in their place."""
        future: Future[list[CheckResult]] = Future()
        future.set_result(results)
        self.futures.append(future)

    def run(self, stage: Stage, batch: Batch, ids: tuple[str, ...] = ()) -> None:
        """Run a batch of checks (of ``stage``; those named by ``ids``, or all) beside the correctness cases."""
        assert self._pool is not None
        with self._guard:
            self._running[stage.value] = self._running.get(stage.value, 0) + 1
        self.futures.append(self._pool.submit(carried(self._guarded), stage, batch, ids))

    def spent(self, name: str, seconds: float) -> None:
        """A phase of a batch's run took ``seconds`` (kept beside the stages: ``counters.profile``)."""
        self.clock.add(name, seconds)

    def _guarded(self, stage: Stage, batch: Batch, ids: tuple[str, ...]) -> list[CheckResult]:
        """``batch()``; a grader bug in it becomes errors on its checks, with an id. The stage's
        seconds run from its first batch's start to its last batch's end."""
        started = self._stage_start.setdefault(stage.value, time.monotonic())
        try:
            return batch()
        except Exception as exc:
            message = internal_error_message(exc)
            return [CheckResult(cid, st, Outcome.ERROR, 0, pts, message) for cid, st, pts in planned_checks(self.spec)
                    if st is stage and (not ids or cid in ids)]
        finally:
            took = round(time.monotonic() - started, 3)
            self.clock.seconds[stage.value] = max(took, self.clock.seconds.get(stage.value, 0.0))
            with self._guard:
                left = self._running[stage.value] = max(0, self._running.get(stage.value, 0) - 1)
                over = not left
            if over:
                self.progress(f"[{self.spec.id}] {stage.value}: every run over after {took:.1f} s")

    def wait(self) -> list[CheckResult]:
        """Block until the background runs are done; their results, in order."""
        out: list[CheckResult] = []
        if self.futures:
            with self.clock.stage(WAITING):
                for future in self.futures:
                    out += future.result()
        return out

    def cancel(self) -> None:
        """Cancel what has not started and wait for what has (idempotent)."""
        if self._pool is not None:
            for future in self.futures:
                future.cancel()
            self._pool.shutdown(wait=True)
            self._pool = None
