"""What a lab grades, in report order, and the launcher it asks for: facts about a spec, below
the engine (reports and READMEs use them without importing it).

A student bundle (a lab without its course files) grades the ``runnable`` part of a lab: the
checks marked ``course_only`` are reported as skipped, "graded on the course's runner", with
their points still in the maximum.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from ..checks.families.registry import FAMILIES
from ..labspec.spec import LabSpec
from ..outcome import GATE, CheckResult, Outcome, Stage

COURSE_RUNNER = "graded on the course's runner"
COURSE_ONLY_MESSAGE = f"{COURSE_RUNNER} (it needs files of the course that students do not get)"


def planned_checks(spec: LabSpec) -> list[tuple[str, Stage, float]]:
    """Every check a lab grades, in report order: (id, stage, points): the compile check, then each family's."""
    return [("compile", Stage.COMPILE, 0.0), *(planned for family in FAMILIES for planned in family.planned(spec))]


def course_only_ids(spec: LabSpec) -> list[str]:
    """The checks marked ``course_only``, in report order, whatever the bundle."""
    marked = {cid for family in FAMILIES for cid in family.course_only(spec)}
    return [cid for cid, _, _ in planned_checks(spec) if cid in marked]


def runnable(spec: LabSpec) -> LabSpec:
    """The lab as this copy of it can grade it: all of it where the course's files are here;
    in a student bundle, without the course-only checks, and without the comparison of an
    ``at_most`` counter check whose baseline the bundle leaves out (its score never used it)."""
    if spec.has_course_files:
        return spec
    here = set(spec.baseline_names)
    counters = tuple(c if not c.baseline or c.baseline in here else dataclasses.replace(c, baseline="")
                     for c in spec.counters if not c.course_only)
    benchmark = spec.benchmark
    if benchmark is not None:
        benchmark = dataclasses.replace(benchmark, checks=tuple(c for c in benchmark.checks if not c.course_only))
    return dataclasses.replace(spec, counters=counters, benchmark=benchmark)


def course_only_results(spec: LabSpec) -> list[CheckResult]:
    """What a student bundle reports for the checks it cannot grade (none where the course's files are here)."""
    if spec.has_course_files:
        return []
    marked = set(course_only_ids(spec))
    return [CheckResult(cid, stage, Outcome.SKIPPED, 0.0, pts, COURSE_ONLY_MESSAGE, measured={"course_only": True})
            for cid, stage, pts in planned_checks(spec) if cid in marked]


def in_plan_order(spec: LabSpec, checks: Iterable[CheckResult]) -> list[CheckResult]:
    order = {cid: i for i, (cid, _, _) in enumerate(planned_checks(spec))}
    return sorted(checks, key=lambda c: order.get(c.id, len(order)))


def launcher_prototype(spec: LabSpec) -> str:
    """The launcher's declaration as the lab's header writes it."""
    for line in spec.files.header.read_text(encoding="utf-8").splitlines():
        if f" {spec.launcher.name}(" in line and not line.lstrip().startswith("//"):
            return line.strip()
    return spec.launcher.name


def fill_checks(spec: LabSpec, done: list[CheckResult], stages: set[Stage], outcome: Outcome, message: str) -> list[CheckResult]:
    """The planned checks of ``stages`` that ``done`` has no result for, each with ``outcome`` and ``message``."""
    return [c for family in FAMILIES if family.stage in stages for c in family.unrun(spec, done, outcome, message)]


def gated_check(check: CheckResult) -> CheckResult:
    """What a check earns once a correctness case failed: a pass or an error (the same crash
    under a sanitizer, say) is not graded; a failure keeps its findings."""
    if check.outcome not in (Outcome.PASS, Outcome.ERROR):
        return check
    return CheckResult(check.id, check.stage, Outcome.FAIL, 0, check.max_points, GATE)


def gated_ids(spec: LabSpec) -> list[str]:
    """The checks that score only once every correctness case passes, in report order of families."""
    return [cid for family in FAMILIES for cid in family.gated(spec)]


def without_gpu(spec: LabSpec, checks: list[CheckResult], reason: str) -> list[CheckResult]:
    """``checks`` (compile and static) completed for a machine with no GPU: the static checks
    scored after correctness, and every check that needs a GPU, skipped with ``reason``."""
    gated = {c.id for c in spec.static if c.after_correctness}
    wait = f"scored only once every correctness case passes, which needs a GPU: {reason}"
    done = [CheckResult(c.id, c.stage, Outcome.SKIPPED, 0, c.max_points, f"{c.message}; {wait}") if c.id in gated else c
            for c in checks]
    gpu_stages = {Stage.CORRECTNESS, Stage.SANITIZER, Stage.SPEED, Stage.COUNTERS}
    return done + fill_checks(spec, done, gpu_stages, Outcome.SKIPPED, f"needs a GPU: {reason}")
