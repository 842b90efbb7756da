"""Grading one submission for one lab: compile, inspect, run, check, time, count, score.

``grade()`` is the engine's per-submission entry point: it never raises for problems in the
submission (they become check results) and is safe to call many times in one process.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping

import numpy as np

from . import compile as nvcc
from . import counters, expr, gpu, sanitizer, sass, toolchain
from . import sandbox as sandboxing
from .check import compare
from .errors import internal_error_message
from .labs import load_problem
from .outcome import CheckResult, Outcome, Stage, partial_credit
from .runner import Isolation, RunDirs, TaskResult, WorkerSession
from .safeio import load_npy
from .spec import Case, CounterCheck, LabSpec, SanitizerCheck, params_label, split_metrics
from .timing import should_stop, summarize


def default_archs() -> tuple[str, ...]:
    """Archs to build for when there is no GPU to ask: ``GRADER_ARCHS`` (comma-separated) or sm_90."""
    return tuple(a.strip() for a in os.environ.get("GRADER_ARCHS", "sm_90").split(",") if a.strip())

Progress = Callable[[str], None]


@dataclass(frozen=True)
class GradeOptions:
    archs: tuple[str, ...] | None = None  # default: the GPU's, else default_archs()
    cache_dir: Path | None = None
    timing: bool = True
    counters: bool = True
    gpu: bool = True  # False: run only the checks that need no GPU
    keep_work: Path | None = None  # keep worker files under this folder
    sandbox: bool = True  # run compile and run steps in bubblewrap where it is installed
    submission_limit_s: float = 600.0  # all of one submission's grading, compile to counters
    secret: str | None = None  # seeds the graded inputs; default: $GRADER_SECRET, else new per run


#: Graded inputs come from this secret unless one is given: never written where the worker can read.
_RUN_SECRET = os.urandom(16).hex()


def secret_seed(options: GradeOptions, lab: str, what: str, seed: int) -> int:
    """The seed actually used for a graded input: the YAML seed mixed with the run's secret.

    Students know the YAML seeds; they cannot know the secret, so outputs cannot be precomputed.
    """
    secret = options.secret or os.environ.get("GRADER_SECRET") or _RUN_SECRET
    digest = hashlib.sha256(f"{secret}|{lab}|{what}|{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def sandbox_for(options: GradeOptions) -> sandboxing.Sandbox:
    return sandboxing.detect() if options.sandbox else sandboxing.Sandbox(None, reason="turned off (--no-sandbox)")


@dataclass(frozen=True)
class LabReport:
    lab: str
    title: str
    submission: str
    checks: tuple[CheckResult, ...]
    environment: Mapping[str, object] = field(default_factory=dict)
    kernels: tuple[nvcc.KernelResources, ...] = ()
    timings: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    stage_seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return round(sum(c.points for c in self.checks), 2)

    @property
    def max_score(self) -> float:
        return round(sum(c.max_points for c in self.checks), 2)

    @property
    def skipped_points(self) -> float:
        return round(sum(c.max_points for c in self.checks if c.outcome is Outcome.SKIPPED), 2)


def probe_for(options: GradeOptions) -> gpu.GpuProbe:
    return gpu.probe() if options.gpu else gpu.GpuProbe(None, "GPU checks turned off (--no-gpu)")


def archs_for(options: GradeOptions, probe: gpu.GpuProbe) -> tuple[str, ...]:
    return options.archs or ((probe.gpu.arch,) if probe.gpu else default_archs())


def prebuild(items: list[tuple[LabSpec, Path, str]], options: GradeOptions, jobs: int | None = None) -> None:
    """Compile many submissions and their labs' baselines in parallel, into the build cache.

    Only an optimisation for batches: grading then finds every build cached. Failures are left
    for grading to report.
    """
    archs = archs_for(options, probe_for(options))
    sandbox = sandbox_for(options)
    builds = {(spec.id, path, display): (spec, sandbox) for spec, path, display in items if path.is_file()}
    for spec, _, _ in items:
        if options.gpu:
            for name in {"reference", *spec.files.baselines}:
                builds[(spec.id, spec.baseline_source(name), None)] = (spec, None)
    with ThreadPoolExecutor(max_workers=jobs or max(1, min(8, os.cpu_count() or 1))) as pool:
        futures = [pool.submit(_build, spec, path, archs, options, display, box)
                   for (_, path, display), (spec, box) in builds.items()]
        for future in futures:
            try:
                future.result()
            except Exception:
                pass


def no_progress(_: str) -> None:
    pass


class _Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - t0, 3)


def planned_checks(spec: LabSpec) -> list[tuple[str, Stage, float]]:
    """Every check a lab grades, in report order: (id, stage, points)."""
    out = [("compile", Stage.COMPILE, 0.0)]
    out += [(c.id, Stage.STATIC, c.points) for c in spec.static]
    out += [(f"correctness[{c.label}]", Stage.CORRECTNESS, c.points) for c in spec.correctness.cases]
    out += [(c.id, Stage.SANITIZER, c.points) for c in spec.sanitizers]
    if spec.benchmark:
        out += [(c.id, Stage.SPEED, c.points) for c in spec.benchmark.checks]
    out += [(c.id, Stage.COUNTERS, c.points) for c in spec.counters]
    return out


def launcher_prototype(spec: LabSpec) -> str:
    """The launcher's declaration as the lab's header writes it."""
    for line in spec.files.header.read_text(encoding="utf-8").splitlines():
        if f" {spec.launcher.name}(" in line and not line.lstrip().startswith("//"):
            return line.strip()
    return spec.launcher.name


def fill_checks(spec: LabSpec, done: list[CheckResult], stages: set[Stage], outcome: Outcome, message: str) -> list[CheckResult]:
    have = {c.id for c in done}
    return [
        CheckResult(cid, stage, outcome, 0.0, pts, message)
        for cid, stage, pts in planned_checks(spec)
        if stage in stages and cid not in have
    ]


class LabGrading:
    """One submission for one lab, graded in two halves.

    ``start()`` compiles, inspects the compiled code, runs the correctness cases and starts the
    sanitizer and counter runs in the background; ``finish()`` waits for them, times and scores.
    Grading a repo starts every lab first and times each only when no other GPU work is left
    (``wait()``), so profilers never run beside a timed call. Neither half raises for problems
    in the submission: they become check results.
    """

    def __init__(self, spec: LabSpec, source: Path, options: GradeOptions = GradeOptions(),
                 progress: Progress = no_progress, display_name: str | None = None):
        self.spec, self.source, self.options, self.progress = spec, source, options, progress
        self.name = display_name or source.name
        self.clock = _Clock()
        self.sandbox = sandbox_for(options)
        self.deadline = time.monotonic() + options.submission_limit_s
        self.baselines: WorkerSession | None = None
        self.checks: list[CheckResult] = []
        self.env: dict[str, object] = {}
        self.timings: dict[str, Mapping[str, float]] = {}
        self.kernels: tuple[nvcc.KernelResources, ...] = ()
        self.archs: tuple[str, ...] = ()
        self.library: Path | None = None
        self.probe: gpu.GpuProbe | None = None
        self.problem = None
        self.scratch: Path | None = None  # the grading's private folder (see student_dirs())
        self.launched: set[str] | None = set()  # kernels the correctness cases ran; None: unknown
        self.cases_run = 0  # correctness cases whose every run completed
        self.worker: WorkerSession | None = None
        self.background: list[Future] = []
        self.counters_started = False
        self._pool: ThreadPoolExecutor | None = None
        self._done = False

    # ---------------------------------------------------------------- first half

    def start(self) -> "LabGrading":
        spec, options = self.spec, self.options
        probe = self.probe = probe_for(options)
        self.archs = archs_for(options, probe)
        self.env.update(nvcc=toolchain.nvcc_version(), archs=",".join(self.archs), sandbox=self.sandbox.describe())
        if probe.gpu:
            self.env.update(gpu=probe.gpu.name, compute_capability="%d.%d" % probe.gpu.compute_capability,
                            driver=probe.gpu.driver)
            self.env.update({f"health.{k}": v for k, v in probe.health.items()})
        else:
            self.env["gpu"] = f"none: {probe.reason}"

        self.progress(f"[{spec.id}] compiling {self.name} for {', '.join(self.archs)}")
        with self.clock.stage("compile"):
            build = _build(spec, self.source, self.archs, options, display_name=self.name, sandbox=self.sandbox)
        self.env["build_cached"] = build.cached
        if not build.ok:
            message = build.message
            if f'"{spec.launcher.name}"' in message or f"`{spec.launcher.name}`" in message:
                message += f"; the launcher must be exactly: {launcher_prototype(spec)}"
            self.checks.append(CheckResult("compile", Stage.COMPILE, Outcome.ERROR, 0, 0, message, build.log, duration_s=build.seconds))
            self.checks += fill_checks(spec, self.checks, set(Stage), Outcome.FAIL, "not graded: the file did not compile")
            self._done = True
            return self
        warn = "\n".join(l for l in build.log.splitlines() if "warning" in l.lower())
        self.checks.append(CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, build.message, warn, duration_s=build.seconds))
        assert build.library is not None
        self.library, self.kernels = build.library, build.kernels

        with self.clock.stage("static"):
            self.checks += _static_checks(spec, build.library, build.kernels)

        if probe.gpu is None:
            gated = {c.id for c in spec.static if c.after_correctness}
            wait = f"scored only once every correctness case passes, which needs a GPU: {probe.reason}"
            self.checks = [
                CheckResult(c.id, c.stage, Outcome.SKIPPED, 0, c.max_points, f"{c.message}; {wait}") if c.id in gated else c
                for c in self.checks
            ]
            gpu_stages = {Stage.CORRECTNESS, Stage.SANITIZER, Stage.SPEED, Stage.COUNTERS}
            self.checks += fill_checks(spec, self.checks, gpu_stages, Outcome.SKIPPED, f"needs a GPU: {probe.reason}")
            self._done = True
            return self

        self.problem = load_problem(spec)
        if options.keep_work is not None:
            options.keep_work.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="grade-", dir=options.keep_work))
        # Sanitizer and counter runs are separate processes on tiny cases: they overlap the
        # correctness cases (their counts do not depend on what else runs); timing waits for them.
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"{spec.id}-tools")
        if spec.sanitizers:
            self.progress(f"[{spec.id}] compute-sanitizer: {', '.join(c.tool for c in spec.sanitizers)} (in the background)")
            self.background.append(self._pool.submit(self._timed, Stage.SANITIZER, self._sanitizer_checks))
        isolation = self.isolation(build.library)
        self.worker = WorkerSession(self.student_dirs(), isolation)
        if spec.benchmark and spec.benchmark.checks and options.timing:
            # the baselines are timed in a worker of their own, which no student code can reach;
            # it starts now, beside the correctness cases
            self.baselines = WorkerSession(self.trusted_dirs(), isolation.for_baselines())
            self.baselines.spawn()
        with self.clock.stage("correctness"):
            hung = False
            cases = spec.correctness.cases
            for i, case in enumerate(cases):
                cid = f"correctness[{case.label}]"
                if hung:  # a kernel that hangs once hangs again: do not wait out every limit
                    self.checks.append(CheckResult(cid, Stage.CORRECTNESS, Outcome.ERROR, 0, case.points,
                                                   "not run: an earlier case did not finish"))
                    continue
                if self.time_left() <= 0:
                    self.checks.append(CheckResult(cid, Stage.CORRECTNESS, Outcome.ERROR, 0, case.points, self.out_of_time()))
                    continue
                self.progress(f"[{spec.id}] correctness {i + 1}/{len(cases)}: {case.label}")
                seed = secret_seed(options, spec.id, cid, case.seed)
                result = _correctness(spec, self.problem, case, build.library, self.worker, f"case{i}",
                                      seed, self.time_left(spec.correctness.time_limit_s))
                self.note_launched(result)
                self.checks.append(result)
                hung = result.measured.get("status") == "timeout"
                if not self.counters_started and spec.counters and options.counters and result.outcome is Outcome.PASS:
                    self.counters_started = True
                    self.progress(f"[{spec.id}] counters: {', '.join(c.what for c in spec.counters)} (Nsight Compute, in the background)")
                    self.background.append(self._pool.submit(self._timed, Stage.COUNTERS, self._counter_checks))
        self.rejudge_static()
        return self

    def rejudge_static(self) -> None:
        """Judge the compiled-code checks again on the kernels the correctness cases ran."""
        if self.launched is None or self.library is None or not self.spec.static or not self.cases_run:
            return
        if self.launched and not self.launched & {k.name for k in self.kernels}:
            return  # names that match no kernel of the file: judge the file as a whole
        judged = {c.id: c for c in _static_checks(self.spec, self.library, self.kernels, self.launched)}
        self.checks = [judged.get(c.id, c) if c.stage is Stage.STATIC else c for c in self.checks]

    # The grading's folder holds three kinds of places: ``grader/`` only the grader writes (inputs,
    # task files; the sandbox sees it read-only), ``student/`` and ``runs/`` the student's runs may
    # write (read back only through safeio), ``baselines/`` the trusted runs' own.
    def student_dirs(self) -> RunDirs:
        assert self.scratch is not None
        return RunDirs(self.scratch / "grader", self.scratch / "student")

    def trusted_dirs(self) -> RunDirs:
        assert self.scratch is not None
        return RunDirs(self.scratch / "grader" / "baselines", self.scratch / "baselines")

    def tool_dirs(self, name: str) -> RunDirs:
        """The folders of one sanitizer or profiler run of the student's code."""
        assert self.scratch is not None
        return RunDirs(self.scratch / "grader" / name, self.scratch / "runs" / name)

    def note_launched(self, result: CheckResult) -> None:
        """Add the kernels a correctness case ran to what the static checks judge."""
        names = result.measured.get("kernels_launched")
        if self.launched is None or names is None:
            return
        self.cases_run += 1
        if names == "unknown":
            self.launched = None
        else:
            self.launched.update(str(n) for n in names)  # type: ignore[union-attr]

    @property
    def cupy_cache(self) -> Path:
        return (self.options.cache_dir or nvcc.default_cache_dir()) / "cupy-kernels"

    def isolation(self, library: Path) -> Isolation:
        """How the student's code runs: sandboxed, seeing its library and the lab's generator."""
        return Isolation(self.sandbox, read_only=(library, self.spec.files.problem), cupy_cache=self.cupy_cache)

    def time_left(self, limit: float = math.inf) -> float:
        """Seconds a step may take: its own limit, within what is left of the submission's."""
        return max(0.0, min(limit, self.deadline - time.monotonic()))

    def out_of_time(self) -> str:
        return f"not run: grading this submission reached its time limit of {self.options.submission_limit_s:g} s"

    def _timed(self, stage: Stage, fn: Callable[[], list[CheckResult]]) -> list[CheckResult]:
        """Run a background batch; a grader bug in it becomes errors on its checks, with an id."""
        t0 = time.monotonic()
        try:
            return fn()
        except Exception as exc:
            message = internal_error_message(exc)
            return [CheckResult(cid, st, Outcome.ERROR, 0, pts, message) for cid, st, pts in planned_checks(self.spec) if st is stage]
        finally:
            name = {Stage.SANITIZER: "sanitizers", Stage.COUNTERS: "counters"}.get(stage, stage.value)
            self.clock.seconds[name] = round(time.monotonic() - t0, 3)

    def _sanitizer_checks(self) -> list[CheckResult]:
        assert self.library is not None and self.scratch is not None
        return [
            _sanitize(self.spec, self.problem, check, self.library, self.tool_dirs(f"sanitizer-{check.id}"), self.name,
                      self.isolation(self.library), self.time_left(check.time_limit_s))
            for check in self.spec.sanitizers
        ]

    def _counter_checks(self) -> list[CheckResult]:
        assert self.library is not None and self.scratch is not None and self.probe is not None
        profiles = _Profiles(self.spec.counters)
        return [
            _counter(self.spec, self.problem, check, self.library, self.archs, self.probe.gpu, self.options,
                     self.tool_dirs(f"ncu-{check.id}"), self.trusted_dirs().sub(f"ncu-{check.id}"),
                     self.isolation(self.library), self.time_left(check.time_limit_s), profiles)
            for check in self.spec.counters
        ]

    def wait(self) -> list[CheckResult]:
        """Block until the background runs are done; their results, in order."""
        out: list[CheckResult] = []
        if self.background:
            with self.clock.stage("waiting_for_tools"):
                for future in self.background:
                    out += future.result()
        return out

    # ---------------------------------------------------------------- second half

    def finish(self) -> LabReport:
        try:
            if not self._done:
                self._finish()
        finally:
            self.close()
        return LabReport(self.spec.id, self.spec.title, self.name, tuple(self.checks), self.env, self.kernels,
                         self.timings, self.clock.seconds)

    def _finish(self) -> None:
        spec, options = self.spec, self.options
        tool_checks = self.wait()
        passed = all(c.outcome is Outcome.PASS for c in self.checks if c.stage is Stage.CORRECTNESS)
        gate = "not graded: correctness checks failed (fix those first)"
        sanitizer_checks = [c for c in tool_checks if c.stage is Stage.SANITIZER]
        counter_checks = [c for c in tool_checks if c.stage is Stage.COUNTERS]
        if not passed:  # what an empty or broken kernel trivially passes earns nothing
            gated = {c.id for c in spec.static if c.after_correctness} | {c.id for c in sanitizer_checks}
            self.checks = [
                CheckResult(c.id, c.stage, Outcome.FAIL, 0, c.max_points, gate) if c.id in gated and c.outcome is Outcome.PASS else c
                for c in self.checks
            ]
            sanitizer_checks = [
                CheckResult(c.id, c.stage, Outcome.FAIL, 0, c.max_points, gate) if c.outcome is Outcome.PASS else c
                for c in sanitizer_checks
            ]
        self.checks += sanitizer_checks
        if spec.benchmark and spec.benchmark.checks:
            if not passed:
                self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.FAIL, gate)
            elif not options.timing:
                self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.SKIPPED, "timing turned off (--no-timing)")
            elif self.time_left() <= 0:
                self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.ERROR, self.out_of_time())
            else:
                assert self.worker is not None and self.library is not None and self.baselines is not None
                self.progress(f"[{spec.id}] timing against {', '.join(sorted({c.baseline for c in spec.benchmark.checks}))}")
                with self.clock.stage("timing"):
                    seed = secret_seed(options, spec.id, "timing", spec.benchmark.seed)
                    speed, timings = _speed(spec, self.problem, self.library, self.archs, options, self.worker,
                                            self.baselines, "timing", seed, self.deadline)
                self.checks += speed
                self.env.update({f"device.{k}": v for k, v in timings.pop("_device", {}).items()})
                self.timings = timings
        if spec.counters:
            if not passed:
                self.checks += fill_checks(spec, self.checks, {Stage.COUNTERS}, Outcome.FAIL, gate)
            elif not options.counters:
                self.checks += fill_checks(spec, self.checks, {Stage.COUNTERS}, Outcome.SKIPPED, "hardware counters turned off (--no-counters)")
            else:
                self.checks += counter_checks
        order = {cid: i for i, (cid, _, _) in enumerate(planned_checks(spec))}
        self.checks.sort(key=lambda c: order.get(c.id, len(order)))

    def close(self) -> None:
        """Stop the worker and background runs and remove scratch files (idempotent)."""
        if self._pool is not None:
            for future in self.background:
                future.cancel()
            self._pool.shutdown(wait=True)
            self._pool = None
        for session in (self.worker, self.baselines):
            if session is not None:
                session.kill()
        self.worker = self.baselines = None
        if self.scratch is not None and self.options.keep_work is None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.scratch = None
        self._done = True


