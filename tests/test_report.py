"""Reports built by hand (JUnit, Markdown, terminal, JSON), partial credit, and output comparison."""

from __future__ import annotations

import io
import json
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from grader.checks.compare import compare
from grader.isolation.build import KernelResources
from grader.labspec.spec import Tolerance
from grader.outcome import CheckResult, LabReport, Outcome, Stage, fmt_points, partial_credit
from grader.report import data as json_report
from grader.report import junit, text
from grader.report.junit import MAX_DETAIL_LINES

NASTY = "\x1b[31mred\x1b[0m \x07 bell \x00"
LONG_DETAILS = "\n".join(f"mismatch {i}" for i in range(200))


def make_report(lab: str = "tiled_matmul") -> LabReport:
    checks = (
        CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, "compiled for sm_90", "a.cu:3: warning: unused"),
        CheckResult("shared_memory_tiles", Stage.STATIC, Outcome.PASS, 2, 2, "22 shared-memory instructions"),
        CheckResult("correctness[width=16]", Stage.CORRECTNESS, Outcome.PASS, 2, 2, "correct (largest error 1e-06)",
                    measured={"max_abs_error": 1e-6}, duration_s=0.25),
        CheckResult("correctness[width=48]", Stage.CORRECTNESS, Outcome.FAIL, 0, 2,
                    f"P: 3 of 2304 elements wrong | {NASTY}", LONG_DETAILS),
        CheckResult("correctness[width=112]", Stage.CORRECTNESS, Outcome.ERROR, 0, 2,
                    "CUDA error: cudaErrorIllegalAddress", f"output of your program:\n{NASTY}"),
        CheckResult("speedup_vs_naive", Stage.SPEED, Outcome.FAIL, 1.5, 2, "1.20x the speed of the naive kernel"),
        CheckResult("global_load_reduction", Stage.COUNTERS, Outcome.SKIPPED, 0, 2, "needs a GPU: none here"),
    )
    return LabReport(
        lab=lab,
        title="Tiled matrix multiplication",
        submission="student.cu",
        checks=checks,
        environment={"nvcc": "13.0.88", "archs": "sm_90", "gpu": "none: test", "sandbox": "none (test)"},
        kernels=(KernelResources("matmul_tiled(float const*, float const*, float*, int)", 32, 1, 2048),),
        timings={"student": {"median_ms": 1.5, "min_ms": 1.4, "cv_pct": 0.3, "n": 20, "gflops": 11453.0},
                 "naive": {"median_ms": 3.0, "min_ms": 2.9, "cv_pct": 4.5, "n": 100, "noisy": True}},
        stage_seconds={"compile": 1.0},
    )


def test_report_scores():
    report = make_report()
    assert report.score == 5.5
    assert report.max_score == 12
    assert report.skipped_points == 2
    assert report.checks[0].title == "compile"  # unscored: no points suffix
    assert report.checks[5].title == "speedup_vs_naive (2 pts)"  # the maximum, not what was earned


# ------------------------------------------------------------------ JUnit


@pytest.fixture
def junit_file(tmp_path):
    path = tmp_path / "nested" / "report.xml"
    junit.write([make_report()], path)
    return path


def test_junit_is_clean_xml(junit_file):
    raw = junit_file.read_bytes()
    for bad in (b"\x1b", b"\x07", b"\x00"):
        assert bad not in raw
    root = ET.parse(junit_file).getroot()  # a strict parser accepts it
    assert root.tag == "testsuites"


