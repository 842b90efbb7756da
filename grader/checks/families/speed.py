"""The speed family: the student's kernel timed against the lab's baselines (``checks.timing``,
``checks.samples``), scored by ``checks.speed``."""

from __future__ import annotations

from ...labspec.spec import LabSpec
from ...outcome import Stage, fmt_points
from .base import CheckFamily, Planned
from .text import case_params


class SpeedFamily(CheckFamily):
    name = "speed"
    stage = Stage.SPEED

    def planned(self, spec: LabSpec) -> list[Planned]:
        return [(c.id, self.stage, c.points) for c in spec.benchmark.checks] if spec.benchmark else []

    def course_only(self, spec: LabSpec) -> set[str]:
        return {c.id for c in spec.benchmark.checks if c.course_only} if spec.benchmark else set()

    def describe(self, spec: LabSpec) -> list[str]:
        bench = spec.benchmark
        if not bench or not bench.checks:
            return []
        out = [f"**Speed** ({fmt_points(sum(c.points for c in bench.checks))} points), only once every "
               f"correctness case passes. Timed at {case_params(bench.params)} with CUDA events, the L2 cache "
               "flushed and fresh inputs before every call, interleaved with the baselines in the same run; "
               "the medians are compared and the output of the last timed call must be right. Credit grows "
               "linearly between the two ratios:", "",
               "| Check | Points | Compared with | No credit at | Full credit at |",
               "| --- | --- | --- | --- | --- |"]
        for speed in bench.checks:
            out.append(f"| `{speed.id}` | {fmt_points(speed.points)} | the {speed.baseline} kernel | <= {speed.zero:g}x its speed "
                       f"| >= {speed.full:g}x its speed |")
        return [*out, ""]
