"""Hardware counters with Nsight Compute (ncu): never used for timing, only for counts."""

from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import io
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping

from . import toolchain
from .runner import TOOL_LOG, Isolation, RunDirs, ToolRun, run_under_tool
from .textutil import cap_lines


@dataclass(frozen=True)
class CounterRun:
    """Metric values summed over every kernel the launcher ran (or why there are none)."""

    values: Mapping[str, float] = field(default_factory=dict)
    kernels: tuple[str, ...] = ()
    skipped: str = ""  # the check cannot run here: no ncu, no permission
    error: str = ""  # the submission failed under the profiler
    log: str = ""
    seconds: float = 0.0
    cached: bool = False


def parse_csv(text: str) -> tuple[dict[str, float], list[str]]:
    """Sum each metric over kernels from ``ncu --csv --print-units base`` (long format)."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    header_at = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if header_at is None:
        return {}, []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[header_at:]))))
    totals: dict[str, float] = {}
    kernels: dict[str, str] = {}
    for row in rows:
        name, value = row.get("Metric Name"), row.get("Metric Value", "")
        if not name:
            continue
        kernels[row.get("ID", "")] = row.get("Kernel Name", "?")
        try:
            number = float(value.replace(",", ""))
        except ValueError:
            continue
        totals[name] = totals.get(name, 0.0) + number
    return totals, list(kernels.values())


def _permission_problem(text: str) -> str:
    if "ERR_NVGPUCTRPERM" in text:
        return (
            "GPU performance counters are restricted to administrators on this machine "
            "(ERR_NVGPUCTRPERM; the driver option NVreg_RestrictProfilingToAdminUsers=0 lifts it)"
        )
    if "LibraryNotLoaded" in text or "Failed to initialize the profiler" in text:
        return "Nsight Compute could not initialise its profiler on this machine"
    return ""


LOCK_NAME = "grader-ncu.lock"
#: What ncu prints when another profiler holds the GPU's counters.
BUSY_MARK = "driver resource was unavailable"
BUSY_ATTEMPTS = 3
BUSY_PAUSE_S = 2.0


@contextlib.contextmanager
def profiling_lock(time_limit_s: float, folder: Path | None = None) -> Iterator[float]:
    """Hold the machine-wide profiling lock; yields the seconds spent waiting for it.

    The GPU's counters serve one profiler at a time. ncu keeps its own runs apart, but not
    across the namespaces of separate sandboxes (the later runs fail with "a driver resource was
    unavailable"), so every grader process on the machine takes this lock file in the system's
    temporary folder around each run. Raises TimeoutError after ``time_limit_s``.
    """
    path = (folder or Path(tempfile.gettempdir())) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        with contextlib.suppress(PermissionError):
            os.fchmod(fd, 0o666)  # other users' graders share it
    except PermissionError:  # someone else's lock that we may not open: keep our own runs apart at least
        fd = os.open(path.with_name(f"{LOCK_NAME}.{os.getuid()}"), os.O_RDWR | os.O_CREAT, 0o600)
    started = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - started >= time_limit_s:
                    raise TimeoutError(path) from None
                time.sleep(0.05)
        yield time.monotonic() - started
    finally:
        os.close(fd)


def run_when_counters_free(attempt: Callable[[float], ToolRun], time_limit_s: float,
                           pause_s: float = BUSY_PAUSE_S) -> tuple[ToolRun | None, str]:
    """``attempt(limit)`` under the profiling lock, again while a profiler outside the grader
    holds the counters. Returns the run, or None and why the counters could not be had."""
    deadline = time.monotonic() + time_limit_s
    for tries in range(1, BUSY_ATTEMPTS + 1):
        left = deadline - time.monotonic()
        try:
            with profiling_lock(left) as waited:
                run = attempt(left - waited)
        except TimeoutError as exc:
            return None, f"another grader kept the profiler busy for {time_limit_s:g} s (lock {exc})"
        if run.timed_out or BUSY_MARK not in run.log:  # the profiler's own report, never what the program printed
            return run, ""
        if tries < BUSY_ATTEMPTS and deadline - time.monotonic() > pause_s:
            time.sleep(pause_s)
    return None, (f"the GPU's performance counters stayed busy through {tries} tries: another profiler "
                  "(Nsight Compute outside the grader, DCGM) was collecting on this GPU")


def profile(
    library: Path,
    task: dict,
    metrics: tuple[str, ...],
    dirs: RunDirs,
    time_limit_s: float,
    isolation: Isolation,
    cache_key: str | None = None,
    cache_dir: Path | None = None,
) -> CounterRun:
    """Run one ``profile`` task of the worker under ncu and collect ``metrics``.

    ncu's report comes through a pipe that only the grader reads: what the program printed
    (forged CSV rows, a fake "counters busy") is never parsed."""
    cache_file = None
    if cache_key and cache_dir:
        digest = hashlib.sha256(cache_key.encode() + library.read_bytes()).hexdigest()[:32]
        cache_file = cache_dir / "counters" / f"{digest}.json"
        if cache_file.exists():
            data = json.loads(cache_file.read_text())
            return CounterRun(values=data["values"], kernels=tuple(data["kernels"]), cached=True)
    ncu = toolchain.find("ncu")
    if ncu is None:
        return CounterRun(skipped="Nsight Compute (ncu) is not installed on this machine")
    cmd = [
        str(ncu), "--metrics", ",".join(metrics), "--csv", "--print-units", "base",
        "--clock-control", "none", "--log-file", TOOL_LOG,
    ]
    job = {**task, "kind": "case", "memcpy_only": True, "guard": 0}
    attempts = iter(range(1, 100))
    run, busy = run_when_counters_free(
        lambda limit: run_under_tool(cmd, job, dirs.sub(f"try{next(attempts)}"), limit, isolation), time_limit_s)
    if run is None:
        return CounterRun(skipped=busy)
    text, seconds = run.log, run.seconds
    if run.timed_out:
        return CounterRun(error=f"did not finish within {time_limit_s:g} s under the profiler and was killed", seconds=seconds)
    problem = _permission_problem(text)
    if problem:
        return CounterRun(skipped=problem, log=cap_lines(text, 20), seconds=seconds)
    failure = run.failure("the profiled process ended early")
    if failure:
        return CounterRun(error=failure, log=cap_lines(f"{text}\n{run.console}".strip(), 30), seconds=seconds)
    values, kernels = parse_csv(text)
    missing = [m for m in metrics if m not in values]
    if not kernels:
        return CounterRun(error="the launcher ran no kernel", log=cap_lines(text, 30), seconds=seconds)
    if missing:
        return CounterRun(
            skipped=f"ncu did not report {', '.join(missing)} on this GPU", log=cap_lines(text, 30), seconds=seconds
        )
    counted = CounterRun(values=values, kernels=tuple(kernels), log="", seconds=seconds)
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"values": values, "kernels": kernels}))
        os.replace(tmp, cache_file)
    return counted
