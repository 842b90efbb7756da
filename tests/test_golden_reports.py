"""Golden reports: what every report format says for fixed inputs, kept byte for byte under
``tests/data/golden/``, so that a change of the grader's structure that changes a report shows.

Two fixtures: reports built here (every outcome, located failures, counter and timing figures,
a roofline, hostile text, a late penalty), rendered as they are; and a repository of five labs
(a wrong prototype, a kernel with a local array, a stub, two references) graded without a GPU by
the installed command, with what differs from run to run or machine to machine (times, hashes of
the grader's source and the labs, the host, the folders, tool versions) replaced by placeholders.

A deliberate change of what the reports say is recorded with ``GRADER_UPDATE_GOLDEN=1 pytest
tests/test_golden_reports.py``; the diff of ``tests/data/golden/`` is then the change to review.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.engine.identity import Identity
from grader.engine.repo import submission_path
from grader.labspec.labs import find_lab
from grader.outcome import CheckResult, KernelResources, LabReport, Outcome, SourceLocation, Stage
from grader.report import publish

GOLDEN = Path(__file__).parent / "data" / "golden"
UPDATE = os.environ.get("GRADER_UPDATE_GOLDEN") == "1"
HOSTILE = "<img src=x onerror=alert(1)> | `x` & \"q\" ]]>"
REPORTS = ("report.xml", "report.json", "report.md", "report.html")


def _same_as_golden(folder: Path, name: str, texts: dict[str, str]) -> None:
    """Each report's text equals its golden file (or, updating, becomes it)."""
    golden = GOLDEN / name
    if UPDATE:
        golden.mkdir(parents=True, exist_ok=True)
        for report, text in texts.items():
            (golden / report).write_text(text, encoding="utf-8")
        return
    for report, text in texts.items():
        kept = golden / report
        assert kept.is_file(), f"{kept} is missing: record it with GRADER_UPDATE_GOLDEN=1"
        if text != kept.read_text(encoding="utf-8"):
            (folder / f"new-{report}").write_text(text, encoding="utf-8")
            pytest.fail(f"{report} differs from {kept} (now in {folder / ('new-' + report)}; "
                        f"diff them, and record a deliberate change with GRADER_UPDATE_GOLDEN=1)")


def synthetic_reports() -> tuple[list[LabReport], dict[str, object]]:
    here = "labs/tiled_matmul/student.cu"
    tiled = LabReport(
        "tiled_matmul", "Tiled matrix multiplication", here,
        (
            CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, "compiled for sm_90 (32 registers, 2048 bytes of shared memory)"),
            CheckResult("uses_shared_memory", Stage.STATIC, Outcome.PASS, 2, 2, "the kernel reads shared memory (LDS: 16)"),
            CheckResult("correctness[width=16]", Stage.CORRECTNESS, Outcome.PASS, 2, 2, "correct (largest error 4.6e-07)",
                        measured={"max_abs_error": 4.6e-07, "seconds": 0.0012}, duration_s=0.0125),
            CheckResult("correctness[width=48]", Stage.CORRECTNESS, Outcome.FAIL, 0, 2,
                        f"P: 2304 of 2304 elements wrong; first at P[0, 0]: got nan, expected 1.5 {HOSTILE}",
                        "P[0, 0] got nan expected 1.5\nP[0, 1] got nan expected 2.5", location=SourceLocation(here, 31)),
            CheckResult("memcheck_clean", Stage.SANITIZER, Outcome.ERROR, 0, 2, "memcheck did not finish: the case hung (10 s)"),
            CheckResult("racecheck_clean", Stage.SANITIZER, Outcome.SKIPPED, 0, 1, "left to the course's runner (course-only)"),
            CheckResult("global_load_reduction", Stage.COUNTERS, Outcome.FAIL, 1.25, 3,
                        "global load requests: 1,048,576 against 8,388,608 for the naive kernel (width=512), 8.0x fewer "
                        "(full marks at >= 16x, none at <= 4x); where: student.cu:27 (50% of the requests)",
                        measured={"student": 1048576.0, "naive": 8388608.0, "ratio": 8.0, "counted_by": "replayer",
                                  "kernels": "matmul_tiled(float const*, float const*, float*, int)"},
                        location=SourceLocation(here, 27)),
            CheckResult("speed_vs_naive", Stage.SPEED, Outcome.PASS, 3, 3, "1.48x the naive kernel's speed (full marks at >= 1.3x)",
                        measured={"speedup": 1.485, "student_median_ms": 2.1132}),
        ),
        {"gpu": "NVIDIA H100 80GB HBM3", "device.peak_fp32_gflops": 66900.0, "device.peak_dram_gbps": 3352.3, "nvcc": "13.0.88"},
        (KernelResources("matmul_tiled", registers=32, barriers=1, smem_bytes=2048),),
        {"naive": {"median_ms": 3.1379, "min_ms": 3.1355, "cv_pct": 0.228, "n": 10, "gflops": 5475.0, "gbps": 80.2},
         "student": {"median_ms": 2.1132, "min_ms": 2.1108, "cv_pct": 0.064, "n": 10, "gflops": 8129.7, "gbps": 119.1}},
        {"compile": 2.5, "correctness": 1.25, "counters": 0.62},
    )
    broken = LabReport(
        "histogram", "Text histogram", "labs/histogram/student.cu",
        (CheckResult("compile", Stage.COMPILE, Outcome.ERROR, 0, 0, "does not compile: error: expected a \";\"",
                     "student.cu(12): error: expected a \";\"", location=SourceLocation("labs/histogram/student.cu", 12)),
         CheckResult("correctness[english_4095]", Stage.CORRECTNESS, Outcome.ERROR, 0, 1, "not run: the file does not compile")),
    )
    identity: dict[str, object] = {
        "student": "ada", "repository": "/srv/class/ada", "commit": "0123456789abcdef0123456789abcdef01234567",
        "files": {"labs/tiled_matmul/student.cu": "ab" * 32, "labs/histogram/student.cu": None},
        "labs": {"tiled_matmul": "1", "histogram": "1"}, "content_hash": "cd" * 32, "labs_origin": "course checkout",
        "labs_folder": "/srv/course/labs", "labs_hash": "ef" * 32, "grader_version": "0.1.0", "grader_source": "12" * 32,
        "graded_at": "2026-12-02T08:00:00Z", "host": "gpu-node-1", "gpu": "NVIDIA H100 80GB HBM3", "driver": "580.159.04",
        "sandbox": "bubblewrap 0.8.0: no network", "late": {"late_days": 1, "penalty": 0.1, "deadline": "2026-12-01T23:59:00Z"},
    }
    return [tiled, broken], identity


