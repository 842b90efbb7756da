"""The closed set of outcomes and the typed results: of one check, of one kernel's build, of one lab."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping

GATE = "not graded: correctness checks failed (fix those first)"


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"  # the submission ran and missed: wrong answer, threshold missed
    ERROR = "error"  # compile error, crash, timeout, launch error
    SKIPPED = "skipped"  # the check could not run here (no GPU, no counter permission)

    @property
    def symbol(self) -> str:
        return {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skipped": "SKIP"}[self.value]


class Stage(str, enum.Enum):
    COMPILE = "compile"
    STATIC = "static"
    CORRECTNESS = "correctness"
    SANITIZER = "sanitizer"
    SPEED = "speed"
    COUNTERS = "counters"


@dataclass(frozen=True)
class SourceLocation:
    """Where in the student's file a check points (a compile error's first line in that file).

    ``file`` is the path as the student knows it: relative to their repository.
    """

    file: str
    line: int


@dataclass(frozen=True)
class CheckResult:
    """One graded check, as every report renders it."""

    id: str
    stage: Stage
    outcome: Outcome
    points: float
    max_points: float
    message: str
    details: str = ""
    measured: Mapping[str, object] = field(default_factory=dict)
    duration_s: float = 0.0
    location: SourceLocation | None = None

    @property
    def title(self) -> str:
        """The name shown by JUnit viewers: the check and what it is worth (they do not show
        properties). The same whatever was earned, so a test keeps its name from run to run."""
        if not self.max_points:
            return self.id
        return f"{self.id} ({fmt_points(self.max_points)} pts)"


def fmt_points(x: float) -> str:
    return f"{x:g}" if abs(x - round(x, 2)) < 1e-9 else f"{x:.2f}"


def partial_credit(value: float, zero: float, full: float, points: float) -> float:
    """Linear credit: none at or below ``zero``, all at or above ``full``."""
    if full == zero:
        return points if value >= full else 0.0
    frac = (value - zero) / (full - zero)
    return round(points * min(1.0, max(0.0, frac)), 2)


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel."""

    name: str
    registers: int = 0
    barriers: int = 0
    smem_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    cmem_bytes: int = 0


@dataclass(frozen=True)
class LabReport:
    lab: str
    title: str
    submission: str
    checks: tuple[CheckResult, ...]
    environment: Mapping[str, object] = field(default_factory=dict)
    kernels: tuple[KernelResources, ...] = ()
    timings: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    stage_seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return round(sum(c.points for c in self.checks), 2)

    @property
    def max_score(self) -> float:
        return round(sum(c.max_points for c in self.checks), 2)

    @property
    def skipped_points(self) -> float:
        return round(sum(c.max_points for c in self.checks if c.outcome is Outcome.SKIPPED), 2)

    @property
    def course_only_points(self) -> float:
        """Points of the checks a student bundle leaves to the course's runner (part of ``skipped_points``)."""
        return round(sum(c.max_points for c in self.checks
                         if c.outcome is Outcome.SKIPPED and c.measured.get("course_only")), 2)
