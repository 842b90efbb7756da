"""What filling every SM's shared memory before a student's call costs (target: well under 1 ms).

    python benchmarks/shared_fill_cost.py [--calls 200]

Prints the fill's size and grid on this GPU and its time per call: CUDA events around the fill
alone, and the wall time of a fill plus a device synchronize (what a correctness case pays), then
the check kernel that runs after each student launch using shared memory (GPU time per launch).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.worker import poison  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    import cupy as cp

    poison.fill_shared(cp, 1)  # compile and load
    cp.cuda.Device().synchronize()
    _, per_block, blocks = poison._prepared(cp)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    gpu_ms, wall_ms = [], []
    for k in range(args.calls):
        t0 = time.perf_counter()
        start.record()
        poison.fill_shared(cp, k)
        end.record()
        end.synchronize()
        wall_ms.append((time.perf_counter() - t0) * 1e3)
        gpu_ms.append(cp.cuda.get_elapsed_time(start, end))
    check, slots = poison._fill["check"], poison._fill["slots"]
    check_ms = []
    for _ in range(args.calls):
        start.record()
        check((blocks,), (poison.THREADS,), (cp.uint32(per_block // 4), slots.data.ptr), shared_mem=per_block)
        end.record()
        end.synchronize()
        check_ms.append(cp.cuda.get_elapsed_time(start, end))
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    print(f"{name}: {blocks} blocks x {per_block / 1024:.1f} KiB of shared memory ({blocks * per_block / 2**20:.1f} MiB)")
    print(f"fill, GPU time: median {statistics.median(gpu_ms):.3f} ms, max {max(gpu_ms):.3f} ms over {args.calls} calls")
    print(f"fill + synchronize, wall: median {statistics.median(wall_ms):.3f} ms, max {max(wall_ms):.3f} ms")
    print(f"check after a launch, GPU time: median {statistics.median(check_ms):.3f} ms, max {max(check_ms):.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
