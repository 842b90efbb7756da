"""The student's counter cases recorded by the worker that ran their correctness cases.

A recording worker of its own costs a lab a process, a sandbox and a CUDA context (3 to 5 s on an
H100 while a student's other labs start theirs), on the path to every counter verdict. The lab's
correctness worker has all of that already: once its cases are over, it calls the launcher on
each counter case as a recording worker would (buffers of its own, the support file recording),
and the replay takes those records. The replay asks (:meth:`Recorder.ask`) when the counters
start; the lab serves (:meth:`Recorder.serve`) once its cases are over, before the worker waits
for the timing. Whatever it did not record (asked too late, the cases ended badly, a call that
failed other than by its time limit) the replay records in a worker of its own, as before.

The worker is the student's either way: a record is believed only once its replay computes the
case's right answer (``collect``)."""

from __future__ import annotations

import functools
import threading
from typing import Callable

from ....isolation.runner import TaskResult
from ....worker.protocol import Status, Task

#: One asked call: the task and its time limit in seconds.
Asked = tuple[Task, float]
#: How the lab runs one asked call in its correctness worker.
RunOne = Callable[[Task, float], TaskResult]


class Recorder:
    """One lab's hand-off of record tasks, from its counters to its correctness worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: list[Asked] | None = None
        self._closed = False
        self._answered = threading.Event()
        self._results: list[TaskResult] | None = None

    def ask(self, tasks: list[Asked]) -> bool:
        """Ask for ``tasks`` to be run once the cases are over (False: they are over already)."""
        with self._lock:
            if self._closed or self._asked is not None:
                return False
            self._asked = list(tasks)
            return True

    def answer(self, timeout_s: float) -> list[TaskResult]:
        """What the asked tasks gave, in order, as far as they ran (the rest were not run): empty
        where none ran or the cases were not over within ``timeout_s``."""
        if not self._answered.wait(max(0.0, timeout_s)):
            return []
        return list(self._results or ())

    def serve(self, run: RunOne | None) -> None:
        """The cases are over: run what was asked with ``run`` (None: nothing more may run in the
        worker), stopping at the first call that does not end well. Once; later asks are refused."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            asked = self._asked
        calls = [functools.partial(run, task, limit) for task, limit in asked or []] if run is not None else []
        results: list[TaskResult] = []
        try:
            for call in calls:
                results.append(result := call())
                if result.status != Status.OK.value:
                    break  # (the worker may be gone: the rest are recorded in one of their own)
        finally:
            self._results = results
            self._answered.set()
