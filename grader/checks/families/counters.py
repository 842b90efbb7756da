"""The counter family: checks judged on the student's hardware counters (``checks.counters``),
a repository's cases profiled in one session (``counters.batch``) or read by the replayer."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping

from ...host import gputurns, toolchain
from ...isolation.launch import Isolation
from ...isolation.options import GradeOptions, Progress, archs_for, kernel_cache, probe_for, sandbox_for, work_folder
from ...isolation.runner import WorkerSession
from ...labspec.spec import LabSpec
from ...outcome import GATE, CheckResult, Outcome, Stage, fmt_points
from ..counters import launched, traffic
from ..counters.baselines import profile_baselines
from ..counters.batch import EarlySession, ProfileBatch, all_kept, counted
from ..counters.ncu import Profiles
from ..counters.replay import service
from ..counters.replay.collect import replay_baselines_ahead, replay_by
from ..counters.replay.handoff import ASK_WAIT_S, Recorder
from ..sass import static_checks
from .base import CheckFamily, Planned, Shared, ToolStart
from .text import case_params

ALL_KEPT = "counters.all_kept"  # (in ``ToolStart.found``) every profiled case kept from an earlier grade
PROFILES = "counters.profiles"  # ... the student's profiled cases: counters, and what ran
RECORDER = "counters.recorder"  # ... the replay's record tasks, for the correctness worker to run


class CounterFamily(CheckFamily):
    name = "counters"
    stage = Stage.COUNTERS
    late = True

    def planned(self, spec: LabSpec) -> list[Planned]:
        return [(c.id, self.stage, c.points) for c in spec.counters]

    def course_only(self, spec: LabSpec) -> set[str]:
        return {c.id for c in spec.counters if c.course_only}

    def describe(self, spec: LabSpec) -> list[str]:
        if not spec.counters:
            return []
        out = [f"**Hardware counters** ({fmt_points(sum(c.points for c in spec.counters))} points; Nsight Compute, "
               "one launch, never timed), only once every correctness case passes. Credit grows linearly "
               "between the two bounds:", "",
               "| Check | Points | Measures | Case | No credit at | Full credit at |",
               "| --- | --- | --- | --- | --- | --- |"]
        for counter in spec.counters:
            measure = counter.what
            if counter.kind == "reduction":
                zero, full = f"<= {counter.zero:g}x fewer than the {counter.baseline} kernel", f">= {counter.full:g}x fewer"
            else:
                zero, full = f">= {counter.zero:g}", f"<= {counter.full:g}"
            out.append(f"| `{counter.id}` | {fmt_points(counter.points)} | {measure} | {case_params(counter.params)} | {zero} | {full} |")
        out.append("")
        metrics = sorted({m for c in spec.counters for m in c.metric_names})
        return [*out, "Metrics: " + ", ".join(f"`{m}`" for m in metrics) + ".", ""]

    def threads(self, spec: LabSpec) -> int:
        return 1

    def shared(self, specs: list[LabSpec], options: GradeOptions) -> Shared | None:
        return ProfileBatch([spec.id for spec in specs], early_profiler(specs, options))

    def helpers(self, options: GradeOptions) -> list[Callable[[], object]]:
        """The replayer (an nvcc build of 8 s on a cold cache, which every lab's counters would wait for)."""
        probe = probe_for(options)
        if not options.counters or options.counter_source != "replay" or probe.gpu is None:
            return []
        return [functools.partial(service.built, archs_for(options, probe), options.cache_dir)]

    def ahead(self, specs: list[LabSpec], options: GradeOptions, progress: Progress) -> None:
        """The baselines' cases of every lab measured ahead: by the replayer where it is built, in
        the background beside the labs' correctness cases (``replay.collect.replay_baselines_ahead``);
        else by Nsight Compute, in few trusted sessions before the labs start (``counters.baselines``)."""
        if not options.counters:
            return
        if options.counter_source != "replay" or not replay_baselines_ahead(specs, options, progress):
            profile_baselines(specs, options, progress)

    def begin(self, spec: LabSpec, options: GradeOptions, shared: Shared | None) -> None:
        if shared is not None and not profiled(spec, options):
            shared.send(spec.id, [])  # nothing of this lab's to profile: the shared session need not wait for its cases

    def compiled(self, spec: LabSpec, options: GradeOptions, shared: Shared | None) -> None:
        """New code: the repository's profiler session starts now."""
        if isinstance(shared, ProfileBatch) and profiled(spec, options):
            shared.wake()

    def prepare(self, tools: ToolStart) -> None:
        sub, options = tools.sub, tools.options
        kept = tools.found[ALL_KEPT] = options.reuse_tool_runs and all_kept(sub, launched.profiles_for(sub.spec, options.timing))
        if not kept:  # runs not all kept: the repository's profiler session starts now
            self.compiled(sub.spec, options, tools.shared.get(self.name))

    def on_first_pass(self, tools: ToolStart) -> None:
        """The counters start with the first passing case (beside the sanitizers: 12 s on an H100, 5 to 7 s now)."""
        sub, options, spec = tools.sub, tools.options, tools.sub.spec
        if not profiled(spec, options):
            return
        tools.sent.add(self.name)  # counted() sends this lab's cases
        profiles = launched.profiles_for(spec, options.timing)
        tools.found[PROFILES] = profiles
        what = ", ".join(dict.fromkeys(c.what for c in profiles.checks))  # (the traffic is one figure per timed kernel)
        how = ("kept from an earlier grade of this code" if tools.found.get(ALL_KEPT) else
               "the replayer, in the background" if options.counter_source == "replay" else "Nsight Compute, in the background")
        tools.progress(f"[{spec.id}] counters: {what} ({how})")
        batch = tools.shared.get(self.name)
        assert batch is None or isinstance(batch, ProfileBatch)
        recorder = None
        if options.counter_source == "replay":  # (the correctness worker records the replay's calls)
            recorder = tools.found[RECORDER] = Recorder()
        tools.runs.run(Stage.COUNTERS, functools.partial(_counted, recorder, sub, batch, tools.passed, profiles,
                                                         options.reuse_tool_runs,
                                                         replay_by(options, tools.progress, recorder, tools.runs.spent)))

    def cases_over(self, tools: ToolStart, worker: WorkerSession | None) -> None:
        """The replay's calls recorded by the correctness worker, where the replay asked for them."""
        recorder = tools.found.get(RECORDER)
        if isinstance(recorder, Recorder):
            sub = tools.sub
            recorder.serve(None if worker is None else lambda task, limit: worker.run(task, sub.time_left(limit)),
                           sub.time_left(ASK_WAIT_S))

    def rejudged(self, tools: ToolStart, checks: list[CheckResult]) -> list[CheckResult]:
        """The compiled-code checks judged again on the kernels the counters saw run; where they
        kept no record, the verdicts on the whole file stand, and a skipped one says why."""
        sub, profiles = tools.sub, profiles_of(tools)
        if not sub.spec.static:
            return checks
        seen = launched.record(profiles.runs) if profiles is not None else launched.Record(
            unknown="hardware counters turned off (--no-counters)" if not tools.options.counters else "no correctness case passed")
        if seen.unknown:
            return [dataclasses.replace(c, message=f"{c.message} (not recorded here: {seen.unknown})")
                    if c.stage is Stage.STATIC and c.outcome is Outcome.SKIPPED else c for c in checks]
        judged = {c.id: c for c in static_checks(sub.spec, sub.library, sub.kernels, set(seen.names))}
        return [judged.get(c.id, c) if c.stage is Stage.STATIC else c for c in checks]

    def scored_late(self, spec: LabSpec, options: GradeOptions, correct: bool, results: list[CheckResult],
                    reported: list[CheckResult]) -> list[CheckResult]:
        if not spec.counters:
            return []
        if not correct:
            return self.unrun(spec, reported, Outcome.FAIL, GATE)
        if not options.counters:
            return self.unrun(spec, reported, Outcome.SKIPPED, "hardware counters turned off (--no-counters)")
        return results

    def joined(self, tools: ToolStart | None, timings: dict[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
        """Each timed kernel's DRAM traffic, where the counters measured it."""
        return traffic.joined(tools.sub.spec, timings, profiles_of(tools)) if tools is not None else timings


def _counted(recorder: Recorder | None, *args: Any) -> list[CheckResult]:
    """``counted(*args)``; the lab's correctness worker is then told that no record will be asked
    for, whatever became of the replay (a word it waits for, at most ``handoff.ASK_WAIT_S``)."""
    try:
        return counted(*args)
    finally:
        if recorder is not None:
            recorder.decline()


def profiled(spec: LabSpec, options: GradeOptions) -> bool:
    """Whether the student's cases are profiled: for the counter checks, and for the record of
    which kernels ran that the compiled-code checks are judged on."""
    return options.counters and launched.profiled(spec, options.timing)


def profiles_of(tools: ToolStart | None) -> Profiles | None:
    """The student's profiled cases, once the counters started (None before, or where they never do)."""
    found = tools.found.get(PROFILES) if tools is not None else None
    assert found is None or isinstance(found, Profiles)
    return found


def early_profiler(specs: list[LabSpec], options: GradeOptions) -> EarlySession | None:
    """A student's profiler session, to start before their labs' cases are known (once a lab's
    new code compiles, or code whose runs were not kept), where two labs or more have counter
    checks (None where it would not run: no GPU, no profiler)."""
    # the labs profiled: for their counter checks, their timed case's traffic, or the record of which kernels ran
    profiled = [spec for spec in specs if launched.profiled(spec, options.timing)]
    if len(profiled) < 2 or not options.counters or options.counter_source != "ncu" or toolchain.find("ncu") is None or gputurns.active():
        return None  # (where GPU work takes turns, its job would wait for a turn while it holds the profiler)
    gpu = probe_for(options).gpu
    if gpu is None:
        return None
    metrics = tuple(dict.fromkeys(m for spec in profiled for ms in launched.profiles_for(spec, options.timing).metrics.values() for m in ms))
    isolation = Isolation(sandbox_for(options), read_only=tuple(spec.files.problem for spec in profiled),
                          cupy_cache=kernel_cache(options))
    root = work_folder(options, "grade-profiler-")
    return EarlySession(root, metrics, isolation, gpu, options.submission_limit_s)
