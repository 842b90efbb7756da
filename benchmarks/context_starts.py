"""How long a CUDA context takes to start, alone and with others starting at once, on one GPU and
spread over every GPU: the driver starts a host's contexts largely one at a time, and each student
a lane grades starts about ten (a worker per lab, a compute-sanitizer run per tool, the profiler's
worker), so lanes on different GPUs wait for one another's starts.

    python benchmarks/context_starts.py [--at-once 8] [--rounds 2]

Each process sees one GPU (``CUDA_VISIBLE_DEVICES``), imports CuPy, then times its first
allocation and synchronize (the context's start). Prints, per arrangement, the seconds each
process's start took: min, median and max over the processes of every round. Where
compute-sanitizer is found, a last arrangement starts the processes spread over the GPUs beside
one racecheck run of the same program on each GPU (as a student's workers start beside its tool
runs) and times the plain ones.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.host import toolchain  # noqa: E402
from grader.host.gpus import nvml_devices, seeing_only, visible  # noqa: E402

PROBE = ("import time, cupy\nt = time.perf_counter()\ncupy.zeros(1)\ncupy.cuda.Device().synchronize()\n"
         "print(time.perf_counter() - t)")


def starts(gpus: list[int], beside: list[int] | None = None, tool: list[str] | None = None, probe: str = PROBE) -> list[float]:
    """Start one process per entry of ``gpus`` (the GPU it sees) at once; each one's seconds. With
    ``beside``, a process under ``tool`` (compute-sanitizer and its tool) starts on each of those
    GPUs at the same moment; only the plain processes' seconds are returned."""
    launched = [([sys.executable, "-c", probe], g, True) for g in gpus]
    launched += [([*(tool or []), sys.executable, "-c", probe], g, False) for g in beside or []]
    procs = [(subprocess.Popen(cmd, env={**os.environ, **seeing_only(g)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True), g, plain) for cmd, g, plain in launched]
    out = []
    for p, gpu, plain in procs:
        stdout, stderr = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"a context start failed on GPU {gpu}{'' if plain else ' under ' + ' '.join(tool or [])}: "
                             f"{(stderr or stdout).strip()[-300:]}")
        if plain:
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
    def spread(count: int) -> list[int]:
        return [gpus[k % len(gpus)] for k in range(count)]

    # (label, the GPUs of the plain starts, those of the racecheck starts beside them)
    arrangements: list[tuple[str, list[int], list[int] | None]] = [
        ("1 alone", [gpus[0]], None), (f"{n} at once on GPU {gpus[0]}", [gpus[0]] * n, None)]
    if len(gpus) > 1:
        arrangements += [(f"{n} at once over {len(gpus)} GPUs", spread(n), None), (f"{2 * n} at once over {len(gpus)} GPUs", spread(2 * n), None)]
    sanitizer = toolchain.find("compute-sanitizer")
    racecheck = [str(sanitizer), "--tool", "racecheck"] if sanitizer else None
    if racecheck:  # a student's tool runs start beside its workers: does a racecheck start hold the others up?
        arrangements.append((f"{n} over {len(gpus)} GPU(s) + racecheck", spread(n), gpus))
    print(f"CUDA context starts, seconds per process; {len(gpus)} GPU(s) visible"
          + ("" if racecheck else "; no compute-sanitizer, so no starts beside racecheck"))
    for label, placed, beside in arrangements:
        seconds = [s for _ in range(args.rounds) for s in starts(placed, beside, racecheck)]
        print(f"{label:<28} min {min(seconds):5.2f}  median {statistics.median(seconds):5.2f}  max {max(seconds):5.2f}"
              f"  ({len(seconds)} starts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
