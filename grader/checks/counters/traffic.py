"""The DRAM traffic of each timed kernel, measured by Nsight Compute on the timed case: the
roofline's arithmetic intensity.

A lab whose timed case counts FLOPs profiles that case once more (on inputs the worker fills
itself, not the secret timed ones: the traffic does not depend on the values), for the student
in the repository's profiler session (kept for the next grade of the same compiled code:
``counterbatch.kept_file``) and for each timed baseline trusted and cached, collecting
the bytes DRAM read and wrote (ncu flushes the caches before each kernel, so the figure is a
cold run's). Each timed kernel's row then carries ``dram_bytes`` and ``flop_per_dram_byte``; a
kernel whose traffic could not be measured keeps the lab's model of it, and the roofline says
which it shows.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...labspec.spec import CounterCheck, LabSpec, split_metrics
from ...worker import expr
from ..timing import baselines_of
from .ncu import Profiles

METRIC = "dram__bytes_read.sum+dram__bytes_write.sum"
CHECK_ID = "dram_traffic"


def timed_kernels(spec: LabSpec) -> list[str]:
    """The baselines the timed case is run with (the student's kernel is timed beside them)."""
    return baselines_of(spec.benchmark) if spec.benchmark else []


def checks(spec: LabSpec) -> tuple[CounterCheck, ...]:
    """One profiled case per timed baseline, all on the timed case (so the student's run is shared);
    none where the timed case counts no FLOPs."""
    bench = spec.benchmark
    if bench is None or not float(expr.evaluate(bench.flops, bench.params)):
        return ()
    return tuple(CounterCheck(id=f"{CHECK_ID}_{name}", metric=METRIC, what="DRAM bytes read and written", params=bench.params,
                              seed=bench.seed, full=0.0, zero=0.0, points=0.0, kind="at_most", baseline=name,
                              inputs="filled")
                 for name in timed_kernels(spec))


def measured(spec: LabSpec, profiles: Profiles | None) -> dict[str, float]:
    """The DRAM bytes of each timed kernel whose profiled run completed ("student" for the student's)."""
    found = checks(spec)
    if profiles is None or not found:
        return {}
    key = Profiles.case(found[0])
    out = {}
    for whose in ("student", *timed_kernels(spec)):
        run = profiles.runs.get((whose if whose == "student" else f"baseline {whose}", key))
        if run is not None and run.complete:
            total = sum(float(run.values.get(m, 0.0)) for m in split_metrics(METRIC))
            if total > 0:
                out[whose] = total
    return out


def joined(spec: LabSpec, timings: Mapping[str, Mapping[str, Any]], profiles: Profiles | None) -> dict[str, Mapping[str, Any]]:
    """``timings`` with each measured kernel's ``dram_bytes`` and ``flop_per_dram_byte``."""
    bench = spec.benchmark
    traffic = measured(spec, profiles)
    if bench is None or not traffic:
        return dict(timings)
    flops = float(expr.evaluate(bench.flops, bench.params))
    return {name: {**row, "dram_bytes": int(traffic[name]), "flop_per_dram_byte": round(flops / traffic[name], 3)}
            if name in traffic and isinstance(row, Mapping) else row for name, row in timings.items()}
