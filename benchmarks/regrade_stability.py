"""Regrade stability: every known solution of every lab graded N times, a fresh secret each time.

    python benchmarks/regrade_stability.py [--regrades 10 | --until 10 [--stop-after-s S]] [--lab LAB ...] [--no-ncu]
                                           [--sanitizers-every-time] [--counters-every-time] [--runs-dir DIR]
                                           [--report-only]

Prints, per lab: how many check verdicts flipped between regrades (and which), and the spread of
each speed ratio (min, median, max over the regrades), and how many solutions missed their
expected verdicts in each regrade. Target: 0 flips in 10 regrades on an H100. A flip of a check
whose expected verdict is `any` (expected.yaml says why) is listed as allowed and not counted.
The sanitizer checks (exact tools, a few seconds per solution) run in the first regrade only
unless --sanitizers-every-time, and so do the counter checks unless --counters-every-time (their
figures are event counts: on an H100, 69 of 78 counter figures were identical in 10 regrades and
the rest, bank conflicts, moved in the fourth digit). The skipped runs count as no verdict, not
as a flip, and where memcheck saw stray stores (which stop the timing) the speed checks of
regrades without the sanitizers are not compared.
Then, for each lab's reference, the grader's median time against Nsight Compute's
gpu__time_duration on the same benchmark case (target: within 5%); --no-ncu skips that.

Each regrade's reports are kept as JSON under --runs-dir (default: a fresh temporary folder), and
the figures are taken over every regrade found there: a long lab can be regraded in several
sittings into one folder (sanitizers then run only if the folder has no regrade of that lab yet),
and --report-only prints the figures of a folder without grading (with the Nsight Compute time
where there is a GPU). --until N regrades the labs in turn, one regrade each per round, until each
has N in the folder; with --stop-after-s it starts no regrade that its lab's last one says would
end past that many seconds, so a sitting of limited time ends with whole regrades of every lab.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.cachedirs import default_cache_dir  # noqa: E402
from grader.checks.correctness import launcher_spec, write_inputs  # noqa: E402
from grader.checks.counters import ncu as counters  # noqa: E402
from grader.course.validate import load_solutions, validate  # noqa: E402
from grader.isolation.build import baseline_library  # noqa: E402
from grader.isolation.launch import Isolation, RunDirs  # noqa: E402
from grader.isolation.options import GradeOptions, archs_for, probe_for  # noqa: E402
from grader.isolation.sandbox import Sandbox  # noqa: E402
from grader.labspec.labs import find_lab, lab_ids, load_problem  # noqa: E402
from grader.labspec.paths import shown  # noqa: E402
from grader.labspec.spec import ExpectedSolution, LabSpec  # noqa: E402
from grader.outcome import Outcome, Stage  # noqa: E402
from grader.report import data as json_report  # noqa: E402
from grader.worker.protocol import tool_case_task  # noqa: E402

Report = dict[str, Any]  # one lab report as the JSON result writes it


def regrade(spec: LabSpec, times: int, folder: Path, sanitizers_every_time: bool = False,
            counters_every_time: bool = False) -> None:
    """``times`` validate runs of the lab, each kept as ``folder/LAB-N.json`` (N counting on from
    the regrades already there); the first regrade in the folder runs the sanitizers and counters."""
    done = len(regrade_files(folder, spec.id))
    for i in range(times):
        started = time.monotonic()
        first = done + i == 0
        options = GradeOptions(secret=os.urandom(16).hex(), sanitizers=sanitizers_every_time or first,
                               counters=counters_every_time or first,
                               reuse_tool_runs=not (sanitizers_every_time or counters_every_time))  # (run each time, not kept)
        results = validate(spec, options)
        (folder / f"{spec.id}-{done + i + 1:03d}.json").write_text(json_report.dumps(r.report for r in results))
        writers = stray_writers(saved(folder, spec.id)) if not options.sanitizers else set()
        missed, unsanitized = [], []
        for r in results:
            speed = {c.id for c in r.report.checks if c.stage is Stage.SPEED} if r.report.submission in writers else set()
            off = [m.check for m in r.mismatches if m.check not in speed]
            if off or r.problems:
                missed.append(f"{r.report.submission} ({', '.join(off) or '; '.join(r.problems)})")
            elif not r.ok:
                unsanitized.append(r.report.submission)
        print(f"  [{spec.id}] regrade {done + i + 1} ({i + 1}/{times} now): {time.monotonic() - started:.0f} s, "
              f"{len(missed)} solution(s) off their expected verdicts {missed if missed else ''}"
              + (f"; not compared: the speed checks of {', '.join(unsanitized)}, timed only because the sanitizers "
                 "that stop its timing were off" if unsanitized else ""), file=sys.stderr, flush=True)


def regrade_in_turn(specs: list[LabSpec], until: int, folder: Path, stop_after_s: float | None = None,
                    sanitizers_every_time: bool = False, counters_every_time: bool = False) -> None:
    """Regrade each lab of ``specs`` in turn, one regrade per round, until each has ``until``
    regrades in ``folder``; none is started that its lab's last regrade says would end past
    ``stop_after_s`` seconds from now."""
    started = time.monotonic()
    took: dict[str, float] = {}
    while True:
        due = [spec for spec in specs if len(regrade_files(folder, spec.id)) < until]
        if not due:
            return
        ran = False
        for spec in due:
            elapsed = time.monotonic() - started
            if stop_after_s is not None and elapsed + took.get(spec.id, 0.0) > stop_after_s:
                print(f"  [{spec.id}] not regraded again: its last regrade took {took[spec.id]:.0f} s, "
                      f"{stop_after_s - elapsed:.0f} s are left", file=sys.stderr, flush=True)
                continue
            t0 = time.monotonic()
            regrade(spec, 1, folder, sanitizers_every_time, counters_every_time)
            took[spec.id] = time.monotonic() - t0
            ran = True
        if not ran:
            return


def regrade_files(folder: Path, lab_id: str) -> list[Path]:
    """The files of a lab's regrades kept in ``folder``, oldest first."""
    return sorted(folder.glob(f"{lab_id}-[0-9][0-9][0-9].json"))