def grade(
    spec: LabSpec,
    source: Path,
    options: GradeOptions = GradeOptions(),
    progress: Progress = no_progress,
    display_name: str | None = None,
) -> LabReport:
    """Grade one submission for one lab (the engine's per-submission entry point)."""
    grading = LabGrading(spec, source, options, progress, display_name)
    try:
        grading.start()
    except BaseException:
        grading.close()
        raise
    return grading.finish()


# ------------------------------------------------------------------ static


def _static_checks(spec: LabSpec, library: Path, kernels: tuple[nvcc.KernelResources, ...] = (),
                   launched: set[str] | None = None) -> list[CheckResult]:
    """The compiled-code checks; with ``launched``, only kernels that ran are judged (a kernel the
    file defines but never launches earns nothing)."""
    if not spec.static:
        return []
    try:
        facts = sass.inspect(library)
    except sass.SassUnavailable as exc:
        return [CheckResult(c.id, Stage.STATIC, Outcome.SKIPPED, 0, c.points, str(exc)) for c in spec.static]
    scope = ""
    if launched is not None:
        unused = {k.name for k in kernels} - launched
        facts = facts.without(unused)
        scope = f" (judged on the kernels that ran: {', '.join(sorted(launched)) or 'none'})"
    unsure = launched is None and len(kernels) > 1  # which of several kernels run is not known yet
    out = []
    for c in spec.static:
        ok, evidence = sass.requirement_met(facts, c.require)
        if unsure and not sass.settled_without_knowing_what_ran(c.require, ok):
            out.append(CheckResult(c.id, Stage.STATIC, Outcome.SKIPPED, 0, c.points,
                                   f"{evidence}; your file defines {len(kernels)} kernels, and only those that run "
                                   "count: which ones do is seen when the correctness cases run on a GPU"))
            continue
        evidence += scope
        message = evidence if ok else f"{evidence}. {c.hint}".strip()
        out.append(
            CheckResult(c.id, Stage.STATIC, Outcome.PASS if ok else Outcome.FAIL, c.points if ok else 0, c.points, message)
        )
    return out


