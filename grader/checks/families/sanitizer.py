"""The sanitizer family: compute-sanitizer's tools on a tiny case (``checks.sanitizer``), one
process per tool for a repository's labs (``checks.sanitizerbatch``)."""

from __future__ import annotations

import functools

from ...isolation.options import GradeOptions
from ...labspec.spec import LabSpec
from ...outcome import CheckResult, Outcome, Stage, fmt_points
from .. import sanitizer, sanitizerbatch
from ..sanitizerbatch import SanitizerBatch
from .base import CheckFamily, Planned, Shared, ToolStart
from .text import case_params


class SanitizerFamily(CheckFamily):
    name = "sanitizer"
    stage = Stage.SANITIZER

    def planned(self, spec: LabSpec) -> list[Planned]:
        return [(c.id, self.stage, c.points) for c in spec.sanitizers]

    def gated(self, spec: LabSpec) -> list[str]:
        return [c.id for c in spec.sanitizers]

    def describe(self, spec: LabSpec) -> list[str]:
        if not spec.sanitizers:
            return []
        out = ["**compute-sanitizer** on a tiny case, without any memory pool (memcheck pads every allocation "
               f"by {sanitizer.MEMCHECK_PADDING} bytes), scored only once every correctness case passes:", "",
               "| Check | Points | Tool | Case | Fails on |", "| --- | --- | --- | --- | --- |"]
        for s in spec.sanitizers:
            out.append(f"| `{s.id}` | {fmt_points(s.points)} | {s.tool} | {case_params(s.params)} | any {sanitizer.WHAT[s.tool]} |")
        return [*out, ""]

    def threads(self, spec: LabSpec) -> int:
        return len(spec.sanitizers)

    def shared(self, specs: list[LabSpec], options: GradeOptions) -> Shared | None:
        return SanitizerBatch([spec.id for spec in specs])

    def explained(self, spec: LabSpec, checks: list[CheckResult], results: list[CheckResult]) -> list[CheckResult]:
        """A correctness message about NaNs says where memcheck saw out-of-bounds accesses."""
        return sanitizer.explain_nans(checks, results, spec)

    def timing_stop(self, results: list[CheckResult]) -> str:
        """Stores outside every buffer stop the timing."""
        return sanitizer.stray_writes(results)

    def start(self, tools: ToolStart) -> None:
        """Each check's run in a thread of its own (a separate process on a tiny case: its findings
        do not depend on what else runs), the repository's labs' runs shared per tool."""
        sub, options = tools.sub, tools.options
        spec = sub.spec
        if spec.sanitizers and not options.sanitizers:
            tools.runs.done([CheckResult(c.id, Stage.SANITIZER, Outcome.SKIPPED, 0, c.points,
                                         "compute-sanitizer turned off (--no-sanitizers)") for c in spec.sanitizers])
        elif spec.sanitizers:
            tools.progress(f"[{spec.id}] compute-sanitizer: {', '.join(c.tool for c in spec.sanitizers)} (in the background)")
            batch = tools.shared.get(self.name)
            assert batch is None or isinstance(batch, SanitizerBatch)
            if batch is not None:
                batch.send_made(spec.id, lambda: sanitizerbatch.requests_of(sub, options.reuse_tool_runs))
            for check in spec.sanitizers:
                tools.runs.run(Stage.SANITIZER, functools.partial(sanitizerbatch.grade, sub, check, batch,
                                                                  options.reuse_tool_runs), (check.id,))
