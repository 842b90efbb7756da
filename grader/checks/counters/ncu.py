"""Hardware counters with Nsight Compute (ncu): never used for timing, only for counts; ``grade``
scores one counter check, ``Profiles`` shares one profiler run among the checks of a case."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ...host import toolchain
from ...host.gpu import GpuInfo
from ...host.gpulock import lock_folder, profiling_lock
from ...host.hostdirs import HostStateError, private_dir, read_private, write_private
from ...host.hostlock import LockPlace
from ...host.procgroup import Stop
from ...isolation.build import baseline_library
from ...isolation.compilerlog import demangle
from ...isolation.launch import Isolation, RunDirs
from ...isolation.submission import Submission
from ...isolation.toolrun import TOOL_LOG, ToolRun, run_under_tool
from ...labspec.spec import CounterCheck, LabSpec, params_label, split_metrics
from ...labspec.version import problem_version
from ...outcome import CheckResult, Outcome, SourceLocation, Stage, partial_credit
from ...textutil import cap_lines, plural
from ...worker.protocol import Task
from ..correctness import tool_task
from . import lines as counterlines

#: Counter checks on the same case share a profiler run: (sorted params, seed, where the inputs come from).
CaseKey = tuple[tuple[tuple[str, object], ...], int, str]

#: A profiled case in which the profiler saw no kernel of the student's.
NO_KERNEL = "the launcher ran no kernel"


@dataclass(frozen=True)
class CounterRun:
    """Metric values summed over every kernel the launcher ran (or why there are none)."""

    values: Mapping[str, float] = field(default_factory=dict)
    kernels: tuple[str, ...] = ()
    skipped: str = ""  # the check cannot run here: no ncu, no permission
    error: str = ""  # the submission failed under the profiler
    hidden: str = ""  # the submission ran kernels the profiler did not see
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    session: int = 0  # profiled with this many cases of the student's labs in one session (0: alone)
    early: bool = False  # ... in a session started before the cases were known
    replayed: bool = False  # read by the grader's replayer (grader/checks/counters/replay/), not by Nsight Compute

    @property
    def complete(self) -> bool:
        """Whether the run counted every kernel the launcher ran (its values can be believed)."""
        return bool(self.values) and not (self.skipped or self.error or self.hidden)


@dataclass(frozen=True)
class KernelRow:
    """One profiled kernel launch: its name, grid size as ncu prints it, and metric values."""

    name: str
    grid: str
    values: Mapping[str, float]


def kernel_rows(text: str) -> list[KernelRow]:
    """The kernels of ``ncu --csv --print-units base`` (long format), in launch order."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    header_at = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header_at is None:
        return []
    kernels: dict[str, tuple[str, str, dict[str, float]]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[header_at:]))):
        name, value = row.get("Metric Name"), row.get("Metric Value", "")
        if not name:
            continue
        _, _, values = kernels.setdefault(row.get("ID", ""), (row.get("Kernel Name", "?"), row.get("Grid Size", ""), {}))
        try:
            values[name] = values.get(name, 0.0) + float(value.replace(",", ""))
        except ValueError:
            continue
    return [KernelRow(name, grid, values) for name, grid, values in kernels.values()]


