"""How long a CUDA context takes to start, alone and with others starting at once, on one GPU and
spread over every GPU: the driver starts a host's contexts largely one at a time, and each student
a lane grades starts about ten (a worker per lab, a compute-sanitizer run per tool, the profiler's
worker), so lanes on different GPUs wait for one another's starts.

    python benchmarks/context_starts.py [--at-once 8] [--rounds 2]

Each process sees one GPU (``CUDA_VISIBLE_DEVICES``), imports CuPy, then times its first
allocation and synchronize (the context's start). Prints, per arrangement, the seconds each
process's start took: min, median and max over the processes of every round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.host.gpus import nvml_devices, seeing_only, visible  # noqa: E402

PROBE = ("import time, cupy\nt = time.perf_counter()\ncupy.zeros(1)\ncupy.cuda.Device().synchronize()\n"
         "print(time.perf_counter() - t)")


def starts(gpus: list[int]) -> list[float]:
    """Start one process per entry of ``gpus`` (the GPU it sees) at once; each one's seconds."""
    procs = [subprocess.Popen([sys.executable, "-c", PROBE], env={**os.environ, **seeing_only(g)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for g in gpus]
    out = []
    for gpu, p in zip(gpus, procs):
        stdout, stderr = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"a context start failed on GPU {gpu}: {stderr.strip()[-300:]}")
        out.append(float(stdout.strip()))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at-once", type=int, default=8, help="processes started together (default 8)")
    p.add_argument("--rounds", type=int, default=2, help="times each arrangement is repeated (default 2)")
    args = p.parse_args()
    gpus = [d.index for d in visible(nvml_devices(), os.environ.get("CUDA_VISIBLE_DEVICES"))]
    if not gpus:
        print("needs a CUDA GPU: NVML lists none (no driver, or CUDA_VISIBLE_DEVICES hides them all)")
        return 1
    n = args.at_once
    arrangements = [("1 alone", [gpus[0]]), (f"{n} at once on GPU {gpus[0]}", [gpus[0]] * n)]
    if len(gpus) > 1:
        arrangements.append((f"{n} at once over {len(gpus)} GPUs", [gpus[k % len(gpus)] for k in range(n)]))
        arrangements.append((f"{2 * n} at once over {len(gpus)} GPUs", [gpus[k % len(gpus)] for k in range(2 * n)]))
    print(f"CUDA context starts, seconds per process; {len(gpus)} GPU(s) visible")
    for label, placed in arrangements:
        seconds = [s for _ in range(args.rounds) for s in starts(placed)]
        print(f"{label:<28} min {min(seconds):5.2f}  median {statistics.median(seconds):5.2f}  max {max(seconds):5.2f}"
              f"  ({len(seconds)} starts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