def saved(folder: Path, lab_id: str) -> list[list[Report]]:
    """The regrades of a lab kept in ``folder``, oldest first: each a report per known solution."""
    return [json.loads(f.read_text())["labs"] for f in regrade_files(folder, lab_id)]


def expected_verdicts(spec: LabSpec) -> dict[str, ExpectedSolution]:
    """The lab's known solutions by the name their reports carry."""
    root = spec.root.parent.parent
    return {shown(s.file, root): s for s in load_solutions(spec)}


def stray_writers(runs: list[list[Report]]) -> set[str]:
    """Solutions whose sanitized regrades saw stores outside every buffer (their timing is stopped)."""
    return {r["submission"] for reports in runs for r in reports for c in r["checks"]
            if c["stage"] == Stage.SANITIZER.value and c["outcome"] == Outcome.FAIL.value
            and c["measured"].get("global_writes_outside")}


def sanitized(report: Report) -> bool:
    return not any(c["stage"] == Stage.SANITIZER.value and c["outcome"] == Outcome.SKIPPED.value for c in report["checks"])


def flips(runs: list[list[Report]], expected: dict[str, ExpectedSolution]) -> tuple[list[str], list[str]]:
    """'solution: check (verdicts seen)' for every check whose verdict was not the same every time:
    (those that count, those whose expected verdict is `any`)."""
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    writers = stray_writers(runs)
    for reports in runs:
        for report in reports:
            for check in report["checks"]:
                if check["outcome"] == Outcome.SKIPPED.value:
                    continue
                if check["stage"] == Stage.SPEED.value and report["submission"] in writers and not sanitized(report):
                    continue  # timed only because the sanitizers were off
                seen[(report["submission"], check["id"])].add(check["outcome"])
    counted: list[str] = []
    allowed: list[str] = []
    for (sub, cid), verdicts in sorted(seen.items()):
        if len(verdicts) > 1:
            known = expected.get(sub)
            line = f"{sub}: {cid} ({'/'.join(sorted(verdicts))})"
            (allowed if known is not None and known.verdict(cid) == "any" else counted).append(line)
    return counted, allowed


def ratio_spread(runs: list[list[Report]]) -> list[str]:
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for reports in runs:
        for report in reports:
            for check in report["checks"]:
                ratio = check["measured"].get("ratio")
                if check["stage"] == Stage.SPEED.value and isinstance(ratio, (int, float)):
                    ratios[(report["submission"], check["id"])].append(float(ratio))
    return [f"{sub}: {cid} min {min(r):.3f} median {statistics.median(r):.3f} max {max(r):.3f} "
            f"(spread {100 * (max(r) - min(r)) / statistics.median(r):.1f}%)"
            for (sub, cid), r in sorted(ratios.items())]


