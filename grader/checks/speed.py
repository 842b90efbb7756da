"""The speed checks: ratios of the student's median time to baselines timed in the same run
(``timing.measure``), after the anti-cheat checks on what was timed."""

from __future__ import annotations

import shutil
import time
from typing import Any

from ..host.procgroup import hold_group
from ..host.safeio import load_npy
from ..isolation.runner import WorkerSession
from ..isolation.submission import Submission
from ..labspec.spec import Benchmark
from ..outcome import CheckResult, Outcome, Stage, partial_credit
from ..textutil import plural
from ..worker import expr
from .compare import compare
from .correctness import failure_from_task, output_limit
from .samples import TOO_SLOW_FACTOR, summarize
from .timing import Measurement, SampleFailed, TimedRun

#: A timed array the worker saves for the grader's check is read up to this size.
TIMED_ARRAY_LIMIT = 1 << 30


def _all(bench: Benchmark, outcome: Outcome, message: str, details: str = "") -> list[CheckResult]:
    return [CheckResult(c.id, Stage.SPEED, outcome, 0, c.points, message, details) for c in bench.checks]


def _failed(bench: Benchmark, failed: SampleFailed) -> list[CheckResult]:
    """The speed checks' errors where the student's kernel could not be timed (a baseline's
    failure is the grader's: raised)."""
    if failed.who != "student":
        what = "the buffers of the timed calls" if failed.who == "buffers" else f"the {failed.who} kernel"
        raise RuntimeError(f"{what} could not be timed: {failed.result.reason}") from None
    failure = failure_from_task(failed.result, "timing", Stage.SPEED, 0)
    return _all(bench, Outcome.ERROR, f"while timing: {failure.message}", failure.details)


def hold(worker: WorkerSession, stopped: bool) -> None:
    """Stop or continue the student's worker: none of its code runs beside another lab's timed calls."""
    if worker.proc is not None and worker.proc.poll() is None:
        hold_group(worker.proc.pid, stopped)


def opened(sub: Submission, worker: WorkerSession, baselines_worker: WorkerSession) -> TimedRun | list[CheckResult]:
    """The timing opened (nothing timed yet), the student's worker stopped before and after until
    its turn; or the speed checks' errors."""
    bench = sub.spec.benchmark
    assert bench is not None
    run = TimedRun(sub, worker, baselines_worker)
    hold(worker, False)
    try:
        run.open()
        return run
    except SampleFailed as failed:
        return _failed(bench, failed)
    finally:
        hold(worker, True)


def measured(run: TimedRun) -> Measurement | list[CheckResult]:
    """The timing, the GPU's part: a measurement, or the speed checks' errors where the student's
    kernel could not be timed. The workers are left to the caller to end, once no other lab's
    timing would see them exit."""
    assert run.sub.spec.benchmark is not None
    hold(run.worker, False)
    try:
        return run.sample()
    except SampleFailed as failed:
        return _failed(run.sub.spec.benchmark, failed)
    finally:
        hold(run.worker, True)


def scored(sub: Submission, worker: WorkerSession, m: Measurement) -> tuple[list[CheckResult], dict[str, Any]]:
    """The CPU's part (it may run beside the next lab's timing): the speed checks, and the timings
    per kernel (with ``_device`` and ``_phases``) for the report."""
    started = time.monotonic()
    try:
        checks, timings = score(sub, worker, m)
    finally:
        if m.inputs is not None:  # the baselines' worker wrote them for this run alone
            shutil.rmtree(m.inputs[0], ignore_errors=True)
    timings["_phases"] = {**m.phase_s, "check": round(time.monotonic() - started, 3)}
    return checks, timings


def shown_ratio(ratio: float, *edges: float) -> str:
    """``ratio`` with two decimals, or as many more as it takes to stay on its side of each edge
    (0.896 against full marks at 0.9 reads "0.896", not "0.90")."""
    for digits in (2, 3, 4):
        text = f"{ratio:.{digits}f}"
        if all((float(text) >= edge) == (ratio >= edge) for edge in edges):
            return text
    return f"{ratio:.5f}"


