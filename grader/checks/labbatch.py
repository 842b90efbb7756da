"""Runs shared by a student's labs: each lab sends what it needs run, and once every lab has sent
its own (none, for a lab that needs nothing), one thread runs them together and hands each lab
the results settled for it. What the shared run does not settle, the lab runs alone."""

from __future__ import annotations

import threading
from typing import Callable, Generic, Hashable, Iterable, Mapping, Protocol, TypeVar

from ..context import carried


class LabRequest(Protocol):
    @property
    def lab(self) -> str: ...


R = TypeVar("R", bound=LabRequest)
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LabBatch(Generic[R, K, V]):
    """Collects the labs' requests and runs them with ``_together`` (once at least two labs sent
    some), which returns results keyed by (lab, key)."""

    name = "lab-batch"

    def __init__(self, labs: Iterable[str]) -> None:
        self._open = set(labs)
        self._requests: list[R] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._results: dict[tuple[str, K], V] = {}
        self._failure: BaseException | None = None
        if not self._open:
            self._done.set()

    def _together(self, requests: list[R]) -> dict[tuple[str, K], V]:
        raise NotImplementedError

    def _alone(self) -> None:
        """Called instead of ``_together`` where fewer than two labs sent requests."""

    def waiting_for(self) -> set[str]:
        """The labs that have not sent their requests yet."""
        with self._lock:
            return set(self._open)

    def send(self, lab: str, requests: list[R]) -> None:
        """``lab``'s requests (only its first call counts)."""
        with self._lock:
            if lab not in self._open:
                return
            self._open.discard(lab)
            self._requests += requests
            last = not self._open
        if last:
            if len({r.lab for r in self._requests}) < 2:
                self._alone()
                self._done.set()  # one lab: it runs as it would alone
            else:
                threading.Thread(target=carried(self._run), name=self.name, daemon=True).start()

    def close(self, keep: bool = False) -> None:
        """End what the shared runs hold beyond their labs' runs (nothing, unless a subclass says so)."""
        return None

    def send_made(self, lab: str, make: Callable[[], list[R]]) -> None:
        """``lab``'s requests as ``make()`` returns them; none where it raises (raised on, once sent)."""
        requests: list[R] = []
        try:
            requests = make()
        finally:
            self.send(lab, requests)

    def _run(self) -> None:
        try:
            self._results = self._together(sorted(self._requests, key=lambda r: r.lab))
        except BaseException as exc:  # raised to every lab that asks for its results
            self._failure = exc
        finally:
            self._done.set()

    def runs(self, lab: str) -> Mapping[K, V]:
        """``lab``'s results that the shared run settled (blocks until it ran)."""
        self._done.wait()
        if self._failure is not None:
            raise self._failure
        return {key: run for (name, key), run in self._results.items() if name == lab}
