"""Wall time to grade a whole student repository (every lab), cold and warm, and per-lab figures.

    python benchmarks/grade_repo_speed.py [--regrades 3] [--fresh 3] [--solution reference|stub] [--counters replay|ncu]

The repository is assembled from each lab's reference (or stub). Cold: an empty build cache
(nvcc for the submissions and baselines, the baselines' counters). Warm: the same repository
again (its profiled cases kept from the first grade). Edited: one lab's file changed in its
compiled code, as a student's next try is (that lab compiled and profiled again). Targets on an
H100: cold <= 30 s, warm <= 5 s. Prints the wall time of each run, the cold and edited runs'
progress lines with the second each came (where the time before and between the labs goes), then
per lab: score, stage seconds, timed medians and the counter and sanitizer figures.

The runs above share this process, as a class's lane does: its trusted worker and replayer stay
up between them. A student who grades again starts a new process: ``--fresh`` more warm runs of
``cuda-grader grade-repo`` each in a process of its own, on the same cache, with their wall time
(the interpreter's start included) and the first of them's progress by the second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.engine.background import WAITING  # noqa: E402
from grader.engine.repo import grade_repo, submission_path  # noqa: E402
from grader.isolation.options import GradeOptions  # noqa: E402
from grader.labspec.labs import find_lab, lab_ids  # noqa: E402
from grader.outcome import Stage  # noqa: E402

EDITED = "tiled_matmul"  # the lab whose file the edited run changes
TIMELINE_LINES = 120  # progress lines printed of a run


def solutions_repo(solution: str = "reference", prefix: str = "grade-repo-bench-") -> Path:
    """A new repository (in a temporary folder) of every lab's ``solution`` ("reference" or "stub")."""
    repo = Path(tempfile.mkdtemp(prefix=prefix))
    for lab_id in lab_ids():
        spec = find_lab(lab_id)
        target = submission_path(repo, lab_id)
        target.parent.mkdir(parents=True)
        source = spec.files.reference if solution == "reference" else spec.files.stub
        if source is None:
            raise SystemExit(f"{lab_id} has no {solution} file")
        shutil.copy(source, target)
    return repo


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--regrades", type=int, default=3)
    p.add_argument("--solution", choices=("reference", "stub"), default="reference")
    p.add_argument("--counters", choices=("replay", "ncu"), default="replay", help="the replayer (default) or Nsight Compute")
    p.add_argument("--fresh", type=int, default=3, help="warm runs of the command line, each a new process (default: 3)")
    args = p.parse_args()
    repo = solutions_repo(args.solution, "grade-repo-bench-")
    cache = Path(tempfile.mkdtemp(prefix="grade-repo-bench-cache-"))
    os.environ["GRADER_CACHE_DIR"] = str(cache)
    options = GradeOptions(cache_dir=cache, counter_source=args.counters)

    runs = []
    timelines: dict[str, list[tuple[float, str]]] = {"cold": [], "edited": []}

    def graded(label: str) -> None:
        t0 = time.monotonic()
        lines = timelines.get(label, [])
        reports = grade_repo(repo, options, progress=lambda message: lines.append((time.monotonic() - t0, message)))
        runs.append((label, time.monotonic() - t0, reports))

    for i in range(args.regrades + 1):
        graded("cold" if i == 0 else f"warm{i}")
    edited = submission_path(repo, EDITED)
    edited.write_text(edited.read_text() + "\n__device__ int one_more_try;  // a new symbol: new compiled code\n")
    graded("edited")
    fresh = [fresh_run(repo, cache, args.counters) for _ in range(args.fresh)]
    print(f"repository of {args.solution} solutions, {len(lab_ids())} labs, GPU {runs[0][2][0].environment.get('gpu')}")
    for label, wall, reports in runs:
        total = sum(r.score for r in reports)
        print(f"{label:<6} wall {wall:6.2f} s  score {total:g}/{sum(r.max_score for r in reports):g}")
    warm = [w for label, w, _ in runs if label.startswith("warm")]
    print(f"cold wall {runs[0][1]:.2f} s (target <= 30 s)")
    if warm:
        print(f"warm wall: median {statistics.median(warm):.2f} s, max {max(warm):.2f} s (target <= 5 s)")
    print(f"edited wall (one lab's code changed: {EDITED}): {runs[-1][1]:.2f} s")
    for i, (wall, score, rc, _) in enumerate(fresh, 1):
        print(f"fresh{i} wall {wall:6.2f} s  score {score}  (cuda-grader grade-repo in a new process, warm cache; exit {rc})")
    if fresh:
        print(f"fresh wall: median {statistics.median(w for w, *_ in fresh):.2f} s, max {max(w for w, *_ in fresh):.2f} s "
              "(target <= 5 s)")
        timelines["fresh1"] = fresh[0][3]
    for label, lines in timelines.items():
        if not lines:
            continue
        print(f"\n{label} run, progress by the second:")
        for at, message in lines[:TIMELINE_LINES]:
            print(f"  {at:7.2f}  {message}")
        if len(lines) > TIMELINE_LINES:
            print(f"  ... {len(lines) - TIMELINE_LINES} more lines")
    stages = [Stage.COMPILE.value, Stage.STATIC.value, Stage.CORRECTNESS.value, WAITING, Stage.SANITIZER.value,
              Stage.COUNTERS.value, Stage.SPEED.value]
    last = runs[-1][2]
    for label, _, reports in [runs[0], *runs[-2:-1], runs[-1]] if len(runs) > 2 else runs:
        print(f"\n{label:<7} {'lab':<16} {'score':>9} " + " ".join(f"{s[:12]:>12}" for s in stages))
        for r in reports:
            print(f"{'':<7} {r.lab:<16} {r.score:>4g}/{r.max_score:<4g} "
                  + " ".join(f"{r.stage_seconds.get(s, 0.0):12.2f}" for s in stages))
    print("(sanitizers and counters run in the background: they overlap the other stages and labs)")
    phases = ("open", "sampling", "sampling.refill", "sampling.calls", "close", "check")
    print(f"\n{'speed stage':<26} " + " ".join(f"{p.replace('sampling.', '  '):>12}" for p in phases))
    for r in last:
        print(f"{r.lab:<26} " + " ".join(f"{r.stage_seconds.get(f'{Stage.SPEED.value}.{p}', 0.0):12.2f}" for p in phases))
    for r in last:
        print(f"\n{r.lab}:")
        for lib, row in r.timings.items():
            rate = f"{row['gflops']} GFLOP/s" if "gflops" in row else f"{row.get('gbps', '?')} GB/s"
            dram = (f", DRAM {row['dram_bytes'] / 1e6:.1f} MB measured ({row['flop_per_dram_byte']:g} FLOP/byte)"
                    if "dram_bytes" in row else "")
            print(f"  time {lib:<16} median {row['median_ms']:.4f} ms, CV {row['cv_pct']}%, n={row['n']}, {rate}{dram}")
        for c in r.checks:
            if c.stage in (Stage.COUNTERS, Stage.SANITIZER, Stage.SPEED):
                took = f" [{c.duration_s:.1f} s]" if c.duration_s else ""
                print(f"  {c.outcome.value:<7} {c.id}{took}: {c.message}")
    return 0


def fresh_run(repo: Path, cache: Path, counters: str) -> tuple[float, str, int, list[tuple[float, str]]]:
    """``cuda-grader grade-repo`` of ``repo`` in a new process on ``cache``: its wall time, score
    (from its JSON report), exit status and progress lines with the second each came."""
    report = Path(tempfile.mkdtemp(prefix="grade-repo-bench-report-")) / "report.json"  # (a folder of this user's alone)
    command = [sys.executable, "-m", "grader", "grade-repo", str(repo), "--cache-dir", str(cache), "--counters", counters,
               "--json", str(report)]
    lines: list[tuple[float, str]] = []
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(__file__).resolve().parent.parent)
    assert proc.stdout is not None

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.strip():
                lines.append((time.monotonic() - t0, line.rstrip()[:200]))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    rc = proc.wait()
    wall = time.monotonic() - t0
    reader.join(5)
    try:
        data = json.loads(report.read_text())
        score = f"{data['score']:g}/{data['max_score']:g}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        score = f"unread ({type(exc).__name__})"
    return wall, score, rc, lines


if __name__ == "__main__":
    sys.exit(main())
