"""A lab's tool runs in the background: each stage's seconds, and a line once all its runs are over."""

from __future__ import annotations

import threading

from grader.engine.background import Background, StageClock
from grader.labspec.labs import find_lab
from grader.outcome import CheckResult, Outcome, Stage


def test_a_stage_says_once_when_its_last_run_is_over_and_each_stage_apart():
    said: list[str] = []
    release = threading.Event()
    runs = Background(find_lab("histogram"), StageClock(), said.append)
    runs.open(4)

    def quick() -> list[CheckResult]:
        return [CheckResult("memcheck_clean", Stage.SANITIZER, Outcome.PASS, 2, 2, "")]

    def held() -> list[CheckResult]:
        release.wait(10)
        return [CheckResult("racecheck_clean", Stage.SANITIZER, Outcome.PASS, 2, 2, "")]

    runs.run(Stage.SANITIZER, held, ("racecheck_clean",))
    runs.run(Stage.SANITIZER, quick, ("memcheck_clean",))
    runs.run(Stage.COUNTERS, lambda: [])
    runs.futures[1].result(10)
    runs.futures[2].result(10)
    assert [line.split(" after ")[0] for line in said] == ["[histogram] counters: every run over"]  # (racecheck still runs)
    release.set()
    assert [c.id for c in runs.wait()] == ["racecheck_clean", "memcheck_clean"]
    assert [line.split(" after ")[0] for line in said] == ["[histogram] counters: every run over",
                                                           "[histogram] sanitizer: every run over"]
    runs.cancel()


def test_a_run_that_fails_is_errors_on_its_checks_and_still_counts_as_over():
    said: list[str] = []
    runs = Background(find_lab("histogram"), StageClock(), said.append)
    runs.open(1)

    def broken() -> list[CheckResult]:
        raise RuntimeError("a grader bug")

    runs.run(Stage.SANITIZER, broken, ("memcheck_clean",))
    results = runs.wait()
    assert [(c.id, c.outcome) for c in results] == [("memcheck_clean", Outcome.ERROR)]
    assert len(said) == 1 and said[0].startswith("[histogram] sanitizer: every run over after ")
    runs.cancel()


def test_the_phases_a_batch_tells_from_its_threads_add_up_in_the_labs_stage_seconds():
    """``spent`` (what a counter replay tells of its phases, from the threads of the student's and
    the baselines' replays) adds to the lab's clock beside the stages; no addition is lost."""
    clock = StageClock()
    runs = Background(find_lab("histogram"), clock, lambda line: None)
    runs.open(8)

    def batch() -> list[CheckResult]:
        for _ in range(1000):
            runs.spent("counters.record", 0.001)
        runs.spent("counters.profile", 0.25)
        return []

    for _ in range(8):
        runs.run(Stage.COUNTERS, batch)
    assert runs.wait() == []
    assert clock.seconds["counters.record"] == 8.0 and clock.seconds["counters.profile"] == 2.0, clock.seconds
    assert "counters" in clock.seconds
    runs.cancel()
