"""The regrade benchmark's analysis: which verdict changes between regrades count as flips."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from benchmark_modules import load

from grader.labspec.labs import find_lab


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("regrade_stability")


def check(cid: str, stage: str, outcome: str, **measured: Any) -> dict[str, Any]:
    return {"id": cid, "stage": stage, "outcome": outcome, "measured": measured}


def report(sub: str, *checks: dict[str, Any]) -> dict[str, Any]:
    return {"submission": sub, "checks": list(checks), "timings": {}}


WRITER = "labs/boundary_checks/solutions/wrong/write_past_end.cu"
REFERENCE = "reference/boundary_checks/reference.cu"


def regrade(sanitizers: bool, writer_case: str, writer_speed: str, reference_speed: str) -> list[dict[str, Any]]:
    memcheck = (check("memcheck_clean", "sanitizer", "fail", global_writes_outside=32) if sanitizers
                else check("memcheck_clean", "sanitizer", "skipped"))
    return [
        report(WRITER, check("correctness[m=3,n=1000,k=5]", "correctness", writer_case), memcheck,
               check("speed_vs_reference", "speed", writer_speed, ratio=1.0)),
        report(REFERENCE, check("speed_vs_reference", "speed", reference_speed, ratio=1.0)),
    ]


def test_pinned_flips_count_and_any_or_unsanitized_timing_does_not(bench: ModuleType) -> None:
    expected = bench.expected_verdicts(find_lab("boundary_checks"))
    runs = [regrade(True, "pass", "fail", "pass"), regrade(False, "pass", "pass", "pass")]
    counted, allowed = bench.flips(runs, expected)
    assert counted == allowed == []  # the writer's speed was timed only because the sanitizers were off
    # the writer's stores land in P's own mapping on every run: its correctness verdict is pinned
    runs.append(regrade(True, "fail", "fail", "fail"))
    counted, _ = bench.flips(runs, expected)
    assert counted == [f"{WRITER}: correctness[m=3,n=1000,k=5] (fail/pass)", f"{REFERENCE}: speed_vs_reference (fail/pass)"]


def test_a_flip_of_a_verdict_expected_as_any_is_allowed(bench: ModuleType) -> None:
    expected = bench.expected_verdicts(find_lab("histogram"))
    launcher = "labs/histogram/solutions/correct/synchronizing_launcher.cu"  # speed_vs_reference: any
    runs = [[report(launcher, check("speed_vs_reference", "speed", outcome, ratio=0.8))] for outcome in ("pass", "fail")]
    assert bench.flips(runs, expected) == ([], [f"{launcher}: speed_vs_reference (fail/pass)"])


def test_regrades_are_read_back_in_order_from_their_folder(bench: ModuleType, tmp_path: Path) -> None:
    for n, outcome in ((2, "fail"), (1, "pass")):
        (tmp_path / f"boundary_checks-{n:03d}.json").write_text(json.dumps({"labs": [report(REFERENCE, check("x", "speed", outcome))]}))
    (tmp_path / "histogram-001.json").write_text(json.dumps({"labs": []}))
    runs = bench.saved(tmp_path, "boundary_checks")
    assert [r[0]["checks"][0]["outcome"] for r in runs] == ["pass", "fail"]


def test_regrades_in_turn_stop_short_of_the_sittings_end_with_whole_regrades(bench: ModuleType, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`--until N --stop-after-s S`: each lab regraded in turn until it has N in the folder, and no
    regrade started that its lab's last one says would end after S seconds."""
    from types import SimpleNamespace

    now = [0.0]
    takes = {"boundary_checks": 30.0, "histogram": 100.0}

    def regrade(spec, times, folder, *flags):
        assert times == 1
        now[0] += takes[spec.id]
        n = len(bench.regrade_files(folder, spec.id)) + 1
        (folder / f"{spec.id}-{n:03d}.json").write_text(json.dumps({"labs": []}))

    monkeypatch.setattr(bench, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(bench, "regrade", regrade)
    specs = [find_lab("boundary_checks"), find_lab("histogram")]
    bench.regrade_in_turn(specs, 3, tmp_path, stop_after_s=250)
    assert [len(bench.regrade_files(tmp_path, s.id)) for s in specs] == [3, 1]  # (histogram's second would end at 260 s)
    assert now[0] == 190
    bench.regrade_in_turn(specs, 3, tmp_path)  # a later sitting with no limit completes the folder
    assert [len(bench.regrade_files(tmp_path, s.id)) for s in specs] == [3, 3]
