"""The records a lab's grading passes from phase to phase (``engine.grade.LabGrading``): what is
graded (:class:`Lab`), what a repository's labs share (:class:`Together`), the lab's workers
(:class:`Workers`), the timing opened (:class:`Opened`) and sampled (:class:`Timed`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..checks.families.base import Shared
from ..checks.timing import Measurement, TimedRun
from ..isolation.options import GradeOptions, Progress
from ..isolation.runner import WorkerSession
from ..isolation.sandbox import Sandbox
from ..labspec.spec import LabSpec
from ..outcome import CheckResult


@dataclass(frozen=True)
class Lab:
    """What is graded, as what, with what: fixed for the whole grading."""

    whole: LabSpec  # the lab as the course grades it: what the report lists
    spec: LabSpec  # the part of it this copy of the lab can grade (``plan.runnable``)
    source: Path
    name: str  # the file as the student knows it
    options: GradeOptions
    progress: Progress
    sandbox: Sandbox
    deadline: float  # time.monotonic() by which the submission's grading ends


@dataclass(frozen=True)
class Together:
    """What a repository's labs share: each family's shared tool runs (by family name), and whether
    the repository ends the labs' workers itself, together after the last timing."""

    shared: Mapping[str, Shared] = field(default_factory=dict)
    ends_workers: bool = False


@dataclass(frozen=True)
class Workers:
    """The lab's workers: the student's, and the trusted one that owns its buffers and times the baselines."""

    student: WorkerSession
    trusted: WorkerSession
    timed: bool  # the trusted worker times the baselines too

    @property
    def baselines(self) -> WorkerSession | None:
        return self.trusted if self.timed else None


@dataclass(frozen=True)
class Opened:
    """The timing opened (inputs made, libraries loaded, nothing timed): None where nothing is timed."""

    run: TimedRun | None
    held: tuple[CheckResult, ...] = ()  # tool runs' checks scored after the timing (the counters')


@dataclass(frozen=True)
class Timed:
    """The timing sampled, to be scored on the CPU: None where nothing was timed."""

    measurement: Measurement | None