# ------------------------------------------------------------------ correctness


def _launcher_dict(spec: LabSpec) -> dict:
    return {
        "name": spec.launcher.name,
        "args": [
            {"name": a.name, "role": a.role, "dtype": a.dtype, "shape": list(a.shape), "init": a.init,
             "ctype": a.ctype, "value": a.value, "host": a.host}
            for a in spec.launcher.args
        ],
    }


def _write_inputs(spec: LabSpec, problem, params: Mapping[str, int], seed: int, folder: Path) -> tuple[dict, dict]:
    folder.mkdir(parents=True, exist_ok=True)
    inputs = problem.generate(dict(params), seed, np)
    paths = {}
    for arg in spec.launcher.args:
        if arg.role == "input":
            path = folder / f"{arg.name}.npy"
            np.save(path, inputs[arg.name])
            paths[arg.name] = str(path)
    return inputs, paths


CUDA_ERROR_HINTS = (
    (("InvalidConfiguration", "InvalidValue", "LaunchOutOfResources"),
     "check the launch configuration: at most 1024 threads per block, every grid dimension at least 1, "
     "shared memory within the device's limit"),
    (("IllegalAddress", "MisalignedAddress"), "a kernel read or wrote outside its buffers: check the index arithmetic and bounds"),
)


def _failure_from_task(result: TaskResult, cid: str, stage: Stage, points: float) -> CheckResult:
    """A non-ok worker result as a check: errors for crashes, hangs and CUDA errors."""
    if result.status == "cuda_error":
        msg = f"CUDA error: {result.reason}"
        for names, hint in CUDA_ERROR_HINTS:
            if any(n in result.reason for n in names):
                msg += f" ({hint})"
                break
    elif result.status == "worker_error":
        msg = "internal grader error while running your code (see the log)"
    elif result.status == "out_of_memory":
        msg = f"{result.reason}; the next case runs in a fresh process"
    else:
        msg = result.reason
    details = result.reason if result.status == "worker_error" else ""
    if result.log_tail:
        details = (details + "\n" if details else "") + "output of your program:\n" + result.log_tail
    return CheckResult(cid, stage, Outcome.ERROR, 0, points, msg, details, {"status": result.status}, result.seconds)


