"""report.html and the roofline: one repository's grading on one self-contained page, each lab's
timed kernels against the GPU's FP32 and DRAM roofs, and the same figures in report.md."""

from __future__ import annotations

import pytest

from grader.outcome import CheckResult, LabReport, Outcome, SourceLocation, Stage
from grader.report import files, html, roofline

ENV = {"device.peak_fp32_gflops": 66900.0, "device.peak_dram_gbps": 3352.3, "gpu": "NVIDIA H100 80GB HBM3"}
TIMINGS = {  # tiled_matmul at 4096: 137 GFLOP over 201 MB (the lab's model), as the grader's timing rows hold it
    "naive": {"median_ms": 3.1379, "min_ms": 3.1355, "cv_pct": 0.228, "n": 10, "gflops": 5475.0, "gbps": 80.2},
    "reference": {"median_ms": 2.1136, "min_ms": 2.1113, "cv_pct": 0.053, "n": 10, "gflops": 8128.3, "gbps": 119.1},
    "student": {"median_ms": 2.1132, "min_ms": 2.1108, "cv_pct": 0.064, "n": 10, "gflops": 8129.7, "gbps": 119.1},
}
HOSTILE = "<img src=x onerror=alert(1)>"


def _report(timings=TIMINGS, env=ENV) -> LabReport:
    checks = (CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, "compiled"),
              CheckResult("memcheck_clean", Stage.SANITIZER, Outcome.FAIL, 0, 2, f"memcheck: out-of-bounds write {HOSTILE}",
                          "Invalid __global__ write of size 4 bytes", location=SourceLocation("labs/tiled_matmul/student.cu", 31)))
    return LabReport("tiled_matmul", "Tiled matrix multiplication", "labs/tiled_matmul/student.cu", checks, env, (), timings)


def test_each_kernel_sits_at_its_intensity_under_the_lower_roof():
    roof = roofline.of(_report())
    assert roof is not None and [p.kernel for p in roof.points] == ["naive", "reference", "student"]
    student = roof.points[2]
    assert student.intensity == pytest.approx(8129.7 / 119.1) and student.gflops == 8129.7
    assert roof.ridge == pytest.approx(66900 / 3352.3)
    assert roof.roof(student.intensity) == 66900.0  # past the ridge: the compute roof
    assert roof.roof(1.0) == pytest.approx(3352.3)  # below it: the memory roof
    assert roof.share(student) == pytest.approx(8129.7 / 66900)
    assert roofline.table(roof)[-1] == "| student | model | 68.3 | 8129.7 | 66900.0 | 12.2 |"


def test_measured_dram_bytes_place_each_kernel_unless_one_kernel_lacks_them():
    traffic = {"naive": 1.61e9, "reference": 0.201e9, "student": 0.402e9}  # bytes read and written, as ncu counts them
    flops = 2 * 4096 ** 3
    measured = {k: {**row, "dram_bytes": int(traffic[k]), "flop_per_dram_byte": round(flops / traffic[k], 3)}
                for k, row in TIMINGS.items()}
    roof = roofline.of(_report(measured))
    assert roof is not None and roof.traffic == roofline.MEASURED
    assert [round(p.intensity, 1) for p in roof.points] == [85.4, 683.8, 341.9]
    assert roofline.table(roof)[-1] == "| student | 402.0 | 342 | 8129.7 | 66900.0 | 12.2 |"
    partly = {**measured, "naive": TIMINGS["naive"]}  # the naive kernel's run failed: the model for all, said so
    roof = roofline.of(_report(partly))
    assert roof is not None and roof.traffic == roofline.MODELLED
    assert roof.points[2].intensity == pytest.approx(8129.7 / 119.1) and roof.points[2].dram_bytes == 0


def test_a_lab_without_flops_or_without_the_devices_peaks_has_no_roofline():
    bytes_only = {k: {**v, "gflops": None} for k, v in TIMINGS.items()}
    assert roofline.of(_report(bytes_only)) is None
    assert roofline.of(_report(env={"gpu": "x"})) is None
    assert roofline.of(_report(timings={})) is None


def test_the_page_is_self_contained_escaped_and_draws_each_kernel():
    page = html.render([_report()], {"student": "alice", "commit": "0" * 40})
    assert f'content="{html.CSP}"' in page and "<script" not in page and "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "(labs/tiled_matmul/student.cu:31)" in page
    assert page.count("<circle ") == 3 and "FP32 peak 66900 GFLOP/s" in page
    assert "<h1>CUDA labs: 0/2 points over 1 lab</h1>" in page


def test_the_report_folder_has_the_page_the_pictures_and_the_figures_in_markdown(tmp_path):
    pytest.importorskip("matplotlib")
    md = files.write_folder([_report()], {"student": "alice"}, tmp_path)
    assert (tmp_path / "report.html").is_file()
    png = (tmp_path / "roofline-tiled_matmul.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "[report.html](report.html)" in md and "| student | model | 68.3 | 8129.7 | 66900.0 | 12.2 |" in md
    assert (tmp_path / "report.md").read_text() == md


def test_a_class_folder_has_the_page_without_the_pictures(tmp_path):
    files.write_folder([_report()], {"student": "alice"}, tmp_path, pictures=False)
    assert (tmp_path / "report.html").is_file() and "<circle " in (tmp_path / "report.html").read_text()
    assert not list(tmp_path.glob("roofline-*.png"))
