"""The correctness family: the lab's cases, each against the fp64 oracle (``checks.correctness``)."""

from __future__ import annotations

from ...labspec.spec import LabSpec
from ...outcome import Stage, fmt_points
from .base import CheckFamily, Planned
from .text import case_params


class CorrectnessFamily(CheckFamily):
    name = "correctness"
    stage = Stage.CORRECTNESS

    def planned(self, spec: LabSpec) -> list[Planned]:
        return [(f"correctness[{c.label}]", self.stage, c.points) for c in spec.correctness.cases]

    def describe(self, spec: LabSpec) -> list[str]:
        cases = spec.correctness.cases
        total = sum(c.points for c in cases)
        tol = spec.tolerance
        if tol.kind == "exact":
            how = "must match exactly"
        else:
            how = (f"must be within sqrt(L) * ({tol.atol:g} + {tol.rtol:g} * |expected|) of a float64 reference, "
                   f"where L = `{tol.reduction_length}` is the number of terms in each sum")
        out = [f"**Correctness** ({fmt_points(total)} points). Each case runs your launcher on fresh random inputs; "
               f"every output {how}. {_output_start(spec)} Every output has "
               f"{spec.correctness.guard_elements} guard elements on each side: writing outside a buffer, or changing "
               f"an input, fails the case. A case that runs longer than {spec.correctness.time_limit_s:g} s is stopped and run once more "
               f"with three times as long; if it does not finish then either, it is an error.",
               "", "| Case | Points | Runs |", "| --- | --- | --- |"]
        for case in cases:
            label = f"{case.name} ({case_params(case.params)})" if case.name else case_params(case.params)
            runs = f"{case.repeat} (every run must be right)" if case.repeat > 1 else "1"
            out.append(f"| {label} | {fmt_points(case.points)} | {runs} |")
        return [*out, ""]


def _output_start(spec: LabSpec) -> str:
    parts = [f"`{a.name}` starts {'NaN-filled' if a.init == 'nan' else 'zeroed'}" for a in spec.launcher.args if a.role == "output"]
    return "Before each call " + ", ".join(parts) + "."
