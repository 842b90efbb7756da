"""Timing statistics and the stopping rule (shared by the worker that samples and the parent)."""

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
