"""What a lab grades, in report order, and the launcher it asks for: facts about a spec, below
the engine (reports and READMEs use them without importing it)."""

from __future__ import annotations

from .outcome import CheckResult, Outcome, Stage
from .spec import LabSpec


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
