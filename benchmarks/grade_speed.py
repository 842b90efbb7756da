"""Wall time to grade one submission, by stage, cold and warm; timing stability across regrades.

    python benchmarks/grade_speed.py [LAB] [--regrades 5]

Cold: an empty build cache (nvcc for the submission and the baselines, the baseline's counters).
Warm: the same submission again. Prints per-stage seconds, the timing CV of each kernel, and the
spread of the student's median time across the warm regrades ((max - min) / median).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.engine.background import WAITING  # noqa
from grader.engine.grade import grade  # noqa
from grader.outcome import Stage  # noqa: E402
from grader.isolation.options import GradeOptions  # noqa: E402
from grader.labspec.labs import find_lab  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("lab", nargs="?", default="tiled_matmul")
    p.add_argument("source", nargs="?", type=Path, help="default: the lab's reference")
    p.add_argument("--regrades", type=int, default=5)
    args = p.parse_args()
    spec = find_lab(args.lab)
    source = args.source or spec.files.reference
    if source is None:
        p.error(f"{spec.id} has no reference: name the source to grade")
    cache = Path(tempfile.mkdtemp(prefix="grade-bench-cache-"))
    os.environ["GRADER_CACHE_DIR"] = str(cache)
    options = GradeOptions(cache_dir=cache)

    rows = []
    for i in range(args.regrades + 1):
        t0 = time.monotonic()
        report = grade(spec, source, options)
        wall = time.monotonic() - t0
        rows.append((("cold" if i == 0 else f"warm{i}"), wall, report))

    stages = [Stage.COMPILE.value, Stage.STATIC.value, Stage.CORRECTNESS.value, WAITING, Stage.SANITIZER.value,
              Stage.COUNTERS.value, Stage.SPEED.value]
    print(f"lab {spec.id}, submission {source.name}, GPU {rows[0][2].environment.get('gpu')}")
    print(f"{'run':<7} {'wall s':>7} {'score':>7} " + " ".join(f"{s[:12]:>12}" for s in stages))
    for label, wall, r in rows:
        print(
            f"{label:<7} {wall:7.2f} {r.score:>7g} "
            + " ".join(f"{r.stage_seconds.get(s, 0.0):12.2f}" for s in stages)
        )
    print("(sanitizers and counters run in the background during correctness: they overlap other stages)")
    warm = rows[1:]
    if warm:
        walls = [w for _, w, _ in warm]
        print(f"warm wall: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s")
        for lib in warm[0][2].timings:
            medians = [r.timings[lib]["median_ms"] for _, _, r in warm]
            cvs = [r.timings[lib]["cv_pct"] for _, _, r in warm]
            spread = (max(medians) - min(medians)) / statistics.median(medians) * 100
            print(
                f"timing {lib:<10} medians {', '.join(f'{m:.4f}' for m in medians)} ms; "
                f"spread {spread:.2f}%; CV {min(cvs):.2f}-{max(cvs):.2f}%"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