def ncu_time_ms(spec: LabSpec, work: Path) -> float | None:
    """gpu__time_duration of the reference on the lab's benchmark case, summed over its kernels."""
    if spec.benchmark is None:
        return None
    probe = probe_for(GradeOptions())
    library = baseline_library(spec, "reference", archs_for(GradeOptions(), probe), None)
    dirs = RunDirs(work / "in", work / "out").make()
    _, paths = write_inputs(spec, load_problem(spec), spec.benchmark.params, spec.benchmark.seed, dirs.inbox)
    task = tool_case_task(str(library), launcher_spec(spec), dict(spec.benchmark.params), paths)
    isolation = Isolation(Sandbox(None), trusted=True, cupy_cache=default_cache_dir() / "cupy-kernels")
    run = counters.profile(library, task, ("gpu__time_duration.sum",), dirs, 300, isolation, gpu=probe.gpu)
    if run.skipped or run.error:
        print(f"  [{spec.id}] ncu: {run.skipped or run.error}", file=sys.stderr)
        return None
    return run.values["gpu__time_duration.sum"] / 1e6  # ns -> ms


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--regrades", type=int, default=10)
    p.add_argument("--until", type=int, metavar="N", help="regrade the labs in turn until each has N regrades in --runs-dir")
    p.add_argument("--stop-after-s", type=float, metavar="S", help="with --until: start no regrade that would end after S seconds")
    p.add_argument("--lab", action="append", dest="labs", metavar="LAB")
    p.add_argument("--no-ncu", action="store_true")
    p.add_argument("--sanitizers-every-time", action="store_true")
    p.add_argument("--counters-every-time", action="store_true")
    p.add_argument("--runs-dir", type=Path, help="keep each regrade's reports here, and take the figures over all of them")
    p.add_argument("--report-only", action="store_true", help="grade nothing: print the figures of --runs-dir")
    args = p.parse_args()
    if args.report_only and args.runs_dir is None:
        p.error("--report-only needs --runs-dir")
    if args.stop_after_s is not None and args.until is None:
        p.error("--stop-after-s needs --until")
    folder = args.runs_dir or Path(tempfile.mkdtemp(prefix="regrades-"))
    folder.mkdir(parents=True, exist_ok=True)
    probe = probe_for(GradeOptions())
    gpu = probe.gpu is not None
    if not args.report_only and not gpu:
        print("needs a GPU: " + probe.reason, file=sys.stderr)
        return 2
    total_flips = 0
    if args.until is not None and not args.report_only:
        regrade_in_turn([find_lab(lab_id) for lab_id in args.labs or lab_ids()], args.until, folder, args.stop_after_s,
                        args.sanitizers_every_time, args.counters_every_time)
    for lab_id in args.labs or lab_ids():
        spec = find_lab(lab_id)
        if not args.report_only and args.until is None:
            regrade(spec, args.regrades, folder, args.sanitizers_every_time, args.counters_every_time)
        runs = saved(folder, lab_id)
        if not runs:
            print(f"== {lab_id}: no regrades in {folder}")
            continue
        flipped, allowed = flips(runs, expected_verdicts(spec))
        total_flips += len(flipped)
        print(f"== {lab_id}: {len(flipped)} flipped verdicts in {len(runs)} regrades of {len(runs[0])} solutions"
              + (f" (and {len(allowed)} of checks expected `any`)" if allowed else ""))
        for line in flipped:
            print(f"  FLIP {line}")
        for line in allowed:
            print(f"  flip allowed (expected: any) {line}")
        for line in ratio_spread(runs):
            print(f"  ratio {line}")
        if not args.no_ncu and gpu and spec.benchmark is not None:
            timed = [r["timings"]["student"] for reports in runs for r in reports
                     if r["submission"].endswith("reference.cu") and "student" in r["timings"]]
            ncu = ncu_time_ms(spec, Path(tempfile.mkdtemp(prefix=f"regrade-ncu-{lab_id}-")))
            if timed and ncu:
                grader_ms = statistics.median(t["median_ms"] for t in timed)
                ungated = sum(not t.get("timed_behind_gate", False) for t in timed)
                print(f"  reference: grader median {grader_ms:.4f} ms, ncu gpu__time_duration {ncu:.4f} ms "
                      f"({100 * (grader_ms - ncu) / ncu:+.1f}%)"
                      + (f"; timed without the gate in {ungated} of {len(timed)} regrades (its launcher waits "
                         "for the GPU, so its time includes the host's part, which ncu's kernel time does not)"
                         if ungated else ""))
    print(f"total: {total_flips} flipped verdicts")
    return 0 if total_flips == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
