"""Where a student's profiler session goes: the profiled cases of a repository of the five
references, run under Nsight Compute as a grade runs them, then again with fewer metrics and split
by what they measure.

    python benchmarks/profiler_cost.py [--rounds 2]

A grade profiles all of a student's cases in one session: the counter checks' cases (small
inputs) and each timed case's DRAM traffic (the timed inputs), every kernel with the union of
every lab's metrics, each case after a marker kernel. Nsight Compute replays a kernel once per
group of metrics it can count together, so the union's cost falls on every kernel, markers
included. The GPU's profiler is one at a time, and the timing needs the GPU to itself, so a
student's session plus their timing is what one GPU cannot share: this figure bounds a class.

The repository is graded once to build it and profile the baselines, then again with every tool
run again; during that grade the student's session is run ``--rounds`` times in each arrangement:

- every case, every lab's metrics (as graded);
- every case, one metric (``gpu__time_duration.sum``): what the session costs before metrics
  (the profiler's and the worker's start, the context, the inputs, a minimal replay per kernel);
- the counter checks' cases alone, their metrics;
- the timed cases alone, every lab's metrics; and with the DRAM bytes only.

Prints each arrangement's seconds (min and max over the rounds) and the kernels profiled.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.grade_repo_speed import solutions_repo  # noqa: E402
from grader.checks.counters import batch as counterbatch  # noqa: E402
from grader.checks.counters import traffic  # noqa: E402
from grader.checks.counters.batch import Request  # noqa: E402
from grader.checks.counters.ncu import kernel_rows, run_profiler  # noqa: E402
from grader.checks.families import counters as counter_family  # noqa: E402
from grader.engine import repo as repo_module  # noqa: E402
from grader.host.gpus import nvml_devices, visible  # noqa: E402
from grader.isolation.options import GradeOptions  # noqa: E402
from grader.labspec.spec import split_metrics  # noqa: E402
from grader.worker.protocol import marked_tasks  # noqa: E402

ONE_METRIC = ("gpu__time_duration.sum",)
DRAM = tuple(split_metrics(traffic.METRIC))


def split_by_traffic(requests: Sequence[Request]) -> tuple[list[Request], list[Request]]:
    """The counter checks' cases, and the timed cases profiled for their DRAM traffic only."""
    timed = [r for r in requests if set(r.metrics) <= set(DRAM)]
    return [r for r in requests if r not in timed], timed


def arrangements(requests: Sequence[Request]) -> list[tuple[str, list[Request], tuple[str, ...]]]:
    counted, timed = split_by_traffic(requests)
    union = counterbatch.metrics_of(list(requests))
    out = [("every case, every lab's metrics", list(requests), union),
           ("every case, one metric", list(requests), ONE_METRIC)]
    if counted:
        out.append(("counter cases, their metrics", counted, counterbatch.metrics_of(counted)))
    if timed:
        out += [("timed cases, every lab's metrics", timed, union), ("timed cases, DRAM bytes only", timed, DRAM)]
    return out


def session_seconds(requests: list[Request], metrics: tuple[str, ...], name: str) -> tuple[float, int]:
    """One session of ``requests`` collecting ``metrics``: its seconds and the kernels profiled."""
    marks = counterbatch.marks_for(len(requests))
    first = requests[0]
    started = time.monotonic()
    run, early = run_profiler(marked_tasks([r.task for r in requests], marks), metrics, first.dirs.sub(name),
                              max(r.time_limit_s for r in requests), counterbatch.combined([r.isolation for r in requests]),
                              first.gpu)
    seconds = time.monotonic() - started
    if run is None or run.returncode != 0:
        raise SystemExit(f"the session '{name}' did not complete: {early.error or early.skipped or run and run.log[-300:]}")
    return seconds, len(kernel_rows(run.log))


def measure(requests: list[Request], rounds: int) -> None:
    print(f"a student's session: {len(requests)} cases, {len(counterbatch.metrics_of(requests))} metrics in all")
    for i, (label, chosen, metrics) in enumerate(arrangements(requests)):
        seconds, kernels = [], 0
        for r in range(rounds):
            s, kernels = session_seconds(chosen, metrics, f"cost{i}-{r}")
            seconds.append(s)
        print(f"{label:<34} {len(chosen):2d} cases, {len(metrics):2d} metrics, {kernels:2d} kernels: "
              f"{min(seconds):5.2f}-{max(seconds):5.2f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="sessions per arrangement (default 2)")
    args = p.parse_args()
    if not visible(nvml_devices(), os.environ.get("CUDA_VISIBLE_DEVICES")):
        print("needs a CUDA GPU: NVML lists none (no driver, or CUDA_VISIBLE_DEVICES hides them all)")
        return 1
    repo = solutions_repo("reference", "profiler-cost-")
    cache = Path(tempfile.mkdtemp(prefix="profiler-cost-cache-"))
    os.environ["GRADER_CACHE_DIR"] = str(cache)
    # Nsight Compute's path: the replayer (the default) runs no profiler session
    options = GradeOptions(cache_dir=cache, sanitizers=False, reuse_tool_runs=False, counter_source="ncu")
    t0 = time.monotonic()
    repo_module.grade_repo(repo, options)
    print(f"built and profiled the baselines in {time.monotonic() - t0:.1f} s")
    # the session's cases as a list: a grade hands them to the batch's session (not the one started
    # ahead, which gets them through a pipe); each arrangement runs them again before the grade's own
    counter_family.early_profiler = lambda specs, options: None
    together, seen = counterbatch.profile_together, list[bool]()

    def measured_first(requests: list[Request]):  # type: ignore[no-untyped-def]
        if not seen:
            seen.append(True)
            measure(requests, args.rounds)
        return together(requests)

    counterbatch.profile_together = measured_first
    repo_module.grade_repo(repo, options)
    if not seen:
        print("the grade profiled no session of several cases: nothing measured")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
