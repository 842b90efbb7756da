"""Does a kernel that reads shared memory it never wrote fail every grade while another process
uses the GPU? (target: every non-empty correctness case wrong in every grade)

    python benchmarks/unzeroed_under_load.py [--grades 10] [--load zeros|none]

Grades the histogram's unzeroed-bins solution (correctness only) ``--grades`` times while a
second process keeps the GPU busy with kernels that write zeros over every SM's shared memory
(``--load zeros``: what a context switch leaves behind, made as likely as it can be), or alone
(``--load none``). Prints, per grade, the cases that passed (none should) and how often a call
was run again because the fill's check found shared memory cleared after it, then the totals.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.engine.grade import grade  # noqa: E402
from grader.isolation.options import GradeOptions  # noqa: E402
from grader.labspec.labs import find_lab  # noqa: E402

WRONG = "wrong/unzeroed_shared_bins.cu"

_LOAD = r"""
import sys, time, cupy as cp
src = r'''
extern "C" __global__ void zeros(unsigned int words) {
    extern __shared__ unsigned int s[];
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) s[i] = 0u;
}'''
k = cp.RawKernel(src, "zeros")
dev = cp.cuda.Device().id
per_block = cp.cuda.runtime.deviceGetAttribute(97, dev) // 16 * 16
k.max_dynamic_shared_size_bytes = per_block
blocks = 2 * cp.cuda.runtime.deviceGetAttribute(16, dev)
print("load ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(50):
        k((blocks,), (1024,), (cp.uint32(per_block // 8),), shared_mem=per_block // 2)
    cp.cuda.Device().synchronize()
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grades", type=int, default=10)
    p.add_argument("--load", choices=("zeros", "none"), default="zeros")
    args = p.parse_args()
    spec = find_lab("histogram")
    load = None
    if args.load == "zeros":
        load = subprocess.Popen([sys.executable, "-c", _LOAD, "3600"], stdout=subprocess.PIPE, text=True)
        assert load.stdout is not None and load.stdout.readline().startswith("load ready")
    passed_grades, reruns, cases_run = 0, 0, 0
    t0 = time.monotonic()
    try:
        for n in range(1, args.grades + 1):
            report = grade(spec, spec.root / "solutions" / WRONG,
                           GradeOptions(timing=False, counters=False, sanitizers=False), display_name=f"labs/histogram/solutions/{WRONG}")
            cases = [c for c in report.checks if c.id.startswith("correctness[") and c.id != "correctness[empty]"]
            passed = [c.id for c in cases if c.outcome.value == "pass"]
            again = sum(int(str(c.measured.get("runs_again_on_cleared_shared_memory", 0))) for c in cases)
            reruns += again
            cases_run += len(cases)
            passed_grades += bool(passed)
            print(f"grade {n}: {len(cases) - len(passed)} of {len(cases)} cases wrong; passed: {passed or 'none'}; "
                  f"calls run again on cleared shared memory: {again}", flush=True)
    finally:
        if load is not None:
            load.kill()
    print(f"load={args.load}: {args.grades - passed_grades} of {args.grades} grades failed every non-empty case; "
          f"{reruns} calls run again over {cases_run} cases; {time.monotonic() - t0:.1f} s")
    return 0 if passed_grades == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
