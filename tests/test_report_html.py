"""report.html and the roofline: one repository's grading on one self-contained page, each lab's
timed kernels against the GPU's FP32 and DRAM roofs, and the same figures in report.md; checks that
did not run grouped by reason under a "not a final grade" banner, also in a real headless browser."""

from __future__ import annotations

import dataclasses

import headless
import pytest

from grader.engine.identity import Identity
from grader.outcome import CheckResult, LabReport, Outcome, SourceLocation, Stage, fmt_points
from grader.report import html, publish, roofline

ENV = {"device.peak_fp32_gflops": 66900.0, "device.peak_dram_gbps": 3352.3, "gpu": "NVIDIA H100 80GB HBM3"}
TIMINGS = {  # tiled_matmul at 4096: 137 GFLOP over 201 MB (the lab's model), as the grader's timing rows hold it
    "naive": {"median_ms": 3.1379, "min_ms": 3.1355, "cv_pct": 0.228, "n": 10, "gflops": 5475.0, "gbps": 80.2},
    "reference": {"median_ms": 2.1136, "min_ms": 2.1113, "cv_pct": 0.053, "n": 10, "gflops": 8128.3, "gbps": 119.1},
    "student": {"median_ms": 2.1132, "min_ms": 2.1108, "cv_pct": 0.064, "n": 10, "gflops": 8129.7, "gbps": 119.1},
}
HOSTILE = "<img src=x onerror=alert(1)>"


ALICE = Identity("alice", None, None, {}, {}, "")


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
    md = publish.write(publish.Graded([_report()], ALICE), publish.Outputs.folder(tmp_path))
    assert (tmp_path / "report.html").is_file()
    png = (tmp_path / "roofline-tiled_matmul.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "[report.html](report.html)" in md and "| student | model | 68.3 | 8129.7 | 66900.0 | 12.2 |" in md
    assert (tmp_path / "report.md").read_text() == md


def test_a_class_folder_has_the_page_without_the_pictures(tmp_path):
    publish.write(publish.Graded([_report()], ALICE), publish.Outputs.folder(tmp_path, pictures=False))
    assert (tmp_path / "report.html").is_file() and "<circle " in (tmp_path / "report.html").read_text()
    assert not list(tmp_path.glob("roofline-*.png"))


NO_GPU = "needs a GPU: no CUDA device is visible"


def _not_run() -> LabReport:
    """A lab graded without a GPU, as a CPU-only class grades it: most of its checks skipped for one reason."""
    checks = (CheckResult("compile", Stage.COMPILE, Outcome.PASS, 0, 0, "compiled"),
              CheckResult("shared_memory_tiles", Stage.STATIC, Outcome.PASS, 2, 2, "uses shared memory"),
              *(CheckResult(f"correctness[width={w}]", Stage.CORRECTNESS, Outcome.SKIPPED, 0, 2, NO_GPU) for w in range(16, 16 * 31, 16)),
              CheckResult("speedup_vs_naive", Stage.SPEED, Outcome.SKIPPED, 0, 4, "timing turned off (--no-timing)"))
    return LabReport("tiled_matmul", "Tiled matrix multiplication", "labs/tiled_matmul/student.cu", checks, ENV, (), {})


def test_checks_that_did_not_run_are_one_row_per_reason_under_a_not_final_banner():
    page = html.render([_not_run()], {"student": "alice"})
    assert page.count(NO_GPU) == 2  # the banner's line and the lab's one row, not a row per check
    assert page.count("<td class=\"o skipped\">") == 2
    assert "<b>Not a final grade:</b> 31 checks did not run here (64 points not checked):" in page
    assert f"<li>{NO_GPU}: 30 checks, 60 points</li><li>timing turned off (--no-timing): 1 check, 4 points</li>" in page
    assert "<details><summary>30 checks</summary><code>correctness[width=16]</code>, " in page
    assert all(page.count(f"<code>correctness[width={w}]</code>") == 1 for w in range(16, 16 * 31, 16))
    assert "<td>0/60</td>" in page and "<code>speedup_vs_naive</code></td><td>0/4</td>" in page
    assert "Not a final grade" not in html.render([_report()], {"student": "alice"})  # every check ran


def test_a_check_the_grader_failed_on_makes_the_grade_not_final():
    failed = CheckResult("speed", Stage.SPEED, Outcome.ERROR, 0, 4, "internal grader error 1a2b3c4d (OSError: x); the trace is in log")
    report = _report()
    page = html.render([LabReport(**{**report.__dict__, "checks": (*report.checks, failed)})])
    assert "<b>Not a final grade:</b> 1 check did not run here (4 points not checked):" in page
    assert "the grader failed on 1 check (an internal grader error: grade again)" in page


@headless.needs_browser
def test_a_headless_browser_shows_the_banner_and_the_grouped_skips(tmp_path):
    path = tmp_path / "report.html"
    path.write_text(html.render([_not_run()], {"student": "alice"}))
    dom = headless.dump_dom(path.as_uri(), tmp_path / "profile")
    assert '<div class="note"><b>Not a final grade:</b> 31 checks did not run here' in dom
    assert dom.count('<td class="o skipped">skipped</td>') == 2 and "<script" not in dom
    shot = headless.screenshot(path.as_uri(), tmp_path / "report.png", tmp_path / "profile", (1000, 700))
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_page_gives_the_grade_after_the_late_penalty_with_the_score_before_it():
    """A late student's page shows what every other output gives: the grade after the penalty."""
    base = _report()
    passed = CheckResult("speed", Stage.SPEED, Outcome.PASS, 20, 20, "fast")
    raw = dataclasses.replace(base, checks=(*base.checks, passed))
    late = {"student": "bob", "late": {"late_days": 1, "penalty": 0.1, "deadline": "2026-12-01T23:59:00Z"}}
    page = html.render([raw], late)
    after = round(raw.score * 0.9, 2)
    assert f"<title>CUDA labs: {fmt_points(after)}/" in page and raw.score != after
    assert "before a 10% late penalty: 1 late day)</h1>" in page
    assert "late penalty" not in html.render([raw], {"student": "alice"})
