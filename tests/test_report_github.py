"""Reports as GitHub's JUnit reporters and job summaries read them: the common JUnit schema, test
names that stay the same from push to push, compile errors annotated on the student's line, and
CUDA identifiers shown as code in the Markdown summary."""

from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from junitparser import Error, JUnitXml, TestSuite
from test_report import make_report
from test_report_injection import hostile_report, render_github

from grader.engine.repo import grade_repo
from grader.isolation.compilerlog import error_location
from grader.outcome import CheckResult, LabReport, Outcome, SourceLocation, Stage
from grader.report import data as json_report
from grader.report import junit, text

DATA = Path(__file__).resolve().parent / "data"
XSD = DATA / "junit-10.xsd"
XSD_SHA256 = "a1a816f58d1bf95ebabf371994df0b9246dee66ea9572fbec4f9296f1b2c0ff6"
XS = "{http://www.w3.org/2001/XMLSchema}"

SYNTAX_ERROR = """\
// a launcher with a missing semicolon on line 4
extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    int x = width
    P[0] = x;
}
"""


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(XSD))


@pytest.fixture(scope="module")
def schema_with_locations() -> xmlschema.XMLSchema:
    """junit-10.xsd plus exactly what the reports add: optional ``file`` and ``line`` on a testcase."""
    tree = ET.parse(XSD)
    (case_type,) = tree.getroot().findall(f"{XS}element[@name='testcase']/{XS}complexType")
    ET.SubElement(case_type, f"{XS}attribute", {"name": "file", "type": "xs:string"})
    ET.SubElement(case_type, f"{XS}attribute", {"name": "line", "type": "xs:positiveInteger"})
    return xmlschema.XMLSchema(ET.tostring(tree.getroot(), encoding="unicode"))


def test_the_schema_is_the_published_one():
    assert hashlib.sha256(XSD.read_bytes()).hexdigest() == XSD_SHA256
    assert XSD_SHA256 in (DATA / "README.md").read_text()


@pytest.mark.parametrize("reports", [
    pytest.param(lambda: [make_report()], id="one lab"),
    pytest.param(lambda: [make_report("lab_a"), make_report("lab_b")], id="two labs"),
    pytest.param(lambda: [hostile_report()], id="hostile text"),
    pytest.param(lambda: [], id="no lab"),
])
def test_reports_validate_against_junit_10(schema, tmp_path, reports):
    path = tmp_path / "report.xml"
    junit.write(reports(), path)
    errors = [f"{e.path}: {e.reason}" for e in schema.iter_errors(str(path))]
    assert errors == []


def test_the_schema_catches_what_junitparser_adds_by_default(schema, tmp_path):
    """junitparser's own totals put ``skipped`` on ``testsuites``, which junit-10.xsd does not allow:
    the check above would see it."""
    xml = JUnitXml("x")
    xml.add_testsuite(junit.suite(make_report()))
    xml.update_statistics()
    path = tmp_path / "default.xml"
    xml.write(str(path))
    reasons = [e.reason for e in schema.iter_errors(str(path))]
    assert reasons and all("'skipped' attribute not allowed" in (r or "") for r in reasons)


def test_root_totals(tmp_path):
    path = tmp_path / "r.xml"
    junit.write([make_report("lab_a"), make_report("lab_b")], path)
    root = ET.parse(path).getroot()
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "14", "failures": "4", "errors": "2", "skipped": None}
    assert float(root.get("time") or "nan") == pytest.approx(0.5)
    suites = root.findall("testsuite")
    assert [s.get("skipped") for s in suites] == ["1", "1"]  # a testsuite may say it


def _check(points: float, outcome: Outcome, message: str) -> LabReport:
    c = CheckResult("speedup_vs_naive", Stage.SPEED, outcome, points, 2, message)
    return LabReport("tiled_matmul", "t", "labs/tiled_matmul/student.cu", (c,))


def test_a_test_keeps_its_name_whatever_it_earns(tmp_path):
    names, messages = set(), []
    for i, (points, outcome) in enumerate([(2, Outcome.PASS), (1.5, Outcome.FAIL), (0, Outcome.FAIL),
                                           (0, Outcome.ERROR), (0, Outcome.SKIPPED)]):
        path = tmp_path / f"{i}.xml"
        junit.write([_check(points, outcome, "measured")], path)
        (case,) = next(iter(JUnitXml.fromfile(str(path))))
        names.add(case.name)
        messages.append(case.result[0].message if case.result else None)
    assert names == {"speedup_vs_naive (2 pts)"}
    assert messages == [None, "1.5/2 pts: measured", "0/2 pts: measured", "0/2 pts: measured", "measured"]


# ------------------------------------------------------------------ compile errors on the student's line


class _Suite(TestSuite):
    testcase = junit.LocatedCase


class _Xml(JUnitXml):
    testsuite = _Suite


@pytest.fixture(scope="module")
def broken_repo(tmp_path_factory) -> tuple[Path, list[LabReport]]:
    """A student repository whose tiled_matmul file does not compile, graded without a GPU."""
    from grader.isolation.options import GradeOptions

    repo = tmp_path_factory.mktemp("repo")
    student = repo / "labs" / "tiled_matmul" / "student.cu"
    student.parent.mkdir(parents=True)
    student.write_text(SYNTAX_ERROR)
    return repo, grade_repo(repo, GradeOptions(gpu=False), labs=["tiled_matmul"])