def summed(rows: list[KernelRow]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in rows:
        for name, value in row.values.items():
            totals[name] = totals.get(name, 0.0) + value
    return totals


def _permission_problem(text: str) -> str:
    if "ERR_NVGPUCTRPERM" in text:
        return ("GPU performance counters are restricted to administrators on this machine "
                "(ERR_NVGPUCTRPERM; the driver option NVreg_RestrictProfilingToAdminUsers=0 lifts it)")
    if "LibraryNotLoaded" in text or "Failed to initialize the profiler" in text:
        return "Nsight Compute could not initialise its profiler on this machine"
    return ""


#: What ncu prints when another profiler holds the GPU's counters.
BUSY_MARK = "driver resource was unavailable"
BUSY_ATTEMPTS = 3
BUSY_PAUSE_S = 2.0
#: The largest cached counter run that is read back.
CACHE_LIMIT_BYTES = 1 << 20


def run_when_counters_free(attempt: Callable[[float], ToolRun], time_limit_s: float, pause_s: float = BUSY_PAUSE_S,
                           folder: LockPlace | Path | None = None, attempts: int = BUSY_ATTEMPTS) -> tuple[ToolRun | None, str]:
    """``attempt(limit)`` under the profiling lock, again (up to ``attempts`` in all) while a
    profiler outside the grader holds the counters. Returns the run, or None and why the
    counters could not be had."""
    deadline = time.monotonic() + time_limit_s
    for tries in range(1, attempts + 1):
        left = deadline - time.monotonic()
        try:
            with profiling_lock(left, folder) as waited:
                run = attempt(left - waited)
        except TimeoutError as exc:
            return None, f"another grader kept the profiler busy for {time_limit_s:g} s ({exc})"
        except HostStateError as exc:  # a lock folder another user prepared: no profiling, and why
            return None, str(exc)
        if run.timed_out or BUSY_MARK not in run.log:  # the profiler's own report, never what the program printed
            return run, ""
        if tries < attempts and deadline - time.monotonic() > pause_s:
            time.sleep(pause_s)
    return None, (f"the GPU's performance counters stayed busy through {tries} tries: another profiler "
                  "(Nsight Compute outside the grader, DCGM) was collecting on this GPU")


def cache_path(cache_key: str, cache_dir: Path, library: Path, folder: str = "counters") -> Path:
    """Where a run of ``library`` is kept (its counters, or in ``folder`` a tool's other runs): by
    what was asked and the library's bytes."""
    digest = hashlib.sha256(cache_key.encode() + library.read_bytes()).hexdigest()[:32]
    return cache_dir / folder / f"{digest}.json"


def profile(
    library: Path,
    task: Task | Callable[[], Task],
    metrics: tuple[str, ...],
    dirs: RunDirs,
    time_limit_s: float,
    isolation: Isolation,
    cache_key: str | None = None,
    cache_dir: Path | None = None,
    gpu: GpuInfo | None = None,
) -> CounterRun:
    """Run one case ``task`` of the worker (of ``library``) under ncu and collect ``metrics``,
    holding ``gpu``'s profiling lock. ``task`` may be a function that writes the case's inputs,
    called only when the run is not cached.

    ncu's report comes through a pipe that only the grader reads: what the program printed
    (forged CSV rows, a fake "counters busy") is never parsed."""
    cache_file = cache_path(cache_key, cache_dir, library) if cache_key and cache_dir else None
    kept = cached(cache_file) if cache_file is not None else None
    if kept is not None:
        return kept
    if callable(task):
        task = task()
    run, early = run_profiler(task, metrics, dirs, time_limit_s, isolation, gpu)
    if run is None:
        return early
    failure = run.failure("the profiled process ended early")
    if failure:
        return failed_run(failure, run)
    counted = judged(metrics, kernel_rows(run.log), run.result.kernels_launched if run.result else None, run.log, run.seconds)
    if cache_file is not None:
        store(cache_file, counted, metrics)
    return counted


def cached(cache_file: Path) -> CounterRun | None:
    """The trusted run ``store`` kept in ``cache_file`` (None: none is)."""
    private_dir(cache_file.parent, "the counters cache")
    stored = read_private(cache_file, CACHE_LIMIT_BYTES, "a cached counter run")
    if stored is None:
        return None
    data = json.loads(stored)
    return CounterRun(values=data["values"], kernels=tuple(data["kernels"]), cached=True, replayed=data.get("replayed") is True)


def store(cache_file: Path, run: CounterRun, metrics: tuple[str, ...]) -> None:
    """Keep a complete run's counters of ``metrics`` (what ``cache_file`` is keyed on, not the
    others a shared session collected) where ``profile`` finds them; nothing of another run."""
    if run.complete:  # (its folder made here as by ``cached``, which need not have been asked first)
        data = {"values": {m: run.values[m] for m in metrics if m in run.values}, "kernels": list(run.kernels), "replayed": run.replayed}
        write_private(private_dir(cache_file.parent, "the counters cache") / cache_file.name, json.dumps(data).encode())


def run_profiler(task: Task | int, metrics: tuple[str, ...], dirs: RunDirs, time_limit_s: float, isolation: Isolation,
                 gpu: GpuInfo | None, stop: Stop | None = None, collect: tuple[str, ...] = ()) -> tuple[ToolRun | None, CounterRun]:
    """``task`` run under ncu collecting ``metrics`` (or what the options ``collect`` ask), holding
    ``gpu``'s profiling lock: the run, or None and why there is nothing to read (no ncu, no permission,
    counters busy, timed out or stopped once ``stop`` was set). ``task`` may be the pipe its job comes
    through (``run_under_tool``): it is tried once, not again while the counters are busy."""
    ncu = toolchain.find("ncu")
    if ncu is None:
        return None, CounterRun(skipped="Nsight Compute (ncu) is not installed on this machine")
    cmd = [
        str(ncu), *(collect or ("--metrics", ",".join(metrics), "--csv", "--print-units", "base")),
        # kernels by their symbols, demangled as the compiled-code checks name them
        "--print-kernel-base", "mangled", "--clock-control", "none", "--log-file", TOOL_LOG,
        # cudaProfilerStop() in student code hides no kernel: the profiler's list of what ran is whole
        "--disable-profiler-start-stop",
    ]
    attempts = iter(range(1, 100))
    run, busy = run_when_counters_free(
        lambda limit: run_under_tool(cmd, task, dirs.sub(f"try{next(attempts)}"), limit, isolation, stop=stop), time_limit_s,
        folder=lock_folder(gpu), attempts=1 if isinstance(task, int) else BUSY_ATTEMPTS)
    if run is None:
        return None, CounterRun(skipped=busy)
    if run.timed_out:
        return None, CounterRun(error=f"did not finish within {time_limit_s:g} s under the profiler and was killed",
                                seconds=run.seconds)
    problem = _permission_problem(run.log)
    if problem:
        return None, CounterRun(skipped=problem, log=cap_lines(run.log, 20), seconds=run.seconds)
    return run, CounterRun()


def failed_run(why: str, run: ToolRun) -> CounterRun:
    """A profiled case that failed, with the profiler's and the program's output."""
    return CounterRun(error=why, log=cap_lines(f"{run.log}\n{run.console}".strip(), 30), seconds=run.seconds)


def judged(metrics: tuple[str, ...], rows: list[KernelRow], launched: Sequence[str] | None, text: str,
           seconds: float) -> CounterRun:
    """What one completed case's profiled kernels ``rows`` say (``launched``: its worker reply's)."""
    values, kernels = summed(rows), [demangle(row.name) for row in rows]
    if not kernels:
        return CounterRun(error=NO_KERNEL, log=cap_lines(text, 30), seconds=seconds)
    missing = [m for m in metrics if m not in values]
    if missing:
        return CounterRun(
            skipped=f"ncu did not report {', '.join(missing)} on this GPU", log=cap_lines(text, 30), seconds=seconds
        )
    hidden = hidden_kernels(launched, kernels)
    if hidden:
        return CounterRun(hidden=hidden, kernels=tuple(kernels), seconds=seconds)
    return CounterRun(values=values, kernels=tuple(kernels), log="", seconds=seconds)


def hidden_kernels(launched: Sequence[str] | None, profiled: list[str]) -> str:
    """Why the profile cannot be trusted ("" if it can): the launcher ran more distinct kernels,
    by the runtime's own record of its launches, than the profiler saw. The profiler ignores
    ``cudaProfilerStop()`` (``--disable-profiler-start-stop``), so this is a second net: the record
    is the worker's word, and can only add doubt, never take a kernel out of the profile."""
    if launched is None:
        return ""  # unknown (a launch without a name): nothing to hold the profile against
    seen = len(set(profiled))
    if seen >= len(launched):
        return ""
    names = ", ".join(sorted(demangle(str(n)) for n in launched)[:5])
    return (f"your launcher ran {plural(len(launched), 'distinct kernel')} ({names}) but the "
            f"profiler saw {seen}: kernels were hidden from it (cudaProfilerStop?), so nothing could be measured")


def counter_value(values: Mapping[str, float], check: CounterCheck) -> float:
    """The check's figure: ``scale`` times the summed metric, divided by the summed ``per`` metric if given."""
    top = check.scale * sum(values[m] for m in split_metrics(check.metric))
    if not check.per:
        return top
    bottom = sum(values[m] for m in split_metrics(check.per))
    return top / bottom if bottom > 0 else math.nan


def fmt_counter(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


class Profiles:
    """The profiler runs of one lab's counter checks: checks on the same case (params and seed)
    share one run that collects every metric they need, for the student and for each baseline."""

    def __init__(self, checks: tuple[CounterCheck, ...]):
        self.checks = checks
        self.metrics: dict[CaseKey, tuple[str, ...]] = {}
        self.first: dict[CaseKey, str] = {}
        for check in checks:
            key = self.case(check)
            self.metrics[key] = tuple(dict.fromkeys(self.metrics.get(key, ()) + check.metric_names))
            self.first.setdefault(key, check.id)
        self.runs: dict[tuple[str, CaseKey], CounterRun] = {}
        self.refused: dict[CaseKey, str] = {}  # why the replayer left a case to Nsight Compute

    @staticmethod
    def case(check: CounterCheck) -> CaseKey:
        return (tuple(sorted(check.params.items())), check.seed, check.inputs)

    def settle(self, whose: str, key: CaseKey, run: CounterRun) -> None:
        """Take ``run`` as ``whose`` run of case ``key`` (made elsewhere: a shared session)."""
        self.runs[(whose, key)] = run

    def run(self, whose: str, check: CounterCheck, profile: Callable[[tuple[str, ...]], CounterRun]) -> CounterRun:
        key = (whose, self.case(check))
        if key not in self.runs:
            self.runs[key] = profile(self.metrics[self.case(check)])
        return self.runs[key]


def student_run(sub: Submission, check: CounterCheck, profiles: Profiles) -> CounterRun:
    """The student's profiled case of ``check``, sandboxed: settled already, or run alone now."""
    dirs = sub.tool_dirs(f"ncu-{check.id}")
    return profiles.run("student", check, lambda metrics: profile(
        sub.library, tool_task(sub, check, dirs), metrics, dirs, sub.time_left(check.time_limit_s), sub.isolation,
        gpu=sub.gpu))


def baseline_run(sub: Submission, check: CounterCheck, profiles: Profiles) -> CounterRun:
    """``check.baseline``'s profiled case, trusted and cached (per GPU, driver, metrics and case)."""
    base_lib = baseline_library(sub.spec, check.baseline, sub.archs, sub.cache_dir)
    trusted = sub.trusted_dirs().sub(f"ncu-{check.id}")

    def profile_baseline(metrics: tuple[str, ...]) -> CounterRun:
        return profile(base_lib, lambda: tool_task(sub, check, trusted, base_lib), metrics, trusted, sub.time_left(check.time_limit_s),
                       sub.isolation.for_baselines(), cache_key=baseline_key(sub.gpu, metrics, check, sub.spec), cache_dir=sub.cache_dir, gpu=sub.gpu)
    return profiles.run(f"baseline {check.baseline}", check, profile_baseline)


def baseline_key(gpu: GpuInfo | None, metrics: tuple[str, ...], check: CounterCheck, spec: LabSpec) -> str:
    """What a profiled case is cached under (with the library's bytes: ``cache_path``): the GPU,
    driver and profiler, the metrics, the case, and what makes its inputs."""
    return (f"{gpu and gpu.name}|{gpu and gpu.driver}|{toolchain.identity('ncu')}|{sorted(metrics)}|{sorted(check.params.items())}"
            f"|{check.seed}|{check.inputs}|{problem_version(spec)}")


def grade(sub: Submission, check: CounterCheck, profiles: Profiles) -> CheckResult:
    """One counter check: the student's run sandboxed, the baseline's trusted (and cached)."""
    mine = student_run(sub, check, profiles)
    if mine.skipped:
        return CheckResult(check.id, Stage.COUNTERS, Outcome.SKIPPED, 0, check.points, mine.skipped)
    if mine.error:
        return CheckResult(check.id, Stage.COUNTERS, Outcome.ERROR, 0, check.points, f"under the profiler: {mine.error}", mine.log)
    if mine.hidden:
        return CheckResult(check.id, Stage.COUNTERS, Outcome.FAIL, 0, check.points, mine.hidden,
                           measured={"kernels": ", ".join(mine.kernels)})
    v_student = counter_value(mine.values, check)
    v_base, base_error = None, ""
    if check.baseline:
        base = baseline_run(sub, check, profiles)
        base_error = base.skipped or base.error or base.hidden
        if not base_error:
            v_base = counter_value(base.values, check)
    measured = {"student": v_student if math.isfinite(v_student) else "n/a", "kernels": ", ".join(mine.kernels),
                "profile_seconds": round(mine.seconds, 2), "counted_by": "replayer" if mine.replayed else "ncu"}
    measured.update({k: v for k, v in (("profile_session_cases", mine.session), ("profile_session_early", mine.early),
                                       ("profile_kept", mine.cached),  # (kept: from an earlier grade of this code)
                                       ("replayer_refused", profiles.refused.get(profiles.case(check)))) if v})
    if (shared_with := profiles.first[profiles.case(check)]) != check.id:
        measured["profile_run_of"] = shared_with
    measured.update({m: mine.values[m] for m in check.metric_names})
    if v_base is not None:
        measured[check.baseline] = v_base
    case = params_label(check.params)
    if check.kind == "reduction":
        if v_base is None:
            return CheckResult(check.id, Stage.COUNTERS, Outcome.SKIPPED, 0, check.points,
                               f"the {check.baseline} kernel could not be profiled: {base_error}")
        ratio = v_base / v_student if v_student > 0 else math.inf
        pts = partial_credit(ratio, check.zero, check.full, check.points)
        msg = (
            f"{check.what}: {fmt_counter(v_student)} against {fmt_counter(v_base)} for the {check.baseline} kernel "
            f"({case}), {ratio:.1f}x fewer (full marks at >= {check.full:g}x, none at <= {check.zero:g}x)"
        )
        measured["ratio"] = round(ratio, 3) if math.isfinite(ratio) else "inf"
    else:
        if math.isnan(v_student):
            pts = 0.0
            msg = f"{check.what}: nothing to measure, your kernels executed none of {check.per} ({case})"
        else:
            pts = partial_credit(-v_student, -check.zero, -check.full, check.points)
            msg = f"{check.what}: {fmt_counter(v_student)} ({case}; full marks at <= {check.full:g}, none at >= {check.zero:g})"
        if v_base is not None:
            msg += f"; the {check.baseline} kernel: {fmt_counter(v_base)}"
    where, location = _lines(sub, check, profiles) if pts < check.points and check.by_line else ("", None)
    msg += f"; where: {where}" if where else ""
    if pts < check.points and check.hint:
        msg += f". {check.hint}"
    outcome = Outcome.PASS if pts >= check.points else Outcome.FAIL
    return CheckResult(check.id, Stage.COUNTERS, outcome, pts, check.points, msg, "", measured, mine.seconds, location=location)


def _lines(sub: Submission, check: CounterCheck, profiles: Profiles) -> tuple[str, SourceLocation | None]:
    """The student's lines that ``check``'s figure comes from, by one source-counter run per case."""
    def source_page(metrics: tuple[str, ...]) -> CounterRun:
        dirs = sub.tool_dirs(f"ncu-lines-{check.id}")
        run, _ = run_profiler(tool_task(sub, check, dirs), (), dirs, sub.time_left(check.time_limit_s), sub.isolation, sub.gpu,
                              collect=counterlines.NCU_ARGS)
        return CounterRun(log=run.log if run is not None and not run.failure("") else "")  # the page, or none
    return counterlines.lines(check.by_line, profiles.run("student source page", check, source_page).log, sub)
