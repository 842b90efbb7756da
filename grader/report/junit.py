"""JUnit XML: one testsuite per lab, one testcase per check; outcomes map here and nowhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from ..outcome import CheckResult, LabReport, Outcome, fmt_points
from ..textutil import cap_lines, clean, clean_line, one_line

MAX_DETAIL_LINES = 60


def _result(check: CheckResult) -> Failure | Error | Skipped | None:
    """The one place where outcomes become JUnit elements."""
    message = clean_line(check.message)
    if check.outcome is Outcome.FAIL:
        return Failure(message, "failure")
    if check.outcome is Outcome.ERROR:
        return Error(message, "error")
    if check.outcome is Outcome.SKIPPED:
        return Skipped(message)
    return None


def suite(report: LabReport, identity: Mapping[str, Any] | None = None) -> TestSuite:
    s = TestSuite(report.lab)
    s.add_property("score", fmt_points(report.score))
    s.add_property("max_score", fmt_points(report.max_score))
    s.add_property("skipped_points", fmt_points(report.skipped_points))
    s.add_property("submission", one_line(report.submission))
    for key, value in report.environment.items():
        s.add_property(key, clean(str(value)))
    for lib, row in report.timings.items():
        for key, value in row.items():
            s.add_property(f"timing.{lib}.{key}", str(value))
    for key, value in identity_properties(report, identity or {}):
        s.add_property(key, value)
    for check in report.checks:
        case = TestCase(check.title, f"{report.lab}.{check.stage.value}", round(check.duration_s, 3))
        result = _result(check)
        if result is not None:
            if check.details:
                result.text = cap_lines(clean(check.details), MAX_DETAIL_LINES)
            case.result = [result]
        elif check.details:
            case.system_out = cap_lines(clean(check.details), MAX_DETAIL_LINES)
        s.add_testcase(case)
    s.update_statistics()  # type: ignore[no-untyped-call]
    return s


def identity_properties(report: LabReport, identity: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Whose work the suite graded: the identity's scalars, this lab's version and file hash."""
    out = [(f"identity.{k}", clean(str(v))) for k, v in identity.items() if v is not None and not isinstance(v, Mapping)]
    labs, files = identity.get("labs") or {}, identity.get("files") or {}
    if report.lab in labs:
        out.append(("identity.lab_version", str(labs[report.lab])))
    if files.get(report.submission):
        out.append(("identity.file_sha256", str(files[report.submission])))
    return out


def write(reports: Iterable[LabReport], path: Path, identity: Mapping[str, Any] | None = None) -> None:
    xml = JUnitXml("cuda-lab-grader")
    for r in reports:
        xml.add_testsuite(suite(r, identity))
    xml.update_statistics()  # type: ignore[no-untyped-call]
    path.parent.mkdir(parents=True, exist_ok=True)
    xml.write(str(path), pretty=True)
