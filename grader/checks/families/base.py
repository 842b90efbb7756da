"""What every check family declares (:class:`CheckFamily`), and what a lab hands its families
when their tool runs start (:class:`ToolStart`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Protocol

from ...isolation.options import GradeOptions, Progress
from ...isolation.runner import WorkerSession
from ...isolation.submission import Submission
from ...labspec.spec import LabSpec
from ...outcome import CheckResult, Outcome, Stage

#: One planned check: (id, stage, points).
Planned = tuple[str, Stage, float]


class Runs(Protocol):
    """Where a lab's tool runs go beside its correctness cases (``engine.background.Background``)."""

    def done(self, results: list[CheckResult]) -> None: ...
    def run(self, stage: Stage, batch: Callable[[], list[CheckResult]], ids: tuple[str, ...] = ()) -> None: ...
    def spent(self, name: str, seconds: float) -> None: ...


class Shared(Protocol):
    """A family's tool runs shared by a repository's labs (a ``labbatch.LabBatch``)."""

    def send(self, lab: str, requests: list) -> None: ...  # type: ignore[type-arg]
    def close(self, keep: bool = False) -> None: ...


@dataclass(frozen=True)
class ToolStart:
    """One lab's submission, as its families start their tool runs beside its correctness cases."""

    sub: Submission
    options: GradeOptions
    progress: Progress
    runs: Runs
    shared: Mapping[str, Shared]  # the repository's shared runs, by family name (none for a lab graded alone)
    passed: Callable[[], bool]  # whether every correctness case passed, once they all ran (blocks until then)
    sent: set[str] = field(default_factory=set)  # the families whose runs hold a place in their shared runs
    found: dict[str, object] = field(default_factory=dict)  # what a family's runs leave for the lab's later phases, by name


class CheckFamily(ABC):
    """A family of checks: its part of a lab's plan, its README text, and its tool runs.

    The engine knows a family only through these methods and ``registry.FAMILIES``; adding one
    touches its own module, the registry and the lab's record of its checks."""

    name: ClassVar[str]
    stage: ClassVar[Stage]
    late: ClassVar[bool] = False  # its results join the lab's checks once the timing is scored, not at the gate

    @abstractmethod
    def planned(self, spec: LabSpec) -> list[Planned]:
        """The family's checks of ``spec``, in report order."""

    def unrun(self, spec: LabSpec, done: list[CheckResult], outcome: Outcome, message: str) -> list[CheckResult]:
        """Its planned checks that ``done`` has no result for, each with ``outcome`` and ``message``."""
        have = {c.id for c in done}
        return [CheckResult(cid, stage, outcome, 0.0, pts, message) for cid, stage, pts in self.planned(spec) if cid not in have]

    def course_only(self, spec: LabSpec) -> set[str]:
        """The ids of its checks that need the course's files."""
        return set()

    def gated(self, spec: LabSpec) -> list[str]:
        """The ids of its checks that score only once every correctness case passes (what an
        empty or broken kernel would pass trivially)."""
        return []

    @abstractmethod
    def describe(self, spec: LabSpec) -> list[str]:
        """Its part of the lab README's "How it is graded" (lines; none where the lab has no such check)."""

    def threads(self, spec: LabSpec) -> int:
        """The threads its background runs take beside the correctness cases."""
        return 0

    def shared(self, specs: list[LabSpec], options: GradeOptions) -> Shared | None:
        """Its tool runs shared by a repository's labs ``specs`` (one student's), if it batches them."""
        return None

    def helpers(self, options: GradeOptions) -> list[Callable[[], object]]:
        """The grader's own programs its runs will need, to build beside a batch's submissions (each
        a call that builds one into its cache and never raises for a build that fails: the run
        that needs it reports that)."""
        return []

    def ahead(self, specs: list[LabSpec], options: GradeOptions, progress: Progress) -> None:
        """Once, before a repository's (or a batch's) labs ``specs`` start: trusted work they share."""
        return None  # (none by default)

    def begin(self, spec: LabSpec, options: GradeOptions, shared: Shared | None) -> None:
        """Before the lab compiles."""
        return None  # (none by default)

    def compiled(self, spec: LabSpec, options: GradeOptions, shared: Shared | None) -> None:
        """New code was compiled (not found in the build cache)."""
        return None  # (none by default)

    def prepare(self, tools: ToolStart) -> None:
        """Once the submission is ready to run, before any family starts its runs."""
        return None  # (none by default)

    def start(self, tools: ToolStart) -> None:
        """Start its tool runs, before the correctness cases."""
        return None  # (none by default)

    def on_first_pass(self, tools: ToolStart) -> None:
        """Start what waits for a first passing correctness case."""
        return None  # (none by default)

    def cases_over(self, tools: ToolStart, worker: WorkerSession | None) -> None:
        """The correctness cases are over; ``worker``, the one that ran them, may run its own calls
        now, before it waits for the timing (None: the cases did not end well, nothing more runs in it)."""
        return None  # (none by default)

    # Once the tool runs are over. A family whose results bear on other families' checks says so
    # here, so that the engine never names it.

    def rejudged(self, tools: ToolStart, checks: list[CheckResult]) -> list[CheckResult]:
        """The lab's ``checks`` with any of them judged again from what its runs found (before the
        correctness gate; as they are by default)."""
        return checks

    def explained(self, spec: LabSpec, checks: list[CheckResult], results: list[CheckResult]) -> list[CheckResult]:
        """The lab's ``checks`` with what its own ``results`` (gated) explain about them (after the gate)."""
        return checks

    def timing_stop(self, results: list[CheckResult]) -> str:
        """Why its ``results`` (gated) forbid timing the submission ("" where they do not)."""
        return ""

    def scored_late(self, spec: LabSpec, options: GradeOptions, correct: bool, results: list[CheckResult],
                    reported: list[CheckResult]) -> list[CheckResult]:
        """Where ``late``: its checks to add once the timing is scored (``results``, gated or not,
        and whatever never ran), ``reported`` being what the lab holds by then."""
        return results

    def joined(self, tools: ToolStart | None, timings: dict[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
        """The timings with what its runs measured of each timed kernel."""
        return timings

    def leave(self, tools: ToolStart | None, lab: str, shared: Shared | None) -> None:
        """Tell its shared runs that ``lab`` sends nothing (more), unless its runs hold a place there."""
        if shared is not None and (tools is None or self.name not in tools.sent):
            shared.send(lab, [])
