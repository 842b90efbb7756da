"""Reading compute-sanitizer's reports (captured from real runs on an H100, CUDA 13.0)."""

from __future__ import annotations

from pathlib import Path

from grader.checks import sanitizer

DATA = Path(__file__).parent / "data" / "sanitizer"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_racecheck_counts_errors_not_hazards():
    count, findings = sanitizer.parse(read("racecheck.txt"))
    assert count == 1
    assert findings[0].splitlines()[0] == "Error: Race reported between Write access at race(int *)+0xa0 in bad.cu:3"
    assert "Read access at race(int *)+0xb0 in bad.cu:3 [128 hazards]" in findings[0]


def test_synccheck_findings_drop_host_frames():
    count, findings = sanitizer.parse(read("synccheck.txt"))
    assert count == 16
    assert len(findings) == 3
    assert findings[0].splitlines() == [
        "Barrier error detected. Divergent thread(s) in warp.",
        "  at divsync(int *)+0x70 in bad.cu:4",
        "  by thread (0,0,0) in block (0,0,0)",
    ]


def test_clean_run_has_no_findings():
    assert sanitizer.parse(read("clean.txt")) == (0, [])


def test_build_paths_become_the_students_file_name():
    text = "=========     at k(float*)+0x70 in /root/.cache/cuda-lab-grader/builds/build-x1/labs/histogram/student.cu:41"
    shown = sanitizer._student_paths(text, "labs/histogram/student.cu")
    assert shown.endswith("in labs/histogram/student.cu:41")
    assert ".cache" not in shown


def test_every_tool_has_flags_and_a_description():
    from typing import get_args

    from grader.labspec.spec import SanitizerTool

    assert set(get_args(SanitizerTool)) == set(sanitizer.TOOL_FLAGS) == set(sanitizer.WHAT)
    assert sanitizer.TOOL_FLAGS["memcheck"] == ("--padding", "256")


def test_memcheck_keeps_the_address_lines():
    count, findings = sanitizer.parse(read("memcheck.txt"))
    assert count == 29
    assert findings[0].splitlines() == [
        "Invalid __global__ write of size 4 bytes",
        "  at oob(float *, int)+0x90 in bad.cu:2",
        "  by thread (100,0,0) in block (0,0,0)",
        "  Access to 0x7f9c84800190 is out of bounds",
        "  and is 1 bytes after the nearest allocation at 0x7f9c84800000 of size 400 bytes",
    ]
    assert not any("unspecified launch failure" in f or "Host Frame" in f for f in findings)


SOURCE = ("__global__ void oob(float *p, int n) {",
          "    p[threadIdx.x] = 1.0f;   // no bounds check",
          "}")


def test_a_finding_names_the_students_line_with_its_text_and_the_thread():
    _, findings = sanitizer.parse(read("memcheck.txt"))
    said, where = sanitizer.summary(findings[0], "bad.cu", SOURCE)
    assert said == ("out-of-bounds write of 4 bytes at line 2 (`p[threadIdx.x] = 1.0f; // no bounds check`), "
                    "thread (100,0,0) block (0,0,0)")
    assert where is not None and (where.file, where.line) == ("bad.cu", 2)
    _, races = sanitizer.parse(read("racecheck.txt"))
    assert sanitizer.summary(races[0], "bad.cu", ())[0] == "a shared-memory race between threads at line 3"
    _, barriers = sanitizer.parse(read("synccheck.txt"))
    assert sanitizer.summary(barriers[0], "bad.cu", SOURCE)[0] == (
        "a barrier that not every thread of the warp reached at line 4, thread (0,0,0) block (0,0,0)")  # past the file shown
    said, where = sanitizer.summary(findings[0], "labs/other/student.cu", SOURCE)  # a line in another file: not the student's
    assert where is None and said == "out-of-bounds write of 4 bytes, thread (100,0,0) block (0,0,0)"


def test_a_failed_sanitizer_check_carries_its_line_to_the_junit_report(tmp_path):
    import threading

    from junitparser import JUnitXml, TestSuite

    from grader.checks.sanitizer import SanitizerRun, judge
    from grader.labspec.labs import find_lab
    from grader.outcome import LabReport
    from grader.report import junit

    spec = find_lab("tiled_matmul")
    check = next(c for c in spec.sanitizers if c.tool == "memcheck")
    _, findings = sanitizer.parse(read("memcheck.txt"))

    class Sub:  # the two fields judge() reads of a Submission
        moot, name, source_lines = threading.Event(), "bad.cu", SOURCE

    result = judge(Sub(), check, SanitizerRun(errors=29, findings=tuple(findings[:3])))  # type: ignore[arg-type]
    assert "memcheck reported 29 error(s)" in result.message and "at line 2 (`p[threadIdx.x] = 1.0f;" in result.message
    assert "first report: Invalid __global__ write of size 4 bytes" in result.message
    path = tmp_path / "report.xml"
    junit.write([LabReport(spec.id, spec.title, "bad.cu", (result,))], path)
    class Suite(TestSuite):
        testcase = junit.LocatedCase

    class Xml(JUnitXml):
        testsuite = Suite

    (case,) = [c for suite in Xml.fromfile(str(path)) for c in suite]
    assert (case.file, case.line) == ("bad.cu", 2)


def test_a_run_whose_only_errors_are_failed_cuda_calls_says_so_not_out_of_bounds():
    """A program whose cudaMalloc failed (and went on) has no access to blame: the verdict names the
    failed call, not the lab's out-of-bounds hint."""
    import threading

    from grader.checks.sanitizer import SanitizerRun, judge
    from grader.labspec.labs import find_lab

    spec = find_lab("tiled_matmul")
    check = next(c for c in spec.sanitizers if c.tool == "memcheck")
    text = read("api_errors.txt")
    count, findings = sanitizer.parse(text)
    assert (count, findings) == (3, [])

    class Sub:
        moot, name, source_lines = threading.Event(), "hog.cu", ()

    result = judge(Sub(), check, SanitizerRun(errors=count, findings=(), log=text))  # type: ignore[arg-type]
    assert result.message == ("memcheck reported 3 error(s) on width=48, all of them failed CUDA calls, not memory accesses "
                              "(first: cudaErrorMemoryAllocation from cudaMalloc): check what each CUDA call returns")
    assert check.hint and check.hint not in result.message
