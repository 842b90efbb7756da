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