def test_junit_suite_and_testcases(junit_file):
    xml = JUnitXml.fromfile(str(junit_file))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    assert suite.name == "tiled_matmul"
    assert suite.tests == 7
    assert suite.failures == 2
    assert suite.errors == 1
    assert suite.skipped == 1
    cases = {c.name: c for c in suite}
    assert list(cases) == [
        "compile",
        "shared_memory_tiles (2 pts)",
        "correctness[width=16] (2 pts)",
        "correctness[width=48] (2 pts)",
        "correctness[width=112] (2 pts)",
        "speedup_vs_naive (2 pts)",
        "global_load_reduction (2 pts)",
    ]
    assert cases["correctness[width=16] (2 pts)"].classname == "tiled_matmul.correctness"
    assert cases["correctness[width=16] (2 pts)"].time == 0.25
    assert cases["correctness[width=16] (2 pts)"].is_passed
    assert cases["shared_memory_tiles (2 pts)"].result == []

    # what was earned leads the message of a failure or error
    (failure,) = cases["correctness[width=48] (2 pts)"].result
    assert isinstance(failure, Failure)
    assert failure.message == "0/2 pts: P: 3 of 2304 elements wrong | red  bell "
    assert failure.type == "failure"

    (error,) = cases["correctness[width=112] (2 pts)"].result
    assert isinstance(error, Error)
    assert error.message == "0/2 pts: CUDA error: cudaErrorIllegalAddress"
    assert error.text == "output of your program:\nred  bell "

    (skipped,) = cases["global_load_reduction (2 pts)"].result
    assert isinstance(skipped, Skipped)
    assert skipped.message == "needs a GPU: none here"

    (partial,) = cases["speedup_vs_naive (2 pts)"].result
    assert isinstance(partial, Failure)
    assert partial.message == "1.5/2 pts: 1.20x the speed of the naive kernel"

    # details of a passing check go to system-out
    assert cases["compile"].system_out == "a.cu:3: warning: unused"


def test_junit_caps_long_details(junit_file):
    xml = JUnitXml.fromfile(str(junit_file))
    case = next(c for c in next(iter(xml)) if c.name.startswith("correctness[width=48]"))
    lines = case.result[0].text.splitlines()
    assert len(lines) == MAX_DETAIL_LINES + 1
    assert lines[0] == "mismatch 0"
    assert lines[-1] == f"[... {200 - MAX_DETAIL_LINES} lines omitted]"


def test_junit_properties(junit_file):
    suite = next(iter(JUnitXml.fromfile(str(junit_file))))
    props = {p.name: p.value for p in suite.properties()}
    assert props["score"] == "5.5"
    assert props["max_score"] == "12"
    assert props["skipped_points"] == "2"
    assert props["submission"] == "student.cu"
    assert props["nvcc"] == "13.0.88"
    assert props["timing.student.median_ms"] == "1.5"
    assert props["timing.student.n"] == "20"


def test_junit_one_suite_per_lab(tmp_path):
    path = tmp_path / "two.xml"
    junit.write([make_report("lab_a"), make_report("lab_b")], path)
    xml = JUnitXml.fromfile(str(path))
    assert [s.name for s in xml] == ["lab_a", "lab_b"]
    assert xml.tests == 14
    assert xml.failures == 4


# ------------------------------------------------------------------ Markdown and terminal


def test_markdown():
    md = text.markdown([make_report()])
    assert md.startswith("# CUDA lab grade: 5.5/12\n")
    assert "## tiled_matmul: Tiled matrix multiplication" in md
    assert "**score 5.5/12 (2 points not checked here)**" in md
    assert "| | Check | Points | Result |" in md
    assert "| ✅ | `correctness[width=16]` | 2/2 | correct (largest error 1e-06) |" in md
    assert "| ❌ | `correctness[width=48]` | 0/2 | P: 3 of 2304 elements wrong \\| red  bell  |" in md
    assert "| 💥 | `correctness[width=112]` |" in md
    assert "| ⏭️ | `global_load_reduction` | 0/2 | needs a GPU: none here |" in md
    assert "<details><summary>correctness[width=48]</summary>" in md
    assert "lines omitted]" in md  # details capped at 40 lines
    assert "| `matmul_tiled(float const*, float const*, float*, int)` | 32 | 2048 | 0 | 0 |" in md
    assert "| student | 1.5000 | 1.4000 | 0.3 | 20 | 11453.0 |" in md
    for bad in ("\x1b", "\x07", "\x00"):
        assert bad not in md


def test_markdown_totals_over_labs():
    md = text.markdown([make_report("lab_a"), make_report("lab_b")])
    assert md.startswith("# CUDA lab grade: 11/24\n")
    assert "## lab_a:" in md and "## lab_b:" in md