def _output_limit(want: np.ndarray) -> int:
    """The most an output file of ``want``'s shape may hold (the .npy header included)."""
    return int(want.nbytes) + (64 << 10)


def _correctness(spec: LabSpec, problem, case: Case, library: Path, worker: WorkerSession, folder: str,
                 seed: int, time_limit_s: float) -> CheckResult:
    """Run a case ``repeat`` times on the same inputs; the first wrong run decides."""
    cid = f"correctness[{case.label}]"
    inputs, paths = _write_inputs(spec, problem, case.params, seed, worker.dirs.inbox / folder)
    expected = problem.expected(inputs, dict(case.params))
    max_err, seconds, wrong_runs, first_wrong = 0.0, 0.0, 0, None
    launched: set[str] | None = set()
    for run in range(case.repeat):
        task = {
            "kind": "case", "id": cid, "lib": str(library), "launcher": _launcher_dict(spec),
            "params": dict(case.params), "inputs": paths, "out_dir": str(worker.dirs.outbox / folder),
            "guard": spec.correctness.guard_elements,
        }
        result = worker.run(task, time_limit_s)
        if result.status != "ok":
            return _failure_from_task(result, cid, Stage.CORRECTNESS, case.points)
        names = result.data.get("kernels_launched")
        if launched is not None and isinstance(names, list):
            launched.update(nvcc.demangle(str(n)) for n in names)
        else:
            launched = None
        seconds += result.seconds
        problems, details = [], []
        for name, (before, after) in result.data.get("guard_violations", {}).items():
            problems.append(f"wrote outside {name}: {before} bytes changed before it, {after} after it")
        for name in result.data.get("inputs_modified", []):
            problems.append(f"modified its input {name} (inputs must be left unchanged)")
        for out, want in expected.items():
            got = load_npy(worker.dirs.outbox, f"{folder}/{out}.npy", _output_limit(want))
            cmp = compare(out, got, want, spec.tolerance, case.params, spec.correctness.max_mismatches_shown)
            max_err = max(max_err, cmp.max_abs_error)
            if not cmp.ok:
                problems.append(cmp.summary)
                details.append(cmp.details())
        if problems:
            wrong_runs += 1
            first_wrong = first_wrong or (problems, details)
    measured = {"max_abs_error": max_err, "seconds": round(seconds, 6), "runs": case.repeat, "wrong_runs": wrong_runs,
                "kernels_launched": sorted(launched) if launched is not None else "unknown"}
    if first_wrong:
        problems, details = first_wrong
        message = "; ".join(problems)
        if case.repeat > 1:
            message = f"wrong on {wrong_runs} of {case.repeat} runs of the same input (a race?); first: {message}"
        return CheckResult(cid, Stage.CORRECTNESS, Outcome.FAIL, 0, case.points, message, "\n".join(details), measured, seconds)
    runs = f", {case.repeat} runs" if case.repeat > 1 else ""
    return CheckResult(
        cid, Stage.CORRECTNESS, Outcome.PASS, case.points, case.points,
        f"correct (largest error {max_err:.2g}{runs})", "", measured, seconds,
    )


