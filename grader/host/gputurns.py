"""Several students on one GPU, each timed alone: GPU work takes turns with timings.

A class can grade several students at once on each GPU (``grade-class --per-gpu``). Their GPU
work (a worker's call, a sanitizer or profiler run, a worker's exit) shares the GPU; a timing (a
student's labs opened and timed) has it alone. Two lock files per GPU, in the GPU's lock place
(:func:`grader.host.hostlock.lock_place`), make a readers-writer lock between processes that puts
the timing first:

- a **step** of GPU work passes the turnstile (taken and let go at once) and holds the work lock
  shared for as long as it runs; a process that holds it already (a step of its own in flight)
  starts more steps at once, without the turnstile;
- a **timing** holds the turnstile, so that no new process's step starts, then takes the work lock
  alone once every step in flight has ended. The process that times passes its own steps.
- a timing **waiting** for the turnstile holds a third lock shared, and a process with no step in flight
  waits for that lock to be free before its first step: timings go before new work. Without it, a
  seat that had just timed raced the waiting timing for the turnstile with its next student's
  first step, could win, and the waiting timing then waited out that student's whole GPU work.

A process's steps may wait for one another: a shared sanitizer run of a student's labs is
stopped once a lab's hung case has been run again, and that run is a step. Held at the
turnstile behind a timing that waits for the sanitizer run, it would never start, and the timing
and every step on the GPU would wait for ever (a class of 12 with two seats stalled so on an
H100). So a timing waits until each other process has no step left, which it reaches before its
own timing at the latest.

``flock`` has no timeout: the waits poll, and are bounded (:class:`~grader.host.hostlock.LockTimeout`);
a wait over ``NOTE_S`` is told, every ``NOTE_S``, to whoever the lane named (:func:`tell`: the
student's progress, which the class's ``lanes.log`` keeps).
A step's own time limit starts after its wait, so another student's timing never counts against a
verdict. The turns are the run's (``RunContext.turns``, :mod:`grader.context`): outside a class
lane with several seats there are none, and both are no-ops.

The order of locks: the profiler lock, then a turn (a profiler run takes its turn once it holds
the lock, in ``grader.isolation.toolrun``); nothing waits for the profiler while holding a turn, so a
timing, the steps in flight and the profiler never wait for one another in a circle. The early
profiler session, which holds the lock while it waits for its job, is not used where turns are.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from typing import Callable, Iterator

from ..context import current
from .hostlock import LockPlace, LockTimeout, open_lock_file

__all__ = ["TURNSTILE", "WAITING", "WORK", "Turns", "active", "step", "tell", "timing"]

TURNSTILE = "grader-gpu-turnstile.lock"
WORK = "grader-gpu-work.lock"
#: Held shared by each timing while it waits for the turnstile.
WAITING = "grader-gpu-timings-waiting.lock"
#: The longest a step or a timing waits for its turn.
WAIT_S = 3600.0
POLL_S = (0.002, 0.02)  # the first pause between tries, and the longest
#: How often a long wait for a turn is told.
NOTE_S = 10.0


class Turns:
    """The turns of one GPU's work and timings, as seen from this process."""

    def __init__(self, place: LockPlace, wait_s: float = WAIT_S) -> None:
        self.place, self.wait_s = place, wait_s
        self._mutex = threading.Lock()
        self._steps = 0  # this process's steps in flight
        self._shared: int | None = None  # the work lock, held shared while there are some
        self._timing = False
        self._local = threading.local()  # each thread's depth of steps (a step within a step waits for nothing)
        self.notify: Callable[[str], None] | None = None  # hears of long waits

    def _take(self, name: str, how: int, why: str, unless: Callable[[], bool] = lambda: False) -> int | None:
        """The lock file ``name`` opened and locked ``how`` (polling, bounded): its descriptor; None
        once ``unless()`` holds."""
        fd = open_lock_file(self.place, name)
        started, pause = time.monotonic(), POLL_S[0]
        noted = started
        while True:
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                pass
            except BaseException:
                os.close(fd)
                raise
            if unless():
                os.close(fd)
                return None
            now = time.monotonic()
            if self.notify is not None and now - noted >= NOTE_S:
                noted = now
                self.notify(f"waiting {now - started:.0f} s for {why} on this GPU")
            if now - started >= self.wait_s:
                os.close(fd)
                raise LockTimeout(f"waited {self.wait_s:.0f} s for {why} on this GPU and gave up: a step of GPU work "
                                  "or a timing did not end; stop the grader that holds it", path=self.place.path(name))
            time.sleep(pause)
            pause = min(pause * 2, POLL_S[1])

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Hold the GPU for a step of work, beside other steps; never beside another's timing."""
        depth = getattr(self._local, "depth", 0)
        # this process times (its own steps are part of it: a worker of the last student ending,
        # which the timing waits for), or a step within a step; with steps of its own in flight,
        # the process holds the work lock already and goes on beside them
        def going_on() -> bool:
            return self._timing or self._steps > 0

        turnstile = None
        if not (self._timing or depth):
            waiting = self._take(WAITING, fcntl.LOCK_EX, "the timings waiting to end", unless=going_on)
            if waiting is not None:  # (no timing waits: let go at once)
                os.close(waiting)
            turnstile = self._take(TURNSTILE, fcntl.LOCK_EX, "a timing to end", unless=going_on)
        if turnstile is None and (self._timing or depth):
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth = depth
            return
        try:
            with self._mutex:
                if self._steps == 0:  # no timing holds the work lock where this process holds the turnstile
                    self._shared = self._take(WORK, fcntl.LOCK_SH, "a timing to end")  # (at once then)
                self._steps += 1
        finally:
            if turnstile is not None:
                os.close(turnstile)
        self._local.depth = 1
        try:
            yield
        finally:
            self._local.depth = 0
            with self._mutex:
                self._steps -= 1
                if self._steps == 0 and self._shared is not None:
                    os.close(self._shared)
                    self._shared = None

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Have the GPU alone: no new step starts, and those in flight (this process's too) end first."""
        waiting = self._take(WAITING, fcntl.LOCK_SH, "a turn")  # (at once: only steps take it alone, for an instant)
        assert waiting is not None
        try:
            turnstile = self._take(TURNSTILE, fcntl.LOCK_EX, "another timing to end")
            assert turnstile is not None
        finally:
            os.close(waiting)  # (the turnstile holds new steps back from here)
        try:
            work = self._take(WORK, fcntl.LOCK_EX, "the steps of GPU work in flight to end")
            assert work is not None
            self._timing = True
            try:
                yield
            finally:
                self._timing = False
                os.close(work)
        finally:
            os.close(turnstile)


def tell(notify: Callable[[str], None] | None) -> None:
    """Who hears of this run's long waits for a turn (the student a lane grades), or nobody."""
    turns = current().turns
    if turns is not None:
        turns.notify = notify


def active() -> bool:
    """Whether this run's GPU work takes turns (a class lane's)."""
    return current().turns is not None


def step() -> contextlib.AbstractContextManager[None]:
    """A step of GPU work in this run's turns (a no-op where there are none)."""
    turns = current().turns
    return turns.step() if turns is not None else contextlib.nullcontext()


def timing() -> contextlib.AbstractContextManager[None]:
    """A timing in this run's turns (a no-op where there are none)."""
    turns = current().turns
    return turns.timing() if turns is not None else contextlib.nullcontext()