def test_terminal_without_tty_has_no_colour():
    out = text.terminal([make_report()], stream=io.StringIO())
    assert "\x1b" not in out and "\x07" not in out and "\x00" not in out
    lines = out.splitlines()
    assert lines[0] == "== tiled_matmul: Tiled matrix multiplication -- student.cu"
    assert any(line.startswith("  PASS ") and "correctness[width=16]: correct" in line for line in lines)
    assert any(line.startswith("  FAIL ") and "correctness[width=48]: P: 3 of 2304 elements wrong | red  bell" in line
               for line in lines)
    assert any(line.startswith("  ERROR") and "cudaErrorIllegalAddress" in line for line in lines)
    assert "  SKIP      0/2   1 check (global_load_reduction): needs a GPU: none here" in lines
    verbose = text.terminal([make_report()], stream=io.StringIO(), verbose=True).splitlines()
    assert any(line.startswith("  SKIP ") and "global_load_reduction: needs a GPU" in line for line in verbose)
    assert "  skipped 1 check: needs a GPU: none here" in verbose
    assert "  sandbox: none (test)" in lines
    assert lines[-1] == "  score 5.5/12 (2 points not checked here)"
    assert "matmul_tiled(float const*, float const*, float*, int): 32 regs, 2048 B smem" in out
    assert "time student: median 1.5000 ms" in out
    assert "time naive: median 3.0000 ms, min 2.9000 ms, CV 4.5%, n=100 [noisy" in out
    assert "time student: median 1.5000 ms, min 1.4000 ms, CV 0.3%, n=20, 11453.0 GFLOP/s (?% of FP32 peak)\n" in out
    # failing details are shown, capped at 15 lines; a passing check's details are not
    assert "mismatch 14" in out and "mismatch 15" not in out
    assert "a.cu:3: warning: unused" not in out


def test_terminal_verbose_and_colour():
    verbose = text.terminal([make_report()], stream=io.StringIO(), verbose=True)
    assert "a.cu:3: warning: unused" in verbose
    assert "mismatch 150" in verbose

    class Tty(io.StringIO):
        def isatty(self):
            return True

    coloured = text.terminal([make_report()], stream=Tty())
    assert "\x1b[32mPASS \x1b[0m" in coloured
    assert "\x1b[31mFAIL \x1b[0m" in coloured


# ------------------------------------------------------------------ JSON


def test_json_round_trip():
    doc = json.loads(json_report.dumps([make_report("lab_a"), make_report("lab_b")]))
    assert doc["score"] == 11
    assert doc["max_score"] == 24
    assert [lab["lab"] for lab in doc["labs"]] == ["lab_a", "lab_b"]
    lab = doc["labs"][0]
    assert lab["score"] == 5.5 and lab["max_score"] == 12 and lab["skipped_points"] == 2
    assert [c["outcome"] for c in lab["checks"]] == ["pass", "pass", "pass", "fail", "error", "fail", "skipped"]
    assert [c["stage"] for c in lab["checks"]][:3] == ["compile", "static", "correctness"]
    assert lab["checks"][2]["measured"] == {"max_abs_error": 1e-6}
    assert lab["checks"][3]["details"] == LONG_DETAILS
    assert lab["kernels"][0]["smem_bytes"] == 2048
    assert lab["timings"]["student"]["n"] == 20
    assert lab["environment"]["archs"] == "sm_90"
    assert lab["stage_seconds"] == {"compile": 1.0}


# ------------------------------------------------------------------ partial credit


def test_partial_credit():
    assert partial_credit(1.0, 1.05, 1.3, 2) == 0
    assert partial_credit(1.05, 1.05, 1.3, 2) == 0
    assert partial_credit(-5, 1.05, 1.3, 2) == 0
    assert partial_credit(1.3, 1.05, 1.3, 2) == 2
    assert partial_credit(50.0, 1.05, 1.3, 2) == 2
    assert partial_credit(1.175, 1.05, 1.3, 2) == pytest.approx(1.0)
    assert partial_credit(5, 2, 8, 4) == pytest.approx(2.0)
    assert partial_credit(3.5, 2, 8, 4) == pytest.approx(1.0)
    # full == zero: a step
    assert partial_credit(1.0, 1.0, 1.0, 3) == 3
    assert partial_credit(0.99, 1.0, 1.0, 3) == 0


def test_fmt_points():
    assert fmt_points(2) == "2"
    assert fmt_points(1.5) == "1.5"
    assert fmt_points(0.0) == "0"
    assert fmt_points(1 / 3) == "0.33"


# ------------------------------------------------------------------ comparing outputs

