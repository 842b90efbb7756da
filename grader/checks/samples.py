"""The statistics of timed samples: their summary, when to stop sampling, when a pass cannot
settle, the floor the grader's own clock puts under a reported time, and a far-too-slow sample.
Pure functions of the numbers: the sampling itself is ``timing``'s."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class TimingStats:
    n: int
    median_ms: float
    min_ms: float
    mean_ms: float
    cv: float  # coefficient of variation (stdev / mean)
    rse: float  # relative standard error of the mean
    median_wall_ms: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "n": self.n,
            "median_ms": round(self.median_ms, 6),
            "min_ms": round(self.min_ms, 6),
            "cv_pct": round(self.cv * 100, 3),
            "median_wall_ms": round(self.median_wall_ms, 6),
        }


def summarize(samples_ms: list[float], wall_ms: list[float] | None = None) -> TimingStats:
    if not samples_ms:
        raise ValueError("no samples")
    n = len(samples_ms)
    mean = statistics.fmean(samples_ms)
    sd = statistics.stdev(samples_ms) if n > 1 else 0.0
    cv = sd / mean if mean > 0 else math.inf
    return TimingStats(
        n=n,
        median_ms=statistics.median(samples_ms),
        min_ms=min(samples_ms),
        mean_ms=mean,
        cv=cv,
        rse=cv / math.sqrt(n) if n > 1 else math.inf,
        median_wall_ms=statistics.median(wall_ms) if wall_ms else 0.0,
    )


def should_stop(
    samples: dict[str, list[float]],
    elapsed_s: float,
    *,
    min_samples: int,
    max_samples: int,
    target_rse: float,
    budget_s: float,
) -> bool:
    """Stop when every kernel has enough samples and a small enough standard error, or time is up."""
    counts = [len(s) for s in samples.values()]
    if min(counts) >= max_samples:
        return True
    if min(counts) < min_samples:
        # past four budgets, settle for what there is: a pathologically slow kernel must not stall
        return elapsed_s > 4 * budget_s and min(counts) >= 3
    if elapsed_s >= budget_s:
        return True
    return all(summarize(s).rse <= target_rse for s in samples.values())


#: Margin on :func:`cannot_settle`: a pass is given up only where even this much more than the
#: limit would stay out of reach.
SETTLE_MARGIN = 1.25


def cannot_settle(samples: dict[str, list[float]], *, min_samples: int, max_samples: int, max_cv: float) -> bool:
    """Whether a pass is sure to end above ``max_cv`` for some kernel, however it goes on: its
    samples so far spread so far (a GPU disturbed for a moment) that even ``max_samples`` of
    them, every one added at the mean, would leave the CV above the limit (with a margin). A
    stdev's squared deviations only grow with more samples, so its CV can at best fall as
    sqrt((n - 1) / (max_samples - 1))."""
    for series in samples.values():
        n = len(series)
        if n < min_samples or n < 2 or n >= max_samples:
            continue
        if summarize(series).cv * math.sqrt((n - 1) / (max_samples - 1)) > max_cv * SETTLE_MARGIN:
            return True
    return False


# A sample whose wall-clock time (call to device-wide synchronize) exceeds its event time by more
# than this was not finished on the legacy stream when the launcher returned: it is timed by the
# wall clock instead (work on another stream, or deferred, still counts).
WALL_SLACK = 1.25
WALL_MARGIN_MS = 0.05
#: Slack on top of the trusted baselines' largest call overhead before a student's sample is bounded.
ROUND_TRIP_SLACK_MS = 0.25
#: ... and this fraction of the round trip: a call that waits tens of ms for the GPU wakes its
#: worker later than the baselines' short calls do (H100: a 62 ms kernel's round trip exceeded its
#: event time by more than the short calls' overhead plus 0.25 ms in 7 of 10 calls).
ROUND_TRIP_SLACK_FRACTION = 0.02
#: A student sample this many times slower than the slowest baseline's slowest sample ends the
#: sampling: the speed checks are scored from what was taken (a kernel that prints from every
#: thread can take seconds per call, and more samples would not change its score).
TOO_SLOW_FACTOR = 50.0
#: A sample that looks disturbed (its work finished after the launcher returned, or its round trip
#: far longer than the time it reports) is taken again up to this many times before it stands. A
#: stall of the host (a driver lock held while another GPU's process starts, seen on a host of four
#: H200s) disturbs one call and not the next; a launcher that defers its work, or a forged time,
#: disturbs every call, and its last try is bounded as before.
RETAKES = 3


def round_trip_allowance(trusted: list[tuple[list[float], list[float]]]) -> float | None:
    """How much of a call's round trip may be overhead (messages, dispatch): the trusted workers'
    largest (``trusted``: their walls and round trips, ms), plus slack; None before any call."""
    overheads = [trip - wall for walls, ts in trusted for wall, trip in zip(walls, ts)]
    return max(overheads) + ROUND_TRIP_SLACK_MS if overheads else None


def round_trip_floor(trip: float, allowance: float) -> float:
    """The least time a call with this round trip may report (see :func:`round_trip_allowance`)."""
    return trip * (1 - ROUND_TRIP_SLACK_FRACTION) - allowance


def bound_by_round_trips(samples: list[float], trips: list[float], trusted: list[tuple[list[float], list[float]]]) -> int:
    """Raise each of the student's reported times to at least what the grader's own clock allows.

    The student's worker reports its times and could forge them; the grader timed the round
    trip of every call. A trusted worker's calls show how much of a round trip is overhead
    (messages, dispatch): the student's time is at least its round trip less that overhead
    (its largest, plus slack, plus a fraction of the round trip). Returns how many samples were raised."""
    allowance = round_trip_allowance(trusted)
    if allowance is None:
        return 0
    raised = 0
    for i, (reported, trip) in enumerate(zip(samples, trips)):
        floor = round_trip_floor(trip, allowance)
        if reported < floor:
            samples[i] = floor
            raised += 1
    return raised


def far_too_slow(student_ms: float, baseline_samples: list[list[float]]) -> bool:
    """Whether a student sample is so slow that sampling stops (see ``TOO_SLOW_FACTOR``)."""
    slowest = max((max(s) for s in baseline_samples if s), default=0.0)
    return slowest > 0 and student_ms > TOO_SLOW_FACTOR * slowest
