"""The student's counter cases recorded by the worker that ran their correctness cases.

A recording worker of its own costs a lab a process, a sandbox and a CUDA context (3 to 5 s on an
H100 while a student's other labs start theirs), on the path to every counter verdict. The lab's
correctness worker has all of that already: once its cases are over, it calls the launcher on
each counter case as a recording worker would (buffers of its own, the support file recording),
and the replay takes those records. The replay asks (:meth:`Recorder.ask`) once the replayer is
up and the cases' inputs are written, or says it will not (:meth:`Recorder.decline`); the lab
serves (:meth:`Recorder.serve`) once its cases are over, waiting for that word (a fast lab's
cases are over first), before the worker waits for the timing. Whatever it did not record (asked
too late, the cases ended badly, a call that failed other than by its time limit) the replay
records in a worker of its own, as before.

The worker is the student's either way: a record is believed only once its replay computes the
case's right answer (``collect``)."""

from __future__ import annotations

import functools
import threading
import time
from typing import Callable

from ....isolation.runner import TaskResult
from ....worker.protocol import Status, Task

#: One asked call: the task and its time limit in seconds.
Asked = tuple[Task, float]
#: How the lab runs one asked call in its correctness worker.
RunOne = Callable[[Task, float], TaskResult]


#: The longest a lab whose cases are over waits for its counters to ask (or to say they will not):
#: they ask once the replayer is up and the cases' inputs are written, seconds after the first pass.
ASK_WAIT_S = 10.0


class Recorder:
    """One lab's hand-off of record tasks, from its counters to its correctness worker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._state = "open"  # open, then asked or declined, then closed
        self._asked: list[Asked] = []
        self._answered = threading.Event()
        self._results: list[TaskResult] = []
        #: When the lab began to serve (its cases over; ``time.monotonic()``), None before.
        self.served_since: float | None = None

    def ask(self, tasks: list[Asked]) -> bool:
        """Ask for ``tasks`` to be run once the cases are over (False: too late, or asked already)."""
        with self._cond:
            if self._state != "open":
                return False
            self._asked, self._state = list(tasks), "asked"
            self._cond.notify_all()
            return True

    def decline(self) -> None:
        """The counters will not ask (nothing to record here, or no replay): the lab need not wait."""
        with self._cond:
            if self._state == "open":
                self._state = "declined"
                self._cond.notify_all()

    def answer(self, timeout_s: float) -> list[TaskResult]:
        """What the asked tasks gave, in order, as far as they ran (the rest were not run): empty
        where none ran or the cases were not over within ``timeout_s``."""
        if not self._answered.wait(max(0.0, timeout_s)):
            return []
        return list(self._results)

    def serve(self, run: RunOne | None, wait_s: float = ASK_WAIT_S) -> None:
        """The cases are over: run what was asked with ``run``, waiting up to ``wait_s`` for the
        ask (None: nothing more may run in the worker), and stop at the first call that does not
        end well. Once; later asks are refused."""
        with self._cond:
            if self._state == "closed":
                return
            if run is not None:
                self._cond.wait_for(lambda: self._state != "open", timeout=max(0.0, wait_s))
            asked = self._asked if self._state == "asked" else []
            self._state = "closed"
            self.served_since = time.monotonic()
        calls = [functools.partial(run, task, limit) for task, limit in asked] if run is not None else []
        results: list[TaskResult] = []
        try:
            for call in calls:
                results.append(result := call())
                if result.status != Status.OK.value:
                    break  # (the worker may be gone: the rest are recorded in one of their own)
        finally:
            self._results = results
            self._answered.set()