FLOAT = Tolerance(kind="float", rtol=0.0, atol=1e-3, reduction_length="k")


def test_compare_exact_match_passes():
    want = np.arange(6, dtype=np.float32).reshape(2, 3)
    cmp = compare("P", want.copy(), want, FLOAT, {"k": 1})
    assert cmp.ok
    assert cmp.wrong == 0 and cmp.total == 6
    assert cmp.first == ()
    assert cmp.max_abs_error == 0
    assert cmp.summary == "P: all 6 elements correct"


def test_compare_tolerance_scales_with_sqrt_k():
    want = np.zeros((2, 2), dtype=np.float32)
    got = want.copy()
    got[0, 1] = 0.005  # 5x atol, within sqrt(100) * atol = 0.01
    assert compare("P", got, want, FLOAT, {"k": 100}).ok
    assert not compare("P", got, want, FLOAT, {"k": 1}).ok
    assert not compare("P", got, want, FLOAT, {"k": 16}).ok  # bound 0.004
    got[0, 1] = 0.02
    assert not compare("P", got, want, FLOAT, {"k": 100}).ok
    # the relative part scales with |expected|
    rel = Tolerance(kind="float", rtol=1e-3, atol=0.0, reduction_length="1")
    assert compare("P", np.array([1000.5]), np.array([1000.0]), rel, {}).ok
    assert not compare("P", np.array([1.5]), np.array([1.0]), rel, {}).ok


@pytest.mark.parametrize("chunk", [1, 5, 7, 1 << 20])
def test_compare_in_chunks_finds_what_one_pass_finds(chunk):
    """Outputs are compared a chunk at a time, the chunks side by side; counts, the first
    mismatches in row-major order (across chunk boundaries), the NaN count and the largest error
    do not depend on the chunk."""
    want = np.arange(48, dtype=np.float64).reshape(6, 8)
    got = want.astype(np.float32)
    got[0, 6], got[1, 1], got[4, 0], got[5, 7] = 100.0, np.nan, np.inf, 50.5  # errors 94, NaN, inf, 3.5
    cmp = compare("P", got, want, FLOAT, {"k": 1}, max_shown=3, chunk=chunk)
    assert (cmp.ok, cmp.wrong, cmp.total) == (False, 4, 48)
    assert [m.index for m in cmp.first] == ["[0, 6]", "[1, 1]", "[4, 0]"]
    assert cmp.max_abs_error == 94.0  # the largest finite error among the wrong elements
    assert cmp.summary == "P: 4 of 48 elements wrong (1 are NaN); first at P[0, 6]: got 100, expected 6"
    near = want.astype(np.float32)
    near[3, 3] += 2.0**-11  # within atol, and exact in float32
    right = compare("P", near, want, FLOAT, {"k": 1}, chunk=chunk)
    assert right.ok and right.max_abs_error == 2.0**-11
    empty = compare("P", np.zeros((0, 3), np.float32), np.zeros((0, 3)), FLOAT, {"k": 1}, chunk=chunk)
    assert (empty.ok, empty.wrong, empty.total, empty.summary) == (True, 0, 0, "P: all 0 elements correct")


@pytest.mark.parametrize("rtol,atol,k", [(1e-5, 1e-6, 15), (0.0, 1e-3, 1), (1e-3, 0.0, 7)])
def test_compare_judges_every_element_as_the_tolerance_formula_does(rtol, atol, k):
    """Wrong is not |got - expected| <= sqrt(k) * (atol + rtol * |expected|), element by element,
    to the last bit: outputs a hair either side of the bound, NaN and inf among them."""
    rng = np.random.default_rng(k)
    want = rng.standard_normal(200_000) * 10.0 ** rng.integers(-3, 4, 200_000)
    scale = np.sqrt(k)
    bound = scale * (atol + rtol * np.abs(want))
    got = want + bound * rng.choice([-1.0, 1.0], want.size) * rng.choice([0.5, 1 - 2**-52, 1.0, 1 + 2**-52, 2.0], want.size)
    got[::997], got[1::991] = np.nan, -np.inf
    tol = Tolerance(kind="float", rtol=rtol, atol=atol, reduction_length="k")
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want)
        wrong = ~(err <= bound)
    assert 1000 < wrong.sum() < want.size - 1000  # (both sides of the bound are there)
    cmp = compare("out", got, want, tol, {"k": k}, max_shown=5, chunk=4096)
    assert cmp.wrong == int(wrong.sum())
    assert [m.index for m in cmp.first] == [f"[{i}]" for i in np.flatnonzero(wrong)[:5]]
    assert cmp.max_abs_error == float(err[wrong & np.isfinite(err)].max())