# ------------------------------------------------------------------ sanitizers


def _tool_task(spec: LabSpec, problem, check: SanitizerCheck | CounterCheck, dirs: RunDirs) -> dict:
    """The one-launch case task a sanitizer or profiler runs, its inputs written to the inbox."""
    _, paths = _write_inputs(spec, problem, check.params, check.seed, dirs.inbox)
    return {"id": check.id, "launcher": _launcher_dict(spec), "params": dict(check.params), "inputs": paths,
            "out_dir": str(dirs.outbox)}


def _sanitize(spec: LabSpec, problem, check: SanitizerCheck, library: Path, dirs: RunDirs, source_name: str,
              isolation: Isolation, time_limit_s: float) -> CheckResult:
    task = _tool_task(spec, problem, check, dirs)
    run = sanitizer.run(library, task, check.tool, dirs, time_limit_s, source_name, isolation)
    case = params_label(check.params)
    if run.skipped:
        return CheckResult(check.id, Stage.SANITIZER, Outcome.SKIPPED, 0, check.points, run.skipped)
    if run.error:
        return CheckResult(check.id, Stage.SANITIZER, Outcome.ERROR, 0, check.points,
                           f"under compute-sanitizer {check.tool} ({case}): {run.error}", run.log, duration_s=run.seconds)
    measured = {"errors": run.errors, "case": case, "seconds": round(run.seconds, 2)}
    if run.errors:
        first = run.findings[0].replace("\n", " ") if run.findings else "see the details"
        msg = f"{check.tool} reported {run.errors} error(s) ({sanitizer.WHAT[check.tool]}) on {case}; first: {first}"
        if check.hint:
            msg += f". {check.hint}"
        return CheckResult(check.id, Stage.SANITIZER, Outcome.FAIL, 0, check.points, msg,
                           "\n\n".join(run.findings) or run.log, measured, run.seconds)
    return CheckResult(check.id, Stage.SANITIZER, Outcome.PASS, check.points, check.points,
                       f"{check.tool}: no {sanitizer.WHAT[check.tool]} on {case}", "", measured, run.seconds)


