"""One profiler session for a student's counter runs of several labs.

Each run under Nsight Compute pays for the profiler's and the CUDA context's start (about 2 s of
its 2.8 s on an H100), and the runs of one GPU take turns. Grading a repository therefore
profiles the student's case of every lab in one ncu session: one worker runs them in turn, each
announced by a launch of the grader's marker kernel on a grid of a number of blocks drawn for
this session, and ncu's list of kernels (in launch order) is cut at the markers. The labs are one
student's, so nothing of another student's shares the process.

A lab sends its case once its first correctness case passes. The session is stopped once a
lab's later correctness case hangs (its profiled case would hang too). Whatever the session
cannot attribute with certainty (a worker that did not finish or was stopped, markers missing or
out of place, a case left unrun after one that broke the CUDA context) is profiled alone once the
lab's correctness cases have all passed, as a lab graded alone would be; a lab's verdicts never
depend on the session.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import counters
from .correctness import tool_task
from .counters import CaseKey, CounterRun, KernelRow, Profiles, failed_run, judged, kernel_rows, run_profiler
from .gpu import GpuInfo
from .labbatch import LabBatch
from .outcome import CheckResult
from .procgroup import AnyOf, Stop
from .runner import Isolation, RunDirs
from .submission import Submission
from .worker.protocol import MARK_KERNEL, Task, marked_tasks


@dataclass(frozen=True)
class Request:
    """One lab's case to profile: what to run, which metrics, and how the lab runs it alone."""

    lab: str
    key: CaseKey
    metrics: tuple[str, ...]
    task: Task
    isolation: Isolation
    time_limit_s: float
    dirs: RunDirs
    gpu: GpuInfo | None
    stop: Stop  # set once the lab's verdicts no longer need the run (a correctness case hung)


def requests_of(sub: Submission, profiles: Profiles) -> list[Request]:
    """The student's cases of ``sub``'s lab that its counter checks profile (inputs written)."""
    out = []
    for key, metrics in profiles.metrics.items():
        check = next(c for c in sub.spec.counters if c.id == profiles.first[key])
        dirs = sub.tool_dirs(f"ncu-{check.id}")
        out.append(Request(sub.spec.id, key, metrics, tool_task(sub, check, dirs), sub.isolation,
                           sub.time_left(check.time_limit_s), dirs, sub.gpu, sub.moot))
    return out


def marks_for(count: int) -> list[int]:
    """Distinct block counts for the markers, drawn afresh for every session."""
    drawn: list[int] = []
    while len(drawn) < count:
        blocks = 1000 + secrets.randbelow(60000)
        if blocks not in drawn:
            drawn.append(blocks)
    return drawn


def split_at_marks(rows: list[KernelRow], marks: list[int]) -> list[list[KernelRow]] | None:
    """The kernels after each marker (up to the next), or None unless the markers are exactly
    ``marks``, in order, with the first kernel a marker."""
    at = [i for i, row in enumerate(rows) if row.name == MARK_KERNEL]
    if not at or at[0] != 0 or [rows[i].grid for i in at] != [f"({m}, 1, 1)" for m in marks]:
        return None
    ends = [*at[1:], len(rows)]
    return [rows[start + 1:end] for start, end in zip(at, ends)]


def combined(isolations: list[Isolation]) -> Isolation:
    """One confinement that sees every lab's files (the labs are one student's)."""
    first = isolations[0]
    seen: dict[Path, None] = {}
    for iso in isolations:
        seen.update(dict.fromkeys(iso.read_only))
    return Isolation(first.sandbox, read_only=tuple(seen), cupy_cache=first.cupy_cache)


def profile_together(requests: list[Request]) -> dict[tuple[str, CaseKey], CounterRun]:
    """Profile ``requests`` in one session. Returns a run for each request the session settled;
    those missing are to be profiled alone."""
    marks = marks_for(len(requests))
    metrics = tuple(dict.fromkeys(m for r in requests for m in r.metrics))
    task = marked_tasks([r.task for r in requests], marks)
    run, early = run_profiler(task, metrics, requests[0].dirs.sub("session"), max(r.time_limit_s for r in requests),
                              combined([r.isolation for r in requests]), requests[0].gpu, AnyOf(r.stop for r in requests))
    if run is None:  # no profiler, no permission, counters busy: the same for every lab
        return {} if early.error else {(r.lab, r.key): early for r in requests}
    results = (run.result or {}).get("results")
    if run.failure("") or not isinstance(results, list):
        return {}
    parts = split_at_marks(kernel_rows(run.log), marks[:len(results)])
    if parts is None:
        return {}
    out: dict[tuple[str, CaseKey], CounterRun] = {}
    for request, result, rows in zip(requests, results, parts):
        if not isinstance(result, dict):
            continue
        if result.get("status") != "ok":
            settled = failed_run(str(result.get("error", "failed")), run)
        else:
            settled = judged(request.metrics, rows, result, run.log, run.seconds)
        out[(request.lab, request.key)] = dataclasses.replace(settled, session=len(requests))
    return out


class ProfileBatch(LabBatch[Request, CaseKey, CounterRun]):
    """Collects the labs' requests; profiles them together once every lab has sent its own
    (none, for a lab that will not be profiled), then hands each lab its runs."""

    name = "counter-session"

    def _together(self, requests: list[Request]) -> dict[tuple[str, CaseKey], CounterRun]:
        return profile_together(requests)


def counted(sub: Submission, batch: ProfileBatch | None, correct: Callable[[], bool]) -> list[CheckResult]:
    """Every counter check of the lab; checks on one case share a profiler run, and the cases of
    a repository's labs share one session (``batch``) where they can. A case the session did not
    settle is profiled alone only once ``correct()`` says every correctness case passed (else the
    checks are gated: none is returned)."""
    profiles = counters.Profiles(sub.spec.counters)
    if batch is not None:
        batch.send_made(sub.spec.id, lambda: requests_of(sub, profiles))
        for key, run in batch.runs(sub.spec.id).items():
            profiles.settle("student", key, run)
    if any(("student", key) not in profiles.runs for key in profiles.metrics) and not correct():
        return []
    return [counters.grade(sub, check, profiles) for check in sub.spec.counters]
