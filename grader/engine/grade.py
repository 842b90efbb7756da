"""Grading one submission for one lab: the flow. Each check family lives with its tool and is
known here only through its protocol (``checks.families``): the engine starts, leaves and gates
their runs, and lets a family's results bear on the others' checks (the compiled-code checks
judged again on the kernels the counters saw run, a NaN explained by memcheck, the timing
stopped by a stray store, the DRAM traffic joined to the timings) through the protocol's hooks,
without naming a family. Every family sees the submission through one frozen
:class:`Submission`.

``grade()`` is the engine's per-submission entry point: it never raises for problems in the
submission (they become check results) and is safe to call many times in one process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import threading
import time
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any, Mapping

from ..cachedirs import default_cache_dir
from ..checks import speed
from ..checks.correctness import grade_case
from ..checks.families.base import ToolStart
from ..checks.families.registry import FAMILIES
from ..checks.sass import static_checks
from ..checks.timing import TimedRun, baselines_of
from ..host import gpu, toolchain
from ..host.gpu import GpuProbe, key_of
from ..isolation.build import lab_build
from ..isolation.launch import Isolation
from ..isolation.options import GradeOptions, Progress, archs_for, kernel_cache, no_progress, probe_for, sandbox_for, secret_of, work_folder
from ..isolation.runner import WorkerSession
from ..isolation.submission import Submission, source_lines
from ..isolation.trusted import baselines_worker
from ..labspec.labs import load_problem
from ..labspec.spec import LabSpec
from ..outcome import GATE, CheckResult, KernelResources, LabReport, Outcome, Stage
from .background import Background, StageClock
from .phases import Lab, Opened, Timed, Together, Workers
from .plan import course_only_results, fill_checks, gated_check, gated_ids, in_plan_order, launcher_prototype, planned_checks, runnable, without_gpu

#: The lab's environment entry: what its student worker's start took (CuPy and the CUDA context), as it says.
WORKER_START = "device.worker_start_s"


class LabGrading:
    """One submission for one lab, graded in phases: ``start()`` compiles, inspects the compiled
    code, starts the families' tool runs and runs the correctness cases; ``open_timing()`` waits
    for the tool runs, gates on correctness and opens the timing; ``timed()`` times; ``report()``
    scores. Grading a repo starts every lab first, times each only when no other GPU work is left,
    so profilers never run beside a timed call, and scores a lab beside the next one's timing.
    No phase raises for problems in the submission: they become check results. From a student
    bundle only the lab's ``runnable`` part is graded; the report lists the rest as graded on the
    course's runner.
    """

    def __init__(self, spec: LabSpec, source: Path, options: GradeOptions = GradeOptions(),
                 progress: Progress = no_progress, display_name: str | None = None, together: Together = Together()):
        self.lab = Lab(spec, runnable(spec), source, display_name or source.name, options, progress, sandbox_for(options),
                       time.monotonic() + options.submission_limit_s)
        self.together = together
        self.clock = StageClock()
        self.background = Background(self.lab.spec, self.clock, progress)
        self.checks: list[CheckResult] = []
        self.env: dict[str, object] = {}
        self.kernels: tuple[KernelResources, ...] = ()
        self.sub: Submission | None = None
        self.tools: ToolStart | None = None  # the families' tool runs, once started
        self.workers: Workers | None = None
        self._cases: Future[bool] = Future()  # whether every correctness case passed, once they all ran
        self._closed = threading.Event()
        self._opened: Opened | None = None
        self._timed: Timed | None = None
        self._work: Path | None = None

    @property
    def whole(self) -> LabSpec:
        return self.lab.whole

    @property
    def spec(self) -> LabSpec:
        return self.lab.spec

    @property
    def name(self) -> str:
        return self.lab.name

    def _over(self) -> bool:
        """Nothing more to grade: compiled code only (no GPU, or it did not compile), or closed."""
        return self.sub is None or self._closed.is_set()

    # ---------------------------------------------------------------- compile, static, correctness

    def start(self) -> "LabGrading":
        try:
            return self._start()
        finally:
            self._leave_shared(self.tools)  # nothing (more) of this lab's to run in the shared runs

    def _leave_shared(self, tools: ToolStart | None) -> None:
        for family in FAMILIES:
            family.leave(tools, self.spec.id, self.together.shared.get(family.name))

    def _start(self) -> "LabGrading":
        lab, spec, options = self.lab, self.lab.spec, self.lab.options
        shared = self.together.shared
        for family in FAMILIES:
            family.begin(spec, options, shared.get(family.name))
        probe = probe_for(options)
        self._describe_environment(probe, archs := archs_for(options, probe))
        lab.progress(f"[{spec.id}] compiling {lab.name} for {', '.join(archs)}")

        def compiled() -> None:
            for family in FAMILIES:
                family.compiled(spec, options, shared.get(family.name))

        with self.clock.stage(Stage.COMPILE.value):
            build = lab_build(spec, lab.source, archs, options.cache_dir, display_name=lab.name, sandbox=lab.sandbox,
                              on_compile=compiled)
        self.env["build_cached"] = build.cached
        if not build.ok or build.library is None:
            message = build.message
            if f'"{spec.launcher.name}"' in message or f"`{spec.launcher.name}`" in message:
                message += f"; the launcher must be exactly: {launcher_prototype(spec)}"
            self.checks.append(CheckResult("compile", Stage.COMPILE, Outcome.ERROR, 0, 0, message, build.log,
                                           duration_s=build.seconds, location=build.error_at))
            self.checks += fill_checks(spec, self.checks, set(Stage), Outcome.FAIL, "not graded: the file did not compile")
            return self
        warn = "\n".join(line for line in build.log.splitlines() if "warning" in line.lower())
        self.checks.append(CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, build.message, warn, duration_s=build.seconds))
        self.kernels = build.kernels
        with self.clock.stage(Stage.STATIC.value):
            self.checks += static_checks(spec, build.library, build.kernels)
        if probe.gpu is None:
            self.checks = without_gpu(spec, self.checks, probe.reason)
            return self

        cache_dir = options.cache_dir or default_cache_dir()
        self._work = work_folder(options, "grade-")
        isolation = Isolation(lab.sandbox, read_only=(build.library, spec.files.problem),
                              cupy_cache=kernel_cache(options))
        sub = self.sub = Submission(spec, lab.name, build.library, build.kernels, archs, load_problem(spec), isolation,
                                    cache_dir, self._work, lab.deadline, options.submission_limit_s, secret_of(options),
                                    probe.gpu, source_lines=source_lines(lab.source))
        # no student code reaches the trusted worker: it owns the student's buffers and times the baselines
        workers = self.workers = Workers(WorkerSession(sub.student_dirs(), isolation),
                                         baselines_worker(key_of(probe.gpu), isolation.for_baselines()),
                                         bool(spec.benchmark and spec.benchmark.checks and options.timing))
        # their contexts are made while the first case is readied, and asked for before the tool runs'
        # contexts: the trusted worker's first, as each lab's first case waits for it
        workers.trusted.spawn_ahead()
        workers.student.spawn_ahead()
        # Sanitizer and counter runs are separate processes on tiny cases, each in a thread of its own: they
        # overlap the correctness cases (their counts do not depend on what else runs); timing waits for them
        tools = self.tools = ToolStart(sub, options, lab.progress, self.background, shared, self._passed_when_done)
        for family in FAMILIES:
            family.prepare(tools)
        self.background.open(sum(family.threads(spec) for family in FAMILIES))
        for family in FAMILIES:
            family.start(tools)
        ended: WorkerSession | None = None
        try:
            with self.clock.stage(Stage.CORRECTNESS.value):
                self._correctness(tools, workers)
            ended = None if sub.moot.is_set() else workers.student
        finally:
            self._cases_over(self._correct())
            for family in FAMILIES:
                family.cases_over(tools, ended)
            if workers.student.start_s is not None:  # (where a host's CUDA context starts queue)
                self.env[WORKER_START] = workers.student.start_s
        self._keep_worker_for_timing(workers)
        return self

    def _describe_environment(self, probe: GpuProbe, archs: tuple[str, ...]) -> None:
        self.env.update(nvcc=toolchain.nvcc_version(), archs=",".join(archs), sandbox=self.lab.sandbox.describe())
        if probe.gpu:
            self.env.update(gpu=probe.gpu.name, compute_capability="%d.%d" % probe.gpu.compute_capability,
                            driver=probe.gpu.driver)
            self.env.update({f"health.{k}": v for k, v in gpu.health(probe.gpu).items()})
        else:
            self.env["gpu"] = f"none: {probe.reason}"

    def _correctness(self, tools: ToolStart, workers: Workers) -> None:
        spec, sub, hung, first_pass = self.spec, tools.sub, False, True
        cases = spec.correctness.cases
        for i, case in enumerate(cases):
            cid = f"correctness[{case.label}]"
            if hung:  # a kernel that hangs once hangs again: do not wait out every limit
                self.checks.append(CheckResult(cid, Stage.CORRECTNESS, Outcome.ERROR, 0, case.points,
                                               "not run: an earlier case did not finish"))
                continue
            if sub.time_left() <= 0:
                self.checks.append(CheckResult(cid, Stage.CORRECTNESS, Outcome.ERROR, 0, case.points, sub.out_of_time()))
                continue
            self.lab.progress(f"[{spec.id}] correctness {i + 1}/{len(cases)}: {case.label}")
            result = grade_case(sub, workers.student, workers.trusted, case, f"case{i}")
            self.checks.append(result)
            hung = result.measured.get("status") == "timeout"
            if hung:  # it would hang under each sanitizer and the profiler too, whose verdicts are gated now
                sub.moot.set()
            if first_pass and result.outcome is Outcome.PASS:
                first_pass = False
                for family in FAMILIES:
                    family.on_first_pass(tools)

    def _keep_worker_for_timing(self, workers: Workers) -> None:
        """Keep the worker that ran the correctness cases for the timing, stopped until then
        (SIGSTOP: none of its code runs beside another lab's timed calls), so that the timing
        makes no CUDA context of its own; end it where there is nothing to time. The baselines'
        worker starts now if it has not yet."""
        if workers.baselines is not None and self._correct():
            speed.hold(workers.student, True)
            workers.baselines.spawn()
        else:
            workers.student.kill()

    def _passed_when_done(self) -> bool:
        """``_correct()`` once the correctness cases have all run (False once closed)."""
        return self._cases.result() and not self._over()

    def _cases_over(self, passed: bool) -> None:
        """The correctness cases are over (the first word counts)."""
        with contextlib.suppress(InvalidStateError):
            self._cases.set_result(passed)

    def _correct(self) -> bool:
        """Whether every correctness case passed (what the later stages are gated on)."""
        return all(c.outcome is Outcome.PASS for c in self.checks if c.stage is Stage.CORRECTNESS)

    # ---------------------------------------------------------------- tools, timing, scoring

    def finish(self) -> LabReport:
        """The phases after ``start()``: :meth:`timed`, then :meth:`report`."""
        return self.timed().report()

    def wait_tools(self) -> list[CheckResult]:
        """Block until the lab's tool runs are over (a repository's timing has the GPU alone after them)."""
        return self.background.wait()

    def open_timing(self) -> "LabGrading":
        """Wait for the tool runs, gate on correctness and open the timing (nothing is timed yet):
        a repository opens every lab's at once, then times each in turn."""
        try:
            if self._opened is None and not self._over():
                self._opened = self._finish_on_gpu()
        except BaseException:
            self.close()
            raise
        return self

    def timed(self) -> "LabGrading":
        """:meth:`open_timing`, then time: all the later phases do on the GPU."""
        self.open_timing()
        opened = self._opened
        run = opened.run if opened is not None else None
        self._opened = dataclasses.replace(opened, run=None) if opened is not None else None
        if run is not None and self._over():
            run.release()
        elif run is not None:
            try:
                with self.clock.stage(Stage.SPEED.value):
                    timed = speed.measured(run)
            except BaseException:
                self.close()
                raise
            if isinstance(timed, list):
                self.checks += timed
            else:
                self._timed = Timed(timed)  # scored by report()
        return self

    def sessions(self) -> list[WorkerSession]:
        """The lab's own workers (not the baselines', which outlives it), for a repository that
        ends them itself (``Together.ends_workers``)."""
        return [self.workers.student] if self.workers is not None else []

    def report(self) -> LabReport:
        """Score what was timed and close: the CPU's part, which may run beside the next lab's timing."""
        timings: dict[str, Mapping[str, Any]] = {}
        try:
            if not self._over():
                timings = self._finish_on_cpu()
        finally:
            self.close()
        checks = in_plan_order(self.whole, [*self.checks, *course_only_results(self.whole)])
        return LabReport(self.spec.id, self.spec.title, self.name, tuple(checks), self.env, self.kernels,
                         timings, self.clock.seconds)

    def _finish_on_gpu(self) -> Opened:
        spec, tools = self.spec, self.tools
        results = self.wait_tools()
        if tools is not None:
            for family in FAMILIES:
                self.checks = family.rejudged(tools, self.checks)
        passed = self._correct()
        if not passed:  # what an empty or broken kernel trivially passes earns nothing
            gated = set(gated_ids(spec))
            self.checks = [gated_check(c) if c.id in gated else c for c in self.checks]
            results = [gated_check(c) for c in results]
        late: list[CheckResult] = []
        stops: list[str] = []
        for family in FAMILIES:
            own = [c for c in results if c.stage is family.stage]
            self.checks = family.explained(spec, self.checks, own)
            stops.append(family.timing_stop(own))
            (late if family.late else self.checks).extend(own)
        if spec.benchmark and spec.benchmark.checks:
            return Opened(self._speed(passed, next((s for s in stops if s), "")), tuple(late))
        return Opened(None, tuple(late))

    def _finish_on_cpu(self) -> dict[str, Mapping[str, Any]]:
        spec, options = self.spec, self.lab.options
        timings: dict[str, Mapping[str, Any]] = {}
        measurement = self._timed.measurement if self._timed is not None else None
        if measurement is not None and self.sub is not None and self.workers is not None:
            with self.clock.stage(Stage.SPEED.value):
                checks, timings = speed.scored(self.sub, self.workers.student, measurement)
            self.checks += checks
            self.env.update({f"device.{k}": v for k, v in timings.pop("_device", {}).items()})
            self.clock.seconds.update({f"{Stage.SPEED.value}.{k}": v for k, v in timings.pop("_phases", {}).items()})
            for family in FAMILIES:
                timings = family.joined(self.tools, timings)
        held = list(self._opened.held) if self._opened is not None else []
        for family in (f for f in FAMILIES if f.late):
            self.checks += family.scored_late(spec, options, self._correct(), [c for c in held if c.stage is family.stage], self.checks)
        order = {cid: i for i, (cid, _, _) in enumerate(planned_checks(spec))}
        self.checks.sort(key=lambda c: order.get(c.id, len(order)))
        return timings

    def _speed(self, passed: bool, unsafe: str) -> TimedRun | None:
        spec, sub, options = self.spec, self.sub, self.lab.options
        assert spec.benchmark is not None
        if not passed:
            self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.FAIL, GATE)
        elif unsafe:
            self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.FAIL, unsafe)
        elif not options.timing:
            self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.SKIPPED, "timing turned off (--no-timing)")
        elif sub is None or sub.time_left() <= 0:
            message = sub.out_of_time() if sub else "not run"
            self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.ERROR, message)
        else:
            assert self.workers is not None and self.workers.baselines is not None
            self.lab.progress(f"[{spec.id}] timing against {', '.join(baselines_of(spec.benchmark))}")
            with self.clock.stage(Stage.SPEED.value):
                opened = speed.opened(sub, self.workers.student, self.workers.baselines)
            if isinstance(opened, list):
                self.checks += opened
            else:
                return opened  # sampled by timed()
        return None

    def close(self) -> None:
        """Stop the worker and background runs and remove scratch files (idempotent)."""
        self._closed.set()
        self._cases_over(False)  # a counter run waiting on the cases goes on, and finds nothing to run alone
        self._leave_shared(None)  # a tool run cancelled before it sent its cases must not hold the others
        self.background.cancel()
        for session in self.sessions() if not self.together.ends_workers else ():
            session.kill()
        self.workers = None
        opened = self._opened
        if opened is not None and opened.run is not None:
            self._opened = dataclasses.replace(opened, run=None)
            opened.run.release()
        if self._work is not None and self.lab.options.keep_work is None:
            shutil.rmtree(self._work, ignore_errors=True)
        self._work = None


def grade(spec: LabSpec, source: Path, options: GradeOptions = GradeOptions(), progress: Progress = no_progress,
          display_name: str | None = None) -> LabReport:
    """Grade one submission for one lab (the engine's per-submission entry point)."""
    grading = LabGrading(spec, source, options, progress, display_name)
    try:
        grading.start()
    except BaseException:
        grading.close()
        raise
    return grading.finish()