# ------------------------------------------------------------------ speed


def _build(spec: LabSpec, source: Path, archs, options: GradeOptions, display_name: str | None = None,
           sandbox: sandboxing.Sandbox | None = None) -> nvcc.BuildResult:
    """Any build for a lab: its header, flags and time limit, and its launcher required.

    Students' files compile in the ``sandbox``; the course's own baselines do not need it.
    """
    return nvcc.build(
        source, spec.files.header, archs, flags=spec.compile.flags, cache_dir=options.cache_dir,
        time_limit_s=spec.compile.time_limit_s, exports=(spec.launcher.name,), display_name=display_name,
        sandbox=sandbox,
    )


def _baseline_library(spec: LabSpec, name: str, archs, options: GradeOptions) -> Path:
    build = _build(spec, spec.baseline_source(name), archs, options)
    if not build.ok or build.library is None:
        raise RuntimeError(f"baseline {name!r} of lab {spec.id} does not compile: {build.message}")
    return build.library


# A sample whose wall-clock time (call to device-wide synchronize) exceeds its event time by more
# than this was not finished on the legacy stream when the launcher returned: it is timed by the
# wall clock instead (work on another stream, or deferred, still counts).
WALL_SLACK = 1.25
WALL_MARGIN_MS = 0.05


#: A timed array the worker saves for the parent's check is read up to this size.
TIMED_ARRAY_LIMIT = 1 << 30
#: Slack on top of the trusted baselines' largest call overhead before a student's sample is bounded.
ROUND_TRIP_SLACK_MS = 0.25


def _bound_by_round_trips(samples: list[float], trips: list[float], trusted: list[tuple[list[float], list[float]]]) -> int:
    """Raise each of the student's reported times to at least what the grader's own clock allows.

    The student's worker reports its times and could forge them; the grader timed the round
    trip of every call. A trusted worker's calls show how much of a round trip is overhead
    (messages, dispatch): the student's time is at least its round trip less that overhead
    (its largest, plus slack). Returns how many samples were raised."""
    overheads = [trip - wall for walls, ts in trusted for wall, trip in zip(walls, ts)]
    if not overheads:
        return 0
    allowance = max(overheads) + ROUND_TRIP_SLACK_MS
    raised = 0
    for i, (reported, trip) in enumerate(zip(samples, trips)):
        floor = trip - allowance
        if reported < floor:
            samples[i] = floor
            raised += 1
    return raised


class _SampleFailed(Exception):
    def __init__(self, who: str, result: TaskResult):
        super().__init__(result.reason)
        self.who, self.result = who, result


