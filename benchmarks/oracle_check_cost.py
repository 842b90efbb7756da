"""What checking a timed output costs the grader's own process (CPU only, no GPU needed).

    python benchmarks/oracle_check_cost.py [--labs memory_types tiled_matmul] [--repeat 3]

For each lab's timed case (the largest case a student's grade checks: the last timed call's
output, and the roofline replay's): its inputs drawn, the fp64 oracle's answer, and the output's
comparison with it (an output within the tolerance, a few elements wrong, as a float32 kernel
gives). Prints the best and the median of ``--repeat`` rounds of each, in seconds, and the CPUs
the grader may use.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from grader.checks.compare import compare  # noqa: E402
from grader.isolation.options import usable_cpus  # noqa: E402
from grader.labspec.labs import find_lab, lab_ids, load_problem  # noqa: E402


def timed(repeat: int, fn: Callable[..., Any], *args: Any) -> tuple[Any, list[float]]:
    seconds, value = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn(*args)
        seconds.append(time.perf_counter() - started)
    return value, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", nargs="*", default=None, help="lab ids (default: every lab with a timed case)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{usable_cpus()} CPUs; best / median of {args.repeat} rounds, seconds")
    print(f"{'lab':16s} {'output':28s} {'inputs':>13s} {'oracle':>13s} {'compare':>13s}")
    for lab in args.labs or lab_ids():
        spec = find_lab(lab)
        if spec.benchmark is None:
            continue
        problem, params = load_problem(spec), dict(spec.benchmark.params)
        inputs, drawn = timed(args.repeat, problem.generate, params, spec.benchmark.seed, np)
        want, answered = timed(args.repeat, problem.expected, inputs, params)
        compared: list[float] = []
        for name, exp in want.items():
            got = exp.astype(np.float32) if exp.dtype.kind == "f" else exp.copy()
            got.reshape(-1)[:: max(1, got.size // 3)] += 1  # (a few wrong: their report is made too)
            _, each = timed(args.repeat, compare, name, got, exp, spec.tolerance, params)
            compared = [a + b for a, b in zip(compared, each)] if compared else each
        shapes = ", ".join(f"{k}{list(v.shape)} {v.dtype}" for k, v in want.items())
        print(f"{lab:16s} {shapes:28s}" + "".join(f" {min(s):6.3f}/{statistics.median(s):6.3f}" for s in (drawn, answered, compared)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