def _written(reports: list[LabReport], identity: dict[str, object], folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    publish.write(publish.Graded(reports, Identity(**identity)), publish.Outputs.folder(folder, pictures=False))  # type: ignore[arg-type]
    return {name: (folder / name).read_text(encoding="utf-8") for name in REPORTS}


def test_every_report_of_fixed_reports_is_its_golden_file(tmp_path):
    reports, identity = synthetic_reports()
    _same_as_golden(tmp_path, "built", _written(reports, identity, tmp_path / "out"))


#: What differs from run to run or from machine to machine in a report of a real grading.
VARYING = (
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), "<time>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\b[0-9a-f]{12}\b"), "<sha12>"),
    (re.compile(r'time="[0-9.e-]+"'), 'time="<s>"'),
    (re.compile(r'"duration_s": [0-9.e-]+'), '"duration_s": <s>'),
    (re.compile(r'("host": |identity\.host" value=)"[^"]*"'), r'\1"<host>"'),
    (re.compile(r'"build_cached": (true|false)'), '"build_cached": <kept>'),
    (re.compile(r"bubblewrap [0-9.]+"), "bubblewrap <v>"),
    (re.compile(r'"nvcc": "[0-9.]+"'), '"nvcc": "<v>"'),
)


def normalised(text: str, repo: Path) -> str:
    text = text.replace(str(repo), "<repo>").replace(str(Path(__file__).resolve().parent.parent), "<checkout>")
    for pattern, placeholder in VARYING:
        text = pattern.sub(placeholder, text)
    return re.sub(r'("stage_seconds": \{)([^}]*)(\})', lambda m: m.group(1) + re.sub(r": [0-9.e-]+", ": <s>", m.group(2)) + m.group(3),
                  text)


def test_a_repository_graded_without_a_gpu_writes_its_golden_reports(tmp_path):
    from grader.isolation.sandbox import detect

    if not detect().active:
        pytest.skip(f"the golden reports were graded in bubblewrap, which cannot run here: {detect().reason}")
    repo = tmp_path / "repo"
    picks = {"tiled_matmul": "solutions/wrong/wrong_prototype.cu", "memory_types": "solutions/wrong/local_array.cu",
             "histogram": "reference", "boundary_checks": "stub", "corner_turning": "reference"}
    for lab_id, pick in picks.items():
        spec = find_lab(lab_id)
        source = spec.files.reference if pick == "reference" else spec.files.stub if pick == "stub" else spec.root / pick
        assert source is not None
        target = submission_path(repo, lab_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    out = tmp_path / "out"
    env = {**os.environ, "GRADER_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "grader", "grade-repo", str(repo), "--no-gpu", "--out", str(out), "-q"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    texts = {name: normalised((out / name).read_text(encoding="utf-8"), repo) for name in REPORTS}
    json.loads(texts["report.json"].replace("<s>", "0").replace("<kept>", "true"))  # (placeholders only where values were)
    _same_as_golden(tmp_path, "graded-without-gpu", texts)