def _speed(spec, problem, library, archs, options, worker, baselines_worker, folder: str, seed, deadline) -> tuple[list[CheckResult], dict]:
    """Time the student's launcher against the baselines, interleaved sample by sample.

    The baselines run in a trusted worker of their own; the student's in the sandboxed one,
    which reports its own times: each is bounded below by the grader's round trip of the call.
    """
    bench = spec.benchmark
    baselines = sorted({c.baseline for c in bench.checks})
    libs = {b: str(_baseline_library(spec, b, archs, options)) for b in baselines}
    common = {"launcher": _launcher_dict(spec), "params": dict(bench.params), "problem": str(spec.files.problem), "seed": seed}
    owner = {**{b: baselines_worker for b in baselines}, "student": worker}
    names = [*baselines, "student"]
    cfg = bench.timing

    def limit() -> float:
        return max(0.0, min(bench.time_limit_s, deadline - time.monotonic()))

    def call(who: str, task: dict) -> TaskResult:
        result = owner[who].run(task, limit())
        if result.status != "ok":
            raise _SampleFailed(who, result)
        return result

    samples: dict[str, list[float]] = {n: [] for n in names}
    walls: dict[str, list[float]] = {n: [] for n in names}
    trips: dict[str, list[float]] = {n: [] for n in names}  # the grader's round trip of each timed call
    by_wall = 0
    try:
        device = call(baselines[0], {"kind": "timing_open", "libs": libs, "measure_copy": True, **common}).data["device"]
        call("student", {"kind": "timing_open", "libs": {"student": str(library)}, **common})

        def take(n: str) -> None:
            nonlocal by_wall
            call(n, {"kind": "timing_prepare", "lib": n})
            result = call(n, {"kind": "timing_sample", "lib": n})
            data = result.data
            late = data["wall_ms"] > data["ms"] * WALL_SLACK + WALL_MARGIN_MS
            samples[n].append(data["wall_ms"] if late else data["ms"])
            walls[n].append(data["wall_ms"])
            trips[n].append(result.seconds * 1e3)
            by_wall += late and n == "student"

        for n in names:  # warm up
            t_end = time.monotonic() + cfg.warmup_s
            take(n)
            while time.monotonic() < t_end:
                take(n)
        remeasured = False
        while True:
            for n in names:
                samples[n].clear(), walls[n].clear(), trips[n].clear()
            by_wall = 0
            t_start = time.monotonic()
            while not should_stop(samples, time.monotonic() - t_start, min_samples=cfg.min_samples,
                                  max_samples=cfg.max_samples, target_rse=cfg.target_rse, budget_s=cfg.budget_s):
                for n in names:
                    take(n)
            noisy = [n for n in names if summarize(samples[n]).cv > cfg.max_cv]
            if not noisy or remeasured:
                break
            remeasured = True
        data = call("student", {"kind": "timing_close", "out_dir": str(worker.dirs.outbox / folder)}).data
    except _SampleFailed as failed:
        if failed.who != "student":
            raise RuntimeError(f"the {failed.who} kernel could not be timed: {failed.result.reason}") from None
        failure = _failure_from_task(failed.result, "timing", Stage.SPEED, 0)
        return [CheckResult(c.id, Stage.SPEED, Outcome.ERROR, 0, c.points, f"while timing: {failure.message}", failure.details) for c in bench.checks], {}
    finally:
        baselines_worker.kill()  # frees its GPU memory before anything else is timed
    by_clock = _bound_by_round_trips(samples["student"], trips["student"], [(walls[b], trips[b]) for b in baselines])
    stats = {n: summarize(samples[n], walls[n]) for n in names}
    flops = float(expr.evaluate(bench.flops, bench.params))
    nbytes = float(expr.evaluate(bench.bytes, bench.params))
    timings: dict = {"_device": device}
    for n, st in stats.items():
        row = dict(st.as_dict())
        secs = st.median_ms / 1e3
        if flops:
            row["gflops"] = round(flops / secs / 1e9, 1)
            if device.get("peak_fp32_gflops"):
                row["pct_fp32_peak"] = round(100 * row["gflops"] / device["peak_fp32_gflops"], 1)
        if nbytes:
            row["gbps"] = round(nbytes / secs / 1e9, 1)
            if device.get("peak_dram_gbps"):
                row["pct_dram_peak"] = round(100 * row["gbps"] / device["peak_dram_gbps"], 1)
        row["noisy"] = n in noisy
        timings[n] = row
    timings["student"]["samples_timed_by_wall_clock"] = by_wall
    timings["student"]["samples_bounded_by_round_trip"] = by_clock

    if data.get("inputs_modified"):
        msg = f"modified its input {', '.join(data['inputs_modified'])} during timed calls (inputs must be left unchanged)"
        return [CheckResult(c.id, Stage.SPEED, Outcome.FAIL, 0, c.points, msg) for c in bench.checks], timings
    # the output of the last timed call must be right: result caching or skipped work cannot pay
    outbox = worker.dirs.outbox / folder
    inputs = {k: load_npy(outbox, str(v), TIMED_ARRAY_LIMIT) for k, v in data["check_inputs"].items()}
    want = problem.expected(inputs, dict(bench.params))
    wrong = []
    for name, exp in want.items():
        got = load_npy(outbox, str(data["check_outputs"][name]), _output_limit(exp))
        cmp = compare(name, got, exp, spec.tolerance, bench.params)
        if not cmp.ok:
            wrong.append(cmp)
    if wrong:
        msg = "the output of a timed call was wrong: " + wrong[0].summary
        return [CheckResult(c.id, Stage.SPEED, Outcome.FAIL, 0, c.points, msg, wrong[0].details()) for c in bench.checks], timings

    floor_gbps = device.get("peak_dram_gbps") or 0
    student = stats["student"]
    if nbytes and floor_gbps and student.median_ms / 1e3 < nbytes / (floor_gbps * 1e9):
        floor_ms = nbytes / (floor_gbps * 1e9) * 1e3
        msg = (
            f"impossible time: {student.median_ms:.4f} ms is below the memory floor of {floor_ms:.4f} ms "
            f"({nbytes / 1e6:.1f} MB at the device's peak {floor_gbps:.0f} GB/s); the work was not measured"
        )
        return [CheckResult(c.id, Stage.SPEED, Outcome.ERROR, 0, c.points, msg) for c in bench.checks], timings

    late = ""
    if by_wall:
        late = (f"; {by_wall} of {student.n} samples were timed by the wall clock, because work was still running "
                "when your launcher returned (launch on the default stream, as the lab asks)")
    if by_clock * 2 >= student.n:
        msg = (f"{by_clock} of {student.n} timed calls reported less time than the grader's own clock measured for "
               "them: the timing was tampered with, and the work was not measured")
        return [CheckResult(c.id, Stage.SPEED, Outcome.ERROR, 0, c.points, msg) for c in bench.checks], timings
    if by_clock:
        late += (f"; {by_clock} of {student.n} samples reported less time than the call took by the grader's own "
                 "clock and were timed by it")
    out = []
    for c in bench.checks:
        base = stats[c.baseline]
        ratio = base.median_ms / student.median_ms
        pts = partial_credit(ratio, c.zero, c.full, c.points)
        msg = (
            f"{ratio:.2f}x the speed of the {c.baseline} kernel (full marks at >= {c.full:g}x, none at <= {c.zero:g}x): "
            f"yours {student.median_ms:.3f} ms, {c.baseline} {base.median_ms:.3f} ms (medians of {student.n} and {base.n})"
            f"{late}"
        )
        if pts < c.points and c.hint:
            msg += f". {c.hint}"
        measured = {"ratio": round(ratio, 4), "student_ms": round(student.median_ms, 6), f"{c.baseline}_ms": round(base.median_ms, 6),
                    "student_cv_pct": round(student.cv * 100, 3)}
        out.append(CheckResult(c.id, Stage.SPEED, Outcome.PASS if pts >= c.points else Outcome.FAIL, pts, c.points, msg, "", measured))
    return out, timings


