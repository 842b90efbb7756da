"""Validating a lab for instructors: every known solution gets exactly its expected verdicts.

``solutions/expected.yaml`` lists the reference (full marks), the stub (near zero) and every file
under ``solutions/correct`` and ``solutions/wrong`` with the verdict each check must give it.
Checks that cannot run on this machine (no GPU, no counters) are skipped, never counted as
mismatches, and the result says how many were not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..engine.repo import grade_many
from ..errors import SpecError
from ..isolation.options import GradeOptions, Progress, no_progress
from ..labspec.paths import shown
from ..labspec.spec import ExpectedSolution, LabSpec
from ..labspec.specload import load_expected
from ..outcome import LabReport, Outcome, fmt_points


@dataclass(frozen=True)
class VerdictMismatch:
    """A check whose verdict differs from the one the known solution must get."""

    check: str
    got: str
    expected: str
    message: str


@dataclass(frozen=True)
class SolutionResult:
    solution: ExpectedSolution
    report: LabReport
    mismatches: tuple[VerdictMismatch, ...]
    problems: tuple[str, ...]  # score bounds missed, checks with no expected verdict
    unchecked: int  # checks skipped on this machine

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.problems


def expected_path(spec: LabSpec) -> Path:
    return spec.root / "solutions" / "expected.yaml"


def load_solutions(spec: LabSpec) -> tuple[ExpectedSolution, ...]:
    """The lab's known solutions; every file under solutions/ and both baselines must be listed."""
    path = expected_path(spec)
    if spec.files.reference is None:
        raise SpecError("this lab is a student bundle, without its reference and known solutions: validate labs "
                        "and write their READMEs in the course repository", path=spec.source)
    solutions = load_expected(path).solutions
    listed = {s.file.resolve() for s in solutions}
    for folder in ("correct", "wrong"):
        for cu in sorted((spec.root / "solutions" / folder).glob("*.cu")):
            if cu.resolve() not in listed:
                raise SpecError(f"{folder}/{cu.name} has no expected verdicts: add it to the list", path=path)
    for what, file in (("reference", spec.files.reference), ("stub", spec.files.stub)):
        if file.resolve() not in listed:
            raise SpecError(f"the lab's {what} ({file.name}) must be listed with its expected verdicts", path=path)
    return solutions


def judge(solution: ExpectedSolution, report: LabReport) -> SolutionResult:
    mismatches, problems, unchecked = [], [], 0
    for check in report.checks:
        want = solution.verdict(check.id)
        if want is None:
            problems.append(f"no expected verdict for check {check.id!r}")
        elif check.outcome is Outcome.SKIPPED and want != "skipped":
            unchecked += 1
        elif want != "any" and check.outcome.value != want:
            mismatches.append(VerdictMismatch(check.id, check.outcome.value, want, check.message))
        line = solution.lines.get(check.id)
        named = check.location.line if check.location is not None else None
        if line is not None and check.outcome is not Outcome.SKIPPED and named != line:
            problems.append(f"{check.id} names {f'line {named}' if named else 'no line'}, expected line {line}: {check.message}")
    if not unchecked:  # score bounds only mean something when every check ran
        if solution.min_score is not None and report.score < solution.min_score:
            problems.append(f"score {fmt_points(report.score)} is below the expected minimum {fmt_points(solution.min_score)}")
        if solution.max_score is not None and report.score > solution.max_score:
            problems.append(f"score {fmt_points(report.score)} is above the expected maximum {fmt_points(solution.max_score)}")
    return SolutionResult(solution, report, tuple(mismatches), tuple(problems), unchecked)


def validate(spec: LabSpec, options: GradeOptions = GradeOptions(), progress: Progress = no_progress) -> list[SolutionResult]:
    """Grade every known solution of a lab and compare each check with its expected verdict."""
    solutions = load_solutions(spec)
    root = spec.root.parent.parent
    items = [(spec, s.file, shown(s.file, root)) for s in solutions]
    reports = grade_many(items, options, progress, window=4)
    return [judge(s, r) for s, r in zip(solutions, reports)]


def render(spec: LabSpec, results: list[SolutionResult]) -> str:
    """A table for the terminal: one line per solution, then each mismatch."""
    lines = [f"== validate {spec.id}: {len(results)} known solutions"]
    for r in results:
        status = "ok" if r.ok else "MISMATCH"
        note = f", {r.unchecked} checks not run here" if r.unchecked else ""
        lines.append(f"  {status:<8} {fmt_points(r.report.score):>5}/{fmt_points(r.report.max_score):<3} "
                     f"{r.report.submission} ({r.solution.why}){note}")
        for m in r.mismatches:
            lines.append(f"           {m.check}: got {m.got}, expected {m.expected}: {m.message}")
        for p in r.problems:
            lines.append(f"           {p}")
    bad = sum(not r.ok for r in results)
    unchecked = sum(r.unchecked for r in results)
    summary = "all verdicts as expected" if not bad else f"{bad} of {len(results)} solutions differ from their expected verdicts"
    if unchecked:
        summary += f" ({unchecked} checks could not run on this machine and were not compared)"
    lines.append(f"  {summary}")
    return "\n".join(lines) + "\n"