def test_the_oracle_check_benchmark_prints_each_labs_three_figures():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "oracle_check_cost.py"
    done = subprocess.run([sys.executable, str(script), "--labs", "histogram", "tiled_matmul", "--repeat", "2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:]}
    assert set(rows) == {"histogram", "tiled_matmul"}, done.stdout
    assert "bins[7] uint32" in rows["histogram"] and "P[2048, 2048] float64" in rows["tiled_matmul"]
    for row in rows.values():
        figures = re.findall(r"(\d+\.\d{3})/\s*(\d+\.\d{3})", row)
        assert len(figures) == 3 and all(float(best) <= float(median) for best, median in figures), row


def test_compare_reports_first_mismatches():
    want = np.zeros((3, 4), dtype=np.float32)
    got = want.copy()
    got[0, 1] = 1.0
    got[1, 0] = 2.0
    got[2, 3] = -3.0
    cmp = compare("P", got, want, FLOAT, {"k": 1}, max_shown=2)
    assert not cmp.ok
    assert cmp.wrong == 3 and cmp.total == 12
    assert [m.index for m in cmp.first] == ["[0, 1]", "[1, 0]"]
    assert cmp.first[0].got == 1.0 and cmp.first[0].expected == 0.0
    assert cmp.max_abs_error == 3.0
    assert cmp.summary == "P: 3 of 12 elements wrong; first at P[0, 1]: got 1, expected 0"
    details = cmp.details().splitlines()
    assert details[0] == cmp.summary
    assert details[1:] == ["  P[0, 1]: got 1, expected 0", "  P[1, 0]: got 2, expected 0"]


def test_compare_nan_and_inf_are_wrong():
    want = np.ones(4, dtype=np.float32)
    got = want.copy()
    got[2] = np.nan
    cmp = compare("out", got, want, Tolerance(kind="float", rtol=1.0, atol=1.0), {})
    assert not cmp.ok
    assert cmp.wrong == 1
    assert "(1 are NaN)" in cmp.summary
    assert "first at out[2]: got nan" in cmp.summary
    assert math.isinf(cmp.max_abs_error)  # no finite error among the wrong ones
    got[2] = np.inf
    cmp = compare("out", got, want, Tolerance(kind="float", rtol=1.0, atol=1.0), {})
    assert not cmp.ok and "got inf" in cmp.summary


def test_compare_all_nan_says_never_written():
    want = np.ones((2, 2), dtype=np.float32)
    got = np.full((2, 2), np.nan, dtype=np.float32)
    cmp = compare("P", got, want, FLOAT, {"k": 1})
    assert not cmp.ok
    assert cmp.wrong == 4
    assert "all 4 elements are NaN" in cmp.summary
    assert "never written" in cmp.summary


def test_compare_shape_mismatch():
    cmp = compare("P", np.zeros((2, 3)), np.zeros((3, 2)), FLOAT, {"k": 1})
    assert not cmp.ok
    assert cmp.wrong == cmp.total == 6
    assert cmp.summary == "P: shape (2, 3), expected (3, 2)"
    assert math.isinf(cmp.max_abs_error)


def test_compare_exact_ints():
    exact = Tolerance(kind="exact", rtol=0.5, atol=10.0)  # tolerances do not apply
    want = np.array([1, 2, 3, 2**31 - 1], dtype=np.int64)
    assert compare("hist", want.astype(np.int32), want, exact, {}).ok
    got = want.copy()
    got[1] = 3
    cmp = compare("hist", got, want, exact, {})
    assert not cmp.ok
    assert cmp.wrong == 1
    assert cmp.first[0].index == "[1]"
    assert cmp.first[0].got == 3 and isinstance(cmp.first[0].got, int)
    assert cmp.summary == "hist: 1 of 4 elements wrong; first at hist[1]: got 3, expected 2"
    assert "NaN" not in cmp.summary