# ------------------------------------------------------------------ counters


def _counter_value(values: Mapping[str, float], check: CounterCheck) -> float:
    """The check's figure: the summed metric, divided by the summed ``per`` metric if given."""
    top = sum(values[m] for m in split_metrics(check.metric))
    if not check.per:
        return top
    bottom = sum(values[m] for m in split_metrics(check.per))
    return top / bottom if bottom > 0 else math.nan


def _fmt_counter(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


class _Profiles:
    """The profiler runs of one lab's counter checks: checks on the same case (params and seed)
    share one run that collects every metric they need, for the student and for each baseline."""

    def __init__(self, checks: tuple[CounterCheck, ...]):
        self.metrics: dict[tuple, tuple[str, ...]] = {}
        self.first: dict[tuple, str] = {}
        for check in checks:
            key = self.case(check)
            self.metrics[key] = tuple(dict.fromkeys(self.metrics.get(key, ()) + check.metric_names))
            self.first.setdefault(key, check.id)
        self.runs: dict[tuple, counters.CounterRun] = {}

    @staticmethod
    def case(check: CounterCheck) -> tuple:
        return (tuple(sorted(check.params.items())), check.seed)

    def run(self, whose: str, check: CounterCheck, profile: Callable[[tuple[str, ...]], counters.CounterRun]) -> counters.CounterRun:
        key = (whose, *self.case(check))
        if key not in self.runs:
            self.runs[key] = profile(self.metrics[self.case(check)])
        return self.runs[key]


def _counter(spec, problem, check: CounterCheck, library, archs, gpu_info, options, dirs: RunDirs, trusted: RunDirs,
             isolation: Isolation, time_limit_s: float, profiles: _Profiles) -> CheckResult:
    """One counter check: the student's run in ``dirs`` (sandboxed), the baseline's in ``trusted``."""
    mine = profiles.run("student", check, lambda metrics: counters.profile(
        library, {**_tool_task(spec, problem, check, dirs), "lib": str(library)}, metrics, dirs, time_limit_s, isolation))
    if mine.skipped:
        return CheckResult(check.id, Stage.COUNTERS, Outcome.SKIPPED, 0, check.points, mine.skipped)
    if mine.error:
        return CheckResult(check.id, Stage.COUNTERS, Outcome.ERROR, 0, check.points, f"under the profiler: {mine.error}", mine.log)
    v_student = _counter_value(mine.values, check)
    v_base, base_error = None, ""
    if check.baseline:
        base_lib = _baseline_library(spec, check.baseline, archs, options)

        def profile_baseline(metrics: tuple[str, ...]) -> counters.CounterRun:
            key = f"{gpu_info.name}|{gpu_info.driver}|{sorted(metrics)}|{sorted(check.params.items())}|{check.seed}"
            return counters.profile(
                base_lib, {**_tool_task(spec, problem, check, trusted), "lib": str(base_lib)}, metrics, trusted,
                check.time_limit_s, isolation.for_baselines(), cache_key=key,
                cache_dir=options.cache_dir or nvcc.default_cache_dir(),
            )

        base = profiles.run(f"baseline {check.baseline}", check, profile_baseline)
        base_error = base.skipped or base.error
        if not base_error:
            v_base = _counter_value(base.values, check)
    measured = {"student": v_student if math.isfinite(v_student) else "n/a", "kernels": ", ".join(mine.kernels),
                "profile_seconds": round(mine.seconds, 2)}
    shared_with = profiles.first[profiles.case(check)]
    if shared_with != check.id:
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
            f"{check.what}: {_fmt_counter(v_student)} against {_fmt_counter(v_base)} for the {check.baseline} kernel "
            f"({case}), {ratio:.1f}x fewer (full marks at >= {check.full:g}x, none at <= {check.zero:g}x)"
        )
        measured["ratio"] = round(ratio, 3) if math.isfinite(ratio) else "inf"
    else:
        if math.isnan(v_student):
            pts = 0.0
            msg = f"{check.what}: nothing to measure, your kernels executed none of {check.per} ({case})"
        else:
            pts = partial_credit(-v_student, -check.zero, -check.full, check.points)
            msg = f"{check.what}: {_fmt_counter(v_student)} ({case}; full marks at <= {check.full:g}, none at >= {check.zero:g})"
        if v_base is not None:
            msg += f"; the {check.baseline} kernel: {_fmt_counter(v_base)}"
    if pts < check.points and check.hint:
        msg += f". {check.hint}"
    outcome = Outcome.PASS if pts >= check.points else Outcome.FAIL
    return CheckResult(check.id, Stage.COUNTERS, outcome, pts, check.points, msg, "", measured, mine.seconds)