def score(sub: Submission, worker: WorkerSession, m: Measurement) -> tuple[list[CheckResult], dict[str, Any]]:
    """The speed checks from a measurement: inputs untouched, the last timed output right, the
    time possible and not forged, then credit on each ratio."""
    spec = sub.spec
    bench = spec.benchmark
    assert bench is not None
    stats = {n: summarize(m.samples[n], m.walls[n]) for n in m.samples}
    flops = float(expr.evaluate(bench.flops, bench.params))
    nbytes = float(expr.evaluate(bench.bytes, bench.params))
    device = m.device
    timings: dict[str, Any] = {"_device": device}
    for n, st in stats.items():
        row: dict[str, Any] = dict(st.as_dict())
        secs = st.median_ms / 1e3
        if flops:
            row["gflops"] = round(flops / secs / 1e9, 1)
            if device.get("peak_fp32_gflops"):
                row["pct_fp32_peak"] = round(100 * row["gflops"] / device["peak_fp32_gflops"], 1)
        if nbytes:
            row["gbps"] = round(nbytes / secs / 1e9, 1)
            if device.get("peak_dram_gbps"):
                row["pct_dram_peak"] = round(100 * row["gbps"] / device["peak_dram_gbps"], 1)
        row["noisy"] = n in m.noisy
        row["samples_taken_again"] = m.retaken.get(n, 0)
        timings[n] = row
    timings["student"]["samples_timed_by_wall_clock"] = m.by_wall
    timings["student"]["samples_bounded_by_round_trip"] = m.by_clock
    timings["student"]["timed_behind_gate"] = m.gated
    if m.gate_note:
        timings["student"]["gate"] = m.gate_note
    data = m.closing
    assert data is not None

    if data.inputs_modified:
        msg = f"modified its input {', '.join(data.inputs_modified)} during timed calls (inputs must be left unchanged)"
        return _all(bench, Outcome.FAIL, msg), timings
    # the output of the last timed call must be right: result caching or skipped work cannot pay
    # fresh inputs each sample: nothing to cache. The trusted worker refilled the inputs and read
    # the outputs from buffers it owns: no copy of the student's worker is taken
    assert m.inputs is not None
    folder, names = m.inputs
    inputs = {k: load_npy(folder, v, TIMED_ARRAY_LIMIT) for k, v in names.items()}
    want = sub.problem.expected(inputs, dict(bench.params))
    saved = data.check_outputs
    if set(saved) != set(want):
        raise RuntimeError(f"the trusted worker saved the timed outputs {sorted(saved)}, not {sorted(want)}")
    wrong = []
    for name, exp in want.items():
        got = load_npy(folder, str(saved[name]), output_limit(exp))
        cmp = compare(name, got, exp, spec.tolerance, bench.params)
        if not cmp.ok:
            wrong.append(cmp)
    if wrong:
        msg = "the output of a timed call was wrong: " + wrong[0].summary
        return _all(bench, Outcome.FAIL, msg, wrong[0].details()), timings

    floor_gbps = device.get("peak_dram_gbps") or 0
    student = stats["student"]
    if nbytes and floor_gbps and student.median_ms / 1e3 < nbytes / (floor_gbps * 1e9):
        floor_ms = nbytes / (floor_gbps * 1e9) * 1e3
        msg = (
            f"impossible time: {student.median_ms:.4f} ms is below the memory floor of {floor_ms:.4f} ms "
            f"({nbytes / 1e6:.1f} MB at the device's peak {floor_gbps:.0f} GB/s); the work was not measured"
        )
        return _all(bench, Outcome.ERROR, msg), timings

    late = ""
    if m.by_wall:
        late = (f"; {m.by_wall} of {student.n} samples were timed by the wall clock, because work was still running "
                "when your launcher returned (launch on the default stream, as the lab asks)")
    if m.by_clock * 2 >= student.n:
        msg = (f"{m.by_clock} of {student.n} timed calls reported less time than the grader's own clock measured for "
               "them: the timing was tampered with, and the work was not measured")
        return _all(bench, Outcome.ERROR, msg), timings
    if m.stopped_early:
        late += (f"; sampling stopped after {plural(student.n, 'sample')}: your kernel took more than "
                 f"{TOO_SLOW_FACTOR:g}x the slowest baseline's time (printing from a kernel, or a busy loop?)")
    if m.by_clock:
        late += (f"; {m.by_clock} of {student.n} samples reported less time than the call took by the grader's own "
                 "clock and were timed by it")
    out = []
    for c in bench.checks:
        base = stats[c.baseline]
        ratio = base.median_ms / student.median_ms
        pts = partial_credit(ratio, c.zero, c.full, c.points)
        msg = (
            f"{shown_ratio(ratio, c.full, c.zero)}x the speed of the {c.baseline} kernel (full marks at >= {c.full:g}x, none at <= {c.zero:g}x): "
            f"yours {student.median_ms:.3f} ms, {c.baseline} {base.median_ms:.3f} ms (medians of {student.n} and {base.n})"
            f"{late}"
        )
        if pts < c.points and c.hint:
            msg += f". {c.hint}"
        measured = {"ratio": round(ratio, 4), "student_ms": round(student.median_ms, 6), f"{c.baseline}_ms": round(base.median_ms, 6),
                    "student_cv_pct": round(student.cv * 100, 3)}
        out.append(CheckResult(c.id, Stage.SPEED, Outcome.PASS if pts >= c.points else Outcome.FAIL, pts, c.points, msg, "", measured))
    return out, timings


