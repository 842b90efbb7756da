"""Grading one submission for one lab: the flow. Each check family lives with its tool
(``sass.static_checks``, ``correctness``, ``sanitizer.grade``, ``speed.measured``, ``counters.grade``)
and sees the submission through one frozen :class:`Submission`.

``grade()`` is the engine's per-submission entry point: it never raises for problems in the
submission (they become check results) and is safe to call many times in one process.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from ..cachedirs import default_cache_dir
from ..checks import sanitizer, sanitizerbatch, speed
from ..checks.correctness import grade_case
from ..checks.counters import launched, traffic
from ..checks.counters.batch import ProfileBatch, all_kept, counted
from ..checks.counters.ncu import Profiles
from ..checks.counters.replay.collect import replay_by
from ..checks.sanitizerbatch import SanitizerBatch
from ..checks.sass import static_checks
from ..checks.timing import Measurement, TimedRun, baselines_of
from ..host import toolchain
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
from .plan import course_only_results, fill_checks, gated_check, in_plan_order, launcher_prototype, planned_checks, runnable, without_gpu


class LabGrading:
    """One submission for one lab, graded in two halves.

    ``start()`` compiles, inspects the compiled code, runs the correctness cases and starts the
    sanitizer and counter runs in the background; ``finish()`` waits for them and times
    (``timed()``), then scores (``report()``). Grading a repo starts every lab first, times each
    only when no other GPU work is left (``wait()``), so profilers never run beside a timed call,
    and scores a lab beside the next one's timing. Neither half raises for problems
    in the submission: they become check results. From a student bundle only the lab's
    ``runnable`` part is graded; the report lists the rest as graded on the course's runner.
    """

    def __init__(self, spec: LabSpec, source: Path, options: GradeOptions = GradeOptions(),
                 progress: Progress = no_progress, display_name: str | None = None,
                 batch: ProfileBatch | None = None, sanitizers: SanitizerBatch | None = None):
        self.batch = batch  # the repository's shared counter session, if any
        self.sanitizer_batch = sanitizers  # ... and its shared sanitizer runs
        self._sent_to_batch = False
        self.whole = spec  # the lab as the course grades it: what the report lists
        self.spec, self.source, self.options, self.progress = runnable(spec), source, options, progress
        self.name = display_name or source.name
        self.clock, self.sandbox = StageClock(), sandbox_for(options)
        self.deadline = time.monotonic() + options.submission_limit_s
        self.checks: list[CheckResult] = []
        self.env: dict[str, object] = {}
        self.timings: dict[str, Mapping[str, Any]] = {}
        self.kernels: tuple[KernelResources, ...] = ()
        self.sub: Submission | None = None
        self.profiles: Profiles | None = None  # the student's profiled cases: counters, and what ran
        self.worker: WorkerSession | None = None
        self.baselines: WorkerSession | None = None
        self.trusted: WorkerSession | None = None
        self.background = Background(self.spec, self.clock)
        self._correctness_over = threading.Event()
        self._opened = self._all_kept = False  # (all kept: every profiled case kept from an earlier grade)
        self._run: TimedRun | None = None  # the opened timing, until timed() samples it
        self._measurement: Measurement | None = None  # the timing, until report() scores it
        self.end_workers = True  # close() ends the workers (else the caller does: sessions())
        self._counter_checks: list[CheckResult] = []
        self._work: Path | None = None
        self._done = False

    # ---------------------------------------------------------------- first half

    def start(self) -> "LabGrading":
        try:
            return self._start()
        finally:
            if not self._sent_to_batch:
                self._leave_batch()  # nothing of this lab's to profile in the shared session
            self._leave_sanitizer_batch()  # ... nor to run under the sanitizers (sent at the start, if any)

    def _leave_batch(self) -> None:
        """Tell the shared profiler session this lab sends nothing (more): it need not wait for it."""
        if self.batch is not None:
            self.batch.send(self.spec.id, [])

    def _wake_profiler(self) -> None:
        """New code, or runs not all kept: the repository's profiler session starts now."""
        if self.batch is not None and self._profiled():
            self.batch.wake()

    def _leave_sanitizer_batch(self) -> None:
        """... and the shared sanitizer runs (a lab's first send is the one that counts)."""
        if self.sanitizer_batch is not None:
            self.sanitizer_batch.send(self.spec.id, [])

    def _start(self) -> "LabGrading":
        spec, options = self.spec, self.options
        if not self._profiled():
            self._leave_batch()  # nothing of this lab's to profile: the shared session need not wait for its cases
        probe = probe_for(options)
        self._describe_environment(probe, archs := archs_for(options, probe))
        self.progress(f"[{spec.id}] compiling {self.name} for {', '.join(archs)}")
        with self.clock.stage(Stage.COMPILE.value):
            build = lab_build(spec, self.source, archs, options.cache_dir, display_name=self.name, sandbox=self.sandbox,
                              on_compile=self._wake_profiler)
        self.env["build_cached"] = build.cached
        if not build.ok or build.library is None:
            message = build.message
            if f'"{spec.launcher.name}"' in message or f"`{spec.launcher.name}`" in message:
                message += f"; the launcher must be exactly: {launcher_prototype(spec)}"
            self.checks.append(CheckResult("compile", Stage.COMPILE, Outcome.ERROR, 0, 0, message, build.log,
                                           duration_s=build.seconds, location=build.error_at))
            self.checks += fill_checks(spec, self.checks, set(Stage), Outcome.FAIL, "not graded: the file did not compile")
            self._done = True
            return self
        warn = "\n".join(line for line in build.log.splitlines() if "warning" in line.lower())
        self.checks.append(CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, build.message, warn, duration_s=build.seconds))
        self.kernels = build.kernels
        with self.clock.stage(Stage.STATIC.value):
            self.checks += static_checks(spec, build.library, build.kernels)
        if probe.gpu is None:
            self.checks, self._done = without_gpu(spec, self.checks, probe.reason), True
            return self

        cache_dir = options.cache_dir or default_cache_dir()
        self._work = work_folder(options, "grade-")
        isolation = Isolation(self.sandbox, read_only=(build.library, spec.files.problem),
                              cupy_cache=kernel_cache(options))
        sub = self.sub = Submission(spec, self.name, build.library, build.kernels, archs, load_problem(spec), isolation,
                                    cache_dir, self._work, self.deadline, options.submission_limit_s, secret_of(options),
                                    probe.gpu, source_lines=source_lines(self.source))
        self._all_kept = options.reuse_tool_runs and all_kept(sub, launched.profiles_for(spec, options.timing))
        if not self._all_kept:
            self._wake_profiler()
        # Sanitizer and counter runs are separate processes on tiny cases, each in a thread of its own: they
        # overlap the correctness cases (their counts do not depend on what else runs); timing waits for them
        self.background.open(len(spec.sanitizers) + 1)
        if spec.sanitizers and not options.sanitizers:
            self.background.done([CheckResult(c.id, Stage.SANITIZER, Outcome.SKIPPED, 0, c.points,
                                              "compute-sanitizer turned off (--no-sanitizers)") for c in spec.sanitizers])
        elif spec.sanitizers:
            self.progress(f"[{spec.id}] compute-sanitizer: {', '.join(c.tool for c in spec.sanitizers)} (in the background)")
            if self.sanitizer_batch is not None:
                self.sanitizer_batch.send_made(spec.id, lambda: sanitizerbatch.requests_of(sub, options.reuse_tool_runs))
            for check in spec.sanitizers:
                self.background.run(Stage.SANITIZER, functools.partial(sanitizerbatch.grade, sub, check, self.sanitizer_batch,
                                                                       options.reuse_tool_runs), (check.id,))
        self.worker = WorkerSession(sub.student_dirs(), isolation)
        # no student code reaches it: it owns the student's buffers and times the baselines
        self.trusted = baselines_worker(key_of(probe.gpu), isolation.for_baselines())
        if spec.benchmark and spec.benchmark.checks and options.timing:
            self.baselines = self.trusted
        try:
            with self.clock.stage(Stage.CORRECTNESS.value):
                self._correctness(sub, self.worker, self.trusted)
        finally:
            self._correctness_over.set()
        self._keep_worker_for_timing()
        return self

    def _describe_environment(self, probe: GpuProbe, archs: tuple[str, ...]) -> None:
        self.env.update(nvcc=toolchain.nvcc_version(), archs=",".join(archs), sandbox=self.sandbox.describe())
        if probe.gpu:
            self.env.update(gpu=probe.gpu.name, compute_capability="%d.%d" % probe.gpu.compute_capability,
                            driver=probe.gpu.driver)
            self.env.update({f"health.{k}": v for k, v in probe.health.items()})
        else:
            self.env["gpu"] = f"none: {probe.reason}"

    def _correctness(self, sub: Submission, worker: WorkerSession, trusted: WorkerSession) -> None:
        spec, hung, counting = self.spec, False, False
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
            self.progress(f"[{spec.id}] correctness {i + 1}/{len(cases)}: {case.label}")
            result = grade_case(sub, worker, trusted, case, f"case{i}")
            self.checks.append(result)
            hung = result.measured.get("status") == "timeout"
            if hung:  # it would hang under each sanitizer and the profiler too, whose verdicts are gated now
                sub.moot.set()
            if not counting and self._profiled() and result.outcome is Outcome.PASS:
                # counters start with the first passing case (started beside the sanitizers: 12 s on an H100, 5 to 7 s now)
                counting = self._sent_to_batch = True  # counted() sends this lab's cases
                profiles = self.profiles = launched.profiles_for(spec, self.options.timing)
                what = ", ".join(dict.fromkeys(c.what for c in profiles.checks))  # (the traffic is one figure per timed kernel)
                how = ("kept from an earlier grade of this code" if self._all_kept else
                       "the replayer, in the background" if self.options.counter_source == "replay" else "Nsight Compute, in the background")
                self.progress(f"[{spec.id}] counters: {what} ({how})")
                self.background.run(Stage.COUNTERS, functools.partial(counted, sub, self.batch, self._correct_when_done, profiles,
                                                                     self.options.reuse_tool_runs, replay_by(self.options, self.progress)))

    def _profiled(self) -> bool:
        """Whether the student's cases are profiled: for the counter checks, and for the record of
        which kernels ran that the compiled-code checks are judged on."""
        return self.options.counters and launched.profiled(self.spec, self.options.timing)

    def _rejudge_static(self) -> None:
        """Judge the compiled-code checks again on the kernels the profiler saw run; where it kept
        no record, the verdicts on the whole file stand, and a skipped one says why."""
        sub = self.sub
        if sub is None or not self.spec.static:
            return
        seen = launched.record(self.profiles.runs) if self.profiles is not None else launched.Record(
            unknown="hardware counters turned off (--no-counters)" if not self.options.counters else "no correctness case passed")
        if seen.unknown:
            self.checks = [dataclasses.replace(c, message=f"{c.message} (not recorded here: {seen.unknown})")
                           if c.stage is Stage.STATIC and c.outcome is Outcome.SKIPPED else c for c in self.checks]
            return
        judged = {c.id: c for c in static_checks(self.spec, sub.library, sub.kernels, set(seen.names))}
        self.checks = [judged.get(c.id, c) if c.stage is Stage.STATIC else c for c in self.checks]

    def _keep_worker_for_timing(self) -> None:
        """Keep the worker that ran the correctness cases for the timing, stopped until then
        (SIGSTOP: none of its code runs beside another lab's timed calls), so that the timing
        makes no CUDA context of its own; end it where there is nothing to time. The baselines'
        worker starts now if it has not yet."""
        if self.worker is None:
            return
        if self.baselines is not None and self._correct():
            speed.hold(self.worker, True)
            self.baselines.spawn()
        else:
            self.worker.kill()

    def _correct_when_done(self) -> bool:
        """``_correct()`` once the correctness cases have all run."""
        self._correctness_over.wait()
        return self._correct() and not self._done

    def _correct(self) -> bool:
        """Whether every correctness case passed (what the later stages are gated on)."""
        return all(c.outcome is Outcome.PASS for c in self.checks if c.stage is Stage.CORRECTNESS)

    # ---------------------------------------------------------------- second half

    def finish(self) -> LabReport:
        """The second half: :meth:`timed`, then :meth:`report`."""
        return self.timed().report()

    def open_timing(self) -> "LabGrading":
        """Wait for the background runs, gate on correctness and open the timing (nothing is timed
        yet): a repository opens every lab's at once, then times each in turn."""
        try:
            if not self._done and not self._opened:
                self._opened = True
                self._finish_on_gpu()
        except BaseException:
            self.close()
            raise
        return self

    def timed(self) -> "LabGrading":
        """:meth:`open_timing`, then time: all the second half does on the GPU."""
        self.open_timing()
        run, self._run = self._run, None
        if run is not None and self._done:
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
                self._measurement = timed  # scored by report()
        return self

    def sessions(self) -> list[WorkerSession]:
        """The lab's own workers (not the baselines', which outlives it), for a caller that ends
        them itself (``end_workers`` False)."""
        return [self.worker] if self.worker is not None else []

    def report(self) -> LabReport:
        """Score what was timed and close: the CPU's part, which may run beside the next lab's timing."""
        try:
            if not self._done:
                self._finish_on_cpu()
        finally:
            self.close()
        checks = in_plan_order(self.whole, [*self.checks, *course_only_results(self.whole)])
        return LabReport(self.spec.id, self.spec.title, self.name, tuple(checks), self.env, self.kernels,
                         self.timings, self.clock.seconds)

    def _finish_on_gpu(self) -> None:
        spec = self.spec
        tool_checks = self.background.wait()
        self._rejudge_static()
        passed = self._correct()
        sanitizer_checks = [c for c in tool_checks if c.stage is Stage.SANITIZER]
        self._counter_checks = [c for c in tool_checks if c.stage is Stage.COUNTERS]
        if not passed:  # what an empty or broken kernel trivially passes earns nothing
            gated = {c.id for c in spec.static if c.after_correctness} | {c.id for c in sanitizer_checks}
            self.checks = [gated_check(c) if c.id in gated else c for c in self.checks]
            sanitizer_checks = [gated_check(c) for c in sanitizer_checks]
        self.checks = sanitizer.explain_nans(self.checks, sanitizer_checks, spec)
        self.checks += sanitizer_checks
        if spec.benchmark and spec.benchmark.checks:
            self._speed(passed, sanitizer.stray_writes(sanitizer_checks))

    def _finish_on_cpu(self) -> None:
        spec, options = self.spec, self.options
        if self._measurement is not None and self.sub is not None and self.worker is not None:
            with self.clock.stage(Stage.SPEED.value):
                checks, timings = speed.scored(self.sub, self.worker, self._measurement)
            self.checks += checks
            self.env.update({f"device.{k}": v for k, v in timings.pop("_device", {}).items()})
            self.clock.seconds.update({f"{Stage.SPEED.value}.{k}": v for k, v in timings.pop("_phases", {}).items()})
            self.timings = traffic.joined(spec, timings, self.profiles)
        if spec.counters:
            if not self._correct():
                self.checks += fill_checks(spec, self.checks, {Stage.COUNTERS}, Outcome.FAIL, GATE)
            elif not options.counters:
                self.checks += fill_checks(spec, self.checks, {Stage.COUNTERS}, Outcome.SKIPPED, "hardware counters turned off (--no-counters)")
            else:
                self.checks += self._counter_checks
        order = {cid: i for i, (cid, _, _) in enumerate(planned_checks(spec))}
        self.checks.sort(key=lambda c: order.get(c.id, len(order)))

    def _speed(self, passed: bool, unsafe: str) -> None:
        spec, sub = self.spec, self.sub
        assert spec.benchmark is not None
        if not passed:
            self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.FAIL, GATE)
        elif unsafe:
            self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.FAIL, unsafe)
        elif not self.options.timing:
            self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.SKIPPED, "timing turned off (--no-timing)")
        elif sub is None or sub.time_left() <= 0:
            message = sub.out_of_time() if sub else "not run"
            self.checks += fill_checks(spec, self.checks, {Stage.SPEED}, Outcome.ERROR, message)
        else:
            assert self.worker is not None and self.baselines is not None
            self.progress(f"[{spec.id}] timing against {', '.join(baselines_of(spec.benchmark))}")
            with self.clock.stage(Stage.SPEED.value):
                opened = speed.opened(sub, self.worker, self.baselines)
            if isinstance(opened, list):
                self.checks += opened
            else:
                self._run = opened  # sampled by timed()

    def close(self) -> None:
        """Stop the worker and background runs and remove scratch files (idempotent)."""
        self._done = True
        self._correctness_over.set()  # a counter run waiting on the cases goes on, and finds nothing to run alone
        self._leave_batch()  # a counter run cancelled before it sent its cases must not hold the others
        self._leave_sanitizer_batch()
        self.background.cancel()
        for session in self.sessions() if self.end_workers else ():
            session.kill()
        self.worker = self.baselines = self.trusted = None
        if self._run is not None:
            self._run.release()
        self._run = None
        if self._work is not None and self.options.keep_work is None:
            shutil.rmtree(self._work, ignore_errors=True)
        self._work = None
        self._done = True


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
