"""The compiled-code family: checks on the SASS and resources of the student's kernels (``sass``)."""

from __future__ import annotations

from ...labspec.spec import LabSpec
from ...outcome import Stage, fmt_points
from ..sass import REQUIREMENT_TEXT
from .base import CheckFamily, Planned


class StaticFamily(CheckFamily):
    name = "static"
    stage = Stage.STATIC

    def planned(self, spec: LabSpec) -> list[Planned]:
        return [(c.id, self.stage, c.points) for c in spec.static]

    def gated(self, spec: LabSpec) -> list[str]:
        return [c.id for c in spec.static if c.after_correctness]

    def describe(self, spec: LabSpec) -> list[str]:
        if not spec.static:
            return []
        out = ["**From the compiled code** (nvcc, cuobjdump; these also run on machines without a GPU):", "",
               "| Check | Points | Passes when |", "| --- | --- | --- |"]
        for c in spec.static:
            star = " (only once every correctness case passes)" if c.after_correctness else ""
            out.append(f"| `{c.id}` | {fmt_points(c.points)} | {REQUIREMENT_TEXT[c.require]}{star} |")
        return [*out, ""]
