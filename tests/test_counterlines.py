"""The source lines a failing counter check names, from Nsight Compute source pages captured on an
H100 (ncu 2025.3.1, CUDA 13.0; tests/data/ncu/README.md says how)."""

from __future__ import annotations

import gzip
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from worker_replies import tool_result

from grader.checks.counters import lines as counterlines
from grader.checks.counters import ncu as counters
from grader.isolation.toolrun import ToolRun
from grader.labspec.labs import find_lab
from grader.outcome import Outcome

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "ncu"
#: page -> the solution it profiled
SOURCES = {
    "ct_uncoalesced": ROOT / "labs/corner_turning/solutions/wrong/uncoalesced_tile.cu",
    "ct_conflicts": ROOT / "labs/corner_turning/solutions/wrong/transposed_conflicts.cu",
    "hist_global": ROOT / "reference/histogram/global_atomics.cu",
    "hist_sectioned": ROOT / "labs/histogram/solutions/wrong/sectioned.cu",
    "tm_tiny": ROOT / "labs/tiled_matmul/solutions/wrong/tiny_tiles.cu",
}


def page(name: str) -> str:
    with gzip.open(DATA / f"{name}.source.csv.gz", "rt") as f:
        return f.read()


def student(name: str, shown: str = "") -> SimpleNamespace:
    """The two fields the messages read of a Submission: the file as the student knows it (its name
    is the build's, which ncu prints), their lines."""
    return SimpleNamespace(name=shown or f"labs/lab/{SOURCES[name].name}", source_lines=tuple(SOURCES[name].read_text().splitlines()))


@pytest.mark.parametrize("name,figure,lines,first", [
    ("ct_uncoalesced", "global_load_sectors", [17], 4.0),  # the tile of N loaded without corner turning
    ("ct_conflicts", "shared_bank_conflicts", [20], 14.0),  # the unpadded tile read down its columns
    ("hist_global", "global_atomics", [10], 131067),  # atomicAdd inlined from a CUDA header: the line that calls it
    ("hist_sectioned", "global_load_sectors", [17], 16.0),  # each thread reads its own section
    ("tm_tiny", "global_load_sectors", [14, 15], 4.0),  # four-thread warps: 16 bytes a request, a sector each
    ("tm_tiny", "global_load_requests", [14, 15], 16777216),  # 2x2 tiles: both loads, the first line first
])
def test_each_failing_figure_names_the_lines_it_comes_from_worst_first(name, figure, lines, first):
    found = counterlines.counts(figure, counterlines.on_student_lines(counterlines.parse(page(name)), SOURCES[name].name))
    assert [c.line for c in found] == lines
    assert found[0].value == pytest.approx(first, rel=1e-3)


def test_the_message_quotes_the_students_line_and_points_the_report_at_it():
    sub = student("ct_uncoalesced")
    text, where = counterlines.lines("global_load_sectors", page("ct_uncoalesced"), sub)  # type: ignore[arg-type]
    assert text == ("labs/lab/uncoalesced_tile.cu:17 (`Nds[tx][ty] = N[(col0 + tx) * width + ph * TILE_WIDTH + ty]; "
                    "// should be Nds[ty][tx] = N[(col0 + ty`): 4.0 sectors per 32 bytes requested (1 when coalesced)")
    assert where is not None and (where.file, where.line) == ("labs/lab/uncoalesced_tile.cu", 17)
    atomics, _ = counterlines.lines("global_atomics", page("hist_global"), student("hist_global"))  # type: ignore[arg-type]
    assert atomics.endswith(":10 (`if (pos < 26) atomicAdd(&bins[pos / 4], 1u);`): 131,067 global atomic instructions (warp-level)")


def test_a_page_that_names_none_of_the_students_lines_gives_no_message():
    sub = student("ct_uncoalesced", "labs/lab/other.cu")  # the build's file is not the student's
    assert counterlines.lines("global_load_sectors", page("ct_uncoalesced"), sub) == ("", None)  # type: ignore[arg-type]
    assert counterlines.lines("global_atomics", page("ct_uncoalesced"), student("ct_uncoalesced")) == ("", None)  # type: ignore[arg-type]


def test_a_cut_or_garbled_page_is_read_as_far_as_it_parses():
    text = page("ct_uncoalesced")
    cut = text[: len(text) * 2 // 3]
    assert len(counterlines.parse(cut)) < len(counterlines.parse(text))
    garbage = '"Line No","Source","Address"\n"x","y"\n,,"0xZZ","LDG"\n"Address","Source"\n,"0x10","LDG.E R1"\n\x00\n'
    assert counterlines.parse(garbage) == []  # no source file named, a SASS-only table: nothing to attribute
    assert counterlines.parse("") == []


def test_a_failing_counter_check_with_by_line_profiles_its_case_again_and_names_the_line(monkeypatch, tmp_path):
    spec = find_lab("corner_turning")
    check = next(c for c in spec.counters if c.id == "coalesced_loads")
    assert check.by_line == "global_load_sectors"
    runs = []

    def fake_profiler(task, metrics, dirs, limit, isolation, gpu, stop=None, collect=()):
        runs.append(collect)
        if collect:  # the source counters run
            return ToolRun(0, page("ct_uncoalesced"), "", tool_result({"status": "ok"}), 1.0), counters.CounterRun()
        values = {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 40.0, "smsp__sass_data_bytes_mem_global_op_ld.sum": 512.0,
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 10.0,
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": 0.0,
                  "smsp__sass_inst_executed_op_shared_ld.sum": 1.0, "smsp__sass_inst_executed_op_shared_st.sum": 1.0}
        return None, counters.CounterRun(values=values, kernels=("matmul_corner_turning",))

    monkeypatch.setattr(counters, "tool_task", lambda sub, check, dirs, library=None: {"kind": "case"})
    monkeypatch.setattr(counters, "run_profiler", fake_profiler)
    sub = SimpleNamespace(spec=spec, name="labs/corner_turning/uncoalesced_tile.cu", moot=threading.Event(), gpu=None,
                          source_lines=tuple(SOURCES["ct_uncoalesced"].read_text().splitlines()),
                          tool_dirs=lambda name: tmp_path / name, time_left=lambda limit: limit, isolation=None)
    profiles = counters.Profiles(spec.counters)  # both checks profile the same case
    profiles.settle("student", profiles.case(check), counters.CounterRun(values=fake_profiler(0, (), 0, 0, 0, 0)[1].values,
                                                                           kernels=("matmul_corner_turning",)))
    no_baseline = __import__("dataclasses").replace(check, baseline="")
    result = counters.grade(sub, no_baseline, profiles)  # type: ignore[arg-type]
    assert result.outcome is Outcome.FAIL and "2.5" in result.message
    assert "; where: labs/corner_turning/uncoalesced_tile.cu:17 (`Nds[tx][ty]" in result.message
    assert result.location is not None and result.location.line == 17
    assert runs[-1] == counterlines.NCU_ARGS
    conflicts = __import__("dataclasses").replace(next(c for c in spec.counters if c.id == "shared_bank_conflicts"), baseline="")
    second = counters.grade(sub, conflicts, profiles)  # type: ignore[arg-type]
    assert second.outcome is Outcome.FAIL and "; where: labs/corner_turning/uncoalesced_tile.cu:17 (" in second.message
    assert runs.count(counterlines.NCU_ARGS) == 1  # one source page serves every failing check of the case