def test_compile_error_carries_the_students_file_and_line(broken_repo, schema, schema_with_locations, tmp_path):
    _, (report,) = broken_repo
    compile_check = report.checks[0]
    assert compile_check.outcome is Outcome.ERROR
    assert compile_check.location == SourceLocation("labs/tiled_matmul/student.cu", 4)

    path = tmp_path / "report.xml"
    junit.write([report], path)
    (suite,) = _Xml.fromfile(str(path))
    cases = list(suite)
    assert (cases[0].name, cases[0].file, cases[0].line) == ("compile", "labs/tiled_matmul/student.cu", 4)
    (error,) = cases[0].result
    assert isinstance(error, Error)
    assert "labs/tiled_matmul/student.cu:4: error" in error.message
    assert all(c.file is None and c.line is None for c in cases[1:])  # only the compile error points somewhere

    # valid junit-10 with the two attributes the reporters read; what the plain schema objects to
    # is those attributes and nothing else
    assert list(schema_with_locations.iter_errors(str(path))) == []
    reasons = sorted({e.reason or "" for e in schema.iter_errors(str(path))})
    assert reasons == ["'file' attribute not allowed for element", "'line' attribute not allowed for element"]


def test_compile_error_location_in_json(broken_repo):
    _, reports = broken_repo
    doc = json.loads(json_report.dumps(reports))
    checks = doc["labs"][0]["checks"]
    assert checks[0]["location"] == {"file": "labs/tiled_matmul/student.cu", "line": 4}
    assert all(c["location"] is None for c in checks[1:])


def test_error_location_picks_the_first_error_in_the_students_file():
    log = "\n".join([
        "interface.h:3: error: identifier \"x\" is undefined",  # the lab's header: not the student's line
        "labs/a/student.cu:7: warning #177-D: variable \"y\" was declared but never referenced",
        "labs/a/student.cu:12:5: error: expected ';' before '}' token",  # the host compiler's form
        "labs/a/student.cu:20: error: expected a \";\"",
    ])
    assert error_location(log, "labs/a/student.cu") == SourceLocation("labs/a/student.cu", 12)
    assert error_location(log, "other.cu") is None
    assert error_location("labs/a/student.cu:3: catastrophic error: cannot open source file \"x.h\"",
                          "labs/a/student.cu") == SourceLocation("labs/a/student.cu", 3)
    link = "/usr/bin/ld: student.cu:(.text+0x1): undefined reference to `matmul'"
    assert error_location(link, "student.cu") is None


def test_location_file_is_one_clean_line(tmp_path):
    c = CheckResult("compile", Stage.COMPILE, Outcome.ERROR, 0, 0, "compile error",
                    location=SourceLocation("labs/x/a\x1b[31m\n.cu", 3))
    path = tmp_path / "r.xml"
    junit.write([LabReport("x", "t", "a.cu", (c,))], path)
    (case,) = next(iter(_Xml.fromfile(str(path))))
    assert case.file == r"labs/x/a\x1b[31m\n.cu"
    assert b"\x1b" not in path.read_bytes()


# ------------------------------------------------------------------ CUDA identifiers in the Markdown summary

HINT = "no kernel reads constant memory. Declare the mask as a __constant__ array (sized MAX_MASK_WIDTH)"


def _markdown(message: str) -> str:
    c = CheckResult("mask_in_constant_memory", Stage.STATIC, Outcome.FAIL, 0, 2, message)
    return text.markdown([LabReport("memory_types", "Memory types", "labs/memory_types/student.cu", (c,))])


def _row(md: str):
    root = render_github(md)
    (table,) = root.iter("table")
    (*_, result_cell) = table.iter("td")
    return root, result_cell


def test_constant_in_a_hint_renders_as_code_not_bold():
    root, cell = _row(_markdown(HINT))
    assert [c.text for c in cell.iter("code")] == ["__constant__"]
    assert cell.text == HINT
    assert not list(cell.iter("strong")) and not list(cell.iter("em"))
    assert not [el for el in root.iter("strong") if "constant" in el.text]


def test_the_old_rendering_made_it_bold():
    root = render_github("| a |\n|---|\n| Declare the mask as a __constant__ array |\n")
    assert [s.text for s in root.iter("strong")] == ["constant"]


@pytest.mark.parametrize("message, codes, shown", [
    ("call __syncthreads() after the loads", ["__syncthreads()"], None),
    ("a kernel reads `__constant__` data", ["__constant__"], "a kernel reads __constant__ data"),
    ("__shared__ tiles and __restrict__ pointers; __ldg(p)", ["__shared__", "__restrict__", "__ldg"], None),
    ("x__y__ and a_b__c and __ alone and ___", [], None),  # not identifiers of their own
    ("``__shared__`` | __shared__|x **__bold__** `` ` ``", ["__shared__", "__shared__", "__bold__"],
     "`__shared__` | __shared__|x **__bold__** `` ` ``"),
])
def test_cuda_identifiers_are_code_and_the_rest_stays_text(message, codes, shown):
    _, cell = _row(_markdown(message))
    assert [c.text for c in cell.iter("code")] == codes
    assert cell.text == (shown or message)
    assert not list(cell.iter("strong")) and not list(cell.iter("em"))
