"""Which of the student's kernels ran, by the profiler's own record.

The compiled-code checks judge only the kernels that ran: a kernel the file defines but never
launches earns nothing. What ran is taken from Nsight Compute's list of the kernels it profiled
in the student's cases profiled in this grade (the lab's counter cases, its timed case profiled for
its DRAM traffic unless that run was kept from an earlier grade, and, for a lab without counter
cases, its last correctness case profiled for the list alone), never from the worker: once the
student's code is loaded there, anything it reports is the student's to write.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from ...labspec.spec import CounterCheck, LabSpec
from . import traffic
from .ncu import NO_KERNEL, CaseKey, CounterRun, Profiles

#: The metric collected where a case is profiled only for its list of kernels: one pass, cheap.
LIST_METRIC = "gpu__time_duration.sum"
LIST_CHECK_ID = "kernels_that_ran"


def list_check(spec: LabSpec) -> CounterCheck | None:
    """The extra profiled case of a lab whose compiled-code checks need a record of what ran but
    whose counter checks profile nothing (None where the counter cases serve, or nothing needs it).
    The timed case's traffic never serves: its run may be kept from an earlier grade, and the record
    is of this grade's runs."""
    if not spec.static or spec.counters or not spec.correctness.cases:
        return None
    case = spec.correctness.cases[-1]
    # the time limit of a counter check: a profiler run pays for ncu's start and may wait its turn on the GPU
    return CounterCheck(id=LIST_CHECK_ID, metric=LIST_METRIC, what="the kernels that ran", params=case.params,
                        seed=case.seed, full=0.0, zero=0.0, points=0.0, kind="at_most")


def profiled(spec: LabSpec, timed: bool = True) -> bool:
    """Whether the lab profiles any case of the student's (``profiles_for`` has one)."""
    return bool(profiles_for(spec, timed).checks)


def profiles_for(spec: LabSpec, timed: bool = True) -> Profiles:
    """The lab's profiler runs: its counter checks' cases, where needed ``list_check``'s, and the
    timed case's DRAM traffic (``traffic.checks``) where it is ``timed``."""
    spec = spec if timed else dataclasses.replace(spec, benchmark=None)
    extra = list_check(spec)
    return Profiles((*spec.counters, *([extra] if extra else []), *traffic.checks(spec)))


@dataclass(frozen=True)
class Record:
    """What the profiler saw the student's cases run: ``names`` (demangled), or why nothing is known."""

    names: frozenset[str] = frozenset()
    unknown: str = ""  # why there is no record ("" when there is one)


def record(runs: Mapping[tuple[str, CaseKey], CounterRun]) -> Record:
    """The kernels of every student case the profiler completed; unknown where none completed."""
    mine = [run for (whose, _), run in runs.items() if whose == "student" and not run.cached]  # (this grade's)
    # a run whose kernels were partly hidden from the profiler still records those it saw
    done = [run for run in mine if not (run.skipped or run.error) or run.error == NO_KERNEL]
    if done:
        return Record(frozenset(name for run in done for name in run.kernels))
    why = next((run.skipped or run.error for run in mine), "")
    return Record(unknown=why or "the profiler did not run")
