"""The repository benchmark's run of the command line in a process of its own (a student's grade
again): its wall time, the score its JSON report gives and its progress by the second."""

from __future__ import annotations

import re

from benchmark_modules import load


def test_a_fresh_run_is_the_command_line_in_a_new_process_and_reads_its_score_from_its_report(tmp_path, monkeypatch):
    bench = load("grade_repo_speed")
    monkeypatch.setattr(bench.tempfile, "tempdir", str(tmp_path))  # (its repository and report folders)
    repo = bench.solutions_repo("stub")
    cache = tmp_path / "cache"
    wall, score, rc, lines = bench.fresh_run(repo, cache, "replay")
    assert rc == 0 and wall > 0
    assert re.fullmatch(r"\d+(\.\d+)?/143", score), score  # (no GPU here: the compiled code's checks alone)
    assert any("compiling 5 submissions" in line for _, line in lines)
    assert [at for at, _ in lines] == sorted(at for at, _ in lines)
    assert any(cache.iterdir())  # it graded on the cache it was given
