"""JUnit XML: one testsuite per lab, one testcase per check; outcomes map here and nowhere else.

The document follows the Jenkins xUnit plugin's ``junit-10.xsd``, the schema GitHub's JUnit
reporters are written against, with one addition that those reporters read and the schema
predates: a check that points into the student's file (a compile error) carries ``file`` and
``line`` on its testcase, so the annotation lands on that line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from junitparser import Attr, Error, Failure, IntAttr, JUnitXml, Skipped, TestCase, TestSuite

from ..host.hostdirs import output_dir
from ..host.safeio import replacing
from ..outcome import CheckResult, LabReport, Outcome, fmt_points
from ..textutil import cap_lines, clean, clean_line, one_line

MAX_DETAIL_LINES = 60

#: What a refusal calls the folder a report goes to.
FOLDER_WHAT = "the reports' folder"


class LocatedCase(TestCase):
    """A testcase that may name the file and line it is about (read by GitHub's JUnit reporters)."""

    file = Attr()
    line = IntAttr()


def _result(check: CheckResult) -> Failure | Error | Skipped | None:
    """The one place where outcomes become JUnit elements.

    A failure or error message starts with the points earned: the test's name carries only the
    maximum, so that it stays the same from run to run.
    """
    message = clean_line(check.message)
    earned = f"{fmt_points(check.points)}/{fmt_points(check.max_points)} pts: " if check.max_points else ""
    if check.outcome is Outcome.FAIL:
        return Failure(earned + message, "failure")
    if check.outcome is Outcome.ERROR:
        return Error(earned + message, "error")
    if check.outcome is Outcome.SKIPPED:
        return Skipped(message)
    return None


def testcase(lab: str, check: CheckResult) -> LocatedCase:
    case = LocatedCase(check.title, f"{lab}.{check.stage.value}", round(check.duration_s, 3))
    if check.location is not None:
        case.file = one_line(check.location.file)
        case.line = check.location.line
    result = _result(check)
    if result is not None:
        if check.details:
            result.text = cap_lines(clean(check.details), MAX_DETAIL_LINES)
        case.result = [result]
    elif check.details:
        case.system_out = cap_lines(clean(check.details), MAX_DETAIL_LINES)
    return case


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
            s.add_property(f"timing.{lib}.{key}", clean(str(value)))
    for key, value in identity_properties(report, identity or {}):
        s.add_property(key, value)
    for check in report.checks:
        s.add_testcase(testcase(report.lab, check))
    s.update_statistics()  # type: ignore[no-untyped-call]
    s.time = round(s.time, 3)
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


def document(reports: Iterable[LabReport], identity: Mapping[str, Any] | None = None) -> JUnitXml:
    """All labs' suites under one ``testsuites``, whose totals are those the schema allows
    (tests, failures, errors, time: not skipped, which only a testsuite may carry)."""
    xml = JUnitXml("cuda-lab-grader")
    suites = [suite(r, identity) for r in reports]
    for s in suites:
        xml.add_testsuite(s)
    xml.tests = sum(s.tests for s in suites)
    xml.failures = sum(s.failures for s in suites)
    xml.errors = sum(s.errors for s in suites)
    xml.time = round(sum(s.time for s in suites), 3)
    return xml


def write(reports: Iterable[LabReport], path: Path, identity: Mapping[str, Any] | None = None) -> None:
    """The JUnit XML at ``path``, replacing what is there, never through a link; its folder made
    private if missing, else checked (``hostdirs.output_dir``)."""
    output_dir(path.parent, FOLDER_WHAT)
    with replacing(path) as fh:
        document(reports, identity).write(fh, pretty=True)
