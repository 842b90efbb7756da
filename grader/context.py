"""What one run of the grader shares across all it grades: its :class:`RunContext`.

A run (a command of ``cuda-grader``, a class's GPU lane, a test) makes one context and enters it
(:func:`entered`, or :func:`enter` for the rest of a process the grader started); everything
below reads it through :func:`current`. It holds the six things that are the run's and no single
grading's:

- where the labs are looked for (:class:`LabsSearch`: ``--labs``, the repository graded,
  ``--own-labs``, or the location a parent process found; ``grader.labspec.paths`` does the
  looking, and :class:`LabsLocation` is what it finds);
- the run's secret, which graded inputs are drawn from unless one is given
  (``grader.isolation.options.secret_of``);
- the GPU's turns, where several students share it (a class lane's; ``grader.host.gputurns``);
- how long each lab's timed output took to check, learned from earlier students of the run
  (``grader.engine.repo.scoring_first``);
- the folders kept out of every sandbox, where a class is graded (``grader.isolation.sandbox.kept_out``);
- the oracle's answers too large for the case cache on disk, kept for the run's later grades
  (``grader.checks.compare``: a timed case's answer is 512 MB and 2.4 s of CPU, asked for the
  student's replay and for each baseline's).

A context lives in a ``contextvars.ContextVar``, which a new thread does not inherit: a callable
handed to another thread (``threading.Thread``, an executor's ``submit`` or ``map``) is wrapped in
:func:`carried`, so the thread sees the context of the thread that started it. Outside any
entered context (the grader used as a library) the process's own one is current.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, ParamSpec, Protocol, TypeVar

__all__ = ["GpuTurns", "LabsLocation", "LabsSearch", "Origin", "RunContext", "carried", "current", "enter", "entered"]

#: Where the labs of a grading came from, as reports record it (``identity.labs_origin``).
Origin = Literal["--labs", "GRADER_LABS_DIR", "course checkout", "repository bundle", "lab path given"]
OPTION: Origin = "--labs"
ENV: Origin = "GRADER_LABS_DIR"
CHECKOUT: Origin = "course checkout"
REPOSITORY_BUNDLE: Origin = "repository bundle"
LAB_PATH: Origin = "lab path given"  # a lab.yaml or lab folder named on the command line
#: How each origin is named in messages.
_HOW: dict[Origin, str] = {OPTION: "--labs", ENV: "GRADER_LABS_DIR", CHECKOUT: "the course repository",
                           REPOSITORY_BUNDLE: "the repository's student bundle", LAB_PATH: "a lab named by its path"}


@dataclass(frozen=True)
class LabsLocation:
    """Where the labs were found, and every place looked at."""

    path: Path | None  # None: no labs anywhere
    looked: tuple[str, ...]  # every place tried, for the "no labs found" error
    origin: Origin | None = None  # None: no labs found

    @property
    def how(self) -> str:
        """How the labs were found, for messages."""
        return _HOW[self.origin] if self.origin is not None else ""

    @property
    def from_repository(self) -> bool:
        """The labs are a repository's own bundle: the student's files, not the course's."""
        return self.origin == REPOSITORY_BUNDLE


@dataclass(frozen=True)
class LabsSearch:
    """Where a run looks for its labs (``grader.labspec.paths.locate_labs`` looks)."""

    chosen: Path | None = None  # --labs: grade with the labs there and nowhere else
    repo: Path | None = None  # the repository graded: its bundle is looked for before the current folder's
    own: bool = False  # --own-labs: the user says the repository's bundle is theirs (its problem.py may run as them)
    pinned: LabsLocation | None = None  # a process the grader started: where its parent found them, whatever else


class GpuTurns(Protocol):
    """A GPU's turns of work and timings (``grader.host.gputurns.Turns``)."""

    notify: Callable[[str], None] | None  # hears of long waits for a turn

    def step(self) -> contextlib.AbstractContextManager[None]: ...

    def timing(self) -> contextlib.AbstractContextManager[None]: ...


def new_secret() -> str:
    """A secret of the run's own: graded inputs come from it unless one is given; never written where
    the worker can read."""
    return os.urandom(16).hex()


@dataclass(frozen=True)
class RunContext:
    """One run's shared state; its fields are fixed once entered (``scoring_s`` is the run's to fill)."""

    labs: LabsSearch = LabsSearch()
    secret: str = field(default_factory=new_secret)  # handed to the processes the run starts
    turns: GpuTurns | None = None  # None: the run's GPU work takes no turns (outside a class lane with seats)
    scoring_s: dict[str, float] = field(default_factory=dict, compare=False)  # lab -> seconds its timed output took to check
    kept_out: tuple[str, ...] = ()  # folders kept out of every sandbox the run starts (a class's students; ``sandbox.kept_out``)
    answers: dict[str, Mapping[str, Any]] = field(default_factory=dict, compare=False)  # key -> large oracle answer (``compare``)


_PROCESS = RunContext()  # current where none is entered: the grader used as a library
_CURRENT: contextvars.ContextVar[RunContext] = contextvars.ContextVar("grader_run_context", default=_PROCESS)


def current() -> RunContext:
    """The context of the run this thread works for."""
    return _CURRENT.get()


@contextlib.contextmanager
def entered(run: RunContext) -> Iterator[RunContext]:
    """``run`` is current in this thread (and the threads it hands :func:`carried` callables) until the block ends."""
    token = _CURRENT.set(run)
    try:
        yield run
    finally:
        _CURRENT.reset(token)


def enter(run: RunContext) -> None:
    """``run`` is current in this thread from now on: a process the grader started (a class's lane),
    before it grades anything."""
    _CURRENT.set(run)


P = ParamSpec("P")
R = TypeVar("R")


def carried(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, to call in another thread: it runs in the context current here, now."""
    run = current()

    @functools.wraps(fn)
    def in_run(*args: P.args, **kwargs: P.kwargs) -> R:
        with entered(run):
            return fn(*args, **kwargs)

    return in_run
