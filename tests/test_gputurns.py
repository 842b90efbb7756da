"""GPU work takes turns with timings, between real processes: steps overlap one another, a
timing waits for the steps in flight and holds back new ones, and every wait is bounded."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from grader.context import current, entered
from grader.host import gputurns
from grader.host.hostlock import LockTimeout, lock_place

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from grader.host import gputurns
    from grader.host.hostlock import lock_place
    folder, what, hold_s, log = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), Path(sys.argv[4])
    turns = gputurns.Turns(lock_place("GPU-test", folder))
    with (turns.timing() if what == "timing" else turns.step()):
        log.write_text(f"{time.time()}\\n")
        time.sleep(hold_s)
        log.write_text(log.read_text() + f"{time.time()}\\n")
""")


def _start(folder: Path, what: str, hold_s: float, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(folder), what, str(hold_s), str(log)], cwd=ROOT)


def _span(log: Path) -> tuple[float, float]:
    start, end = (float(x) for x in log.read_text().split())
    return start, end


def _when_started(log: Path, limit_s: float = 20.0) -> None:
    deadline = time.monotonic() + limit_s
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.exists(), f"{log.name} never started"


def _until_turnstile_held(folder: Path, limit_s: float = 20.0) -> None:
    """Until a timing holds the turnstile (held through several tries: a step holds it only for an instant)."""
    path = lock_place("GPU-test", folder).path(gputurns.TURNSTILE)
    deadline, held = time.monotonic() + limit_s, 0
    while held < 5 and time.monotonic() < deadline:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = 0
        except BlockingIOError:
            held += 1
        finally:
            os.close(fd)
        time.sleep(0.02)
    assert held >= 5, "the timing never took the turnstile"


def test_steps_of_two_processes_share_the_gpu(tmp_path):
    logs = [tmp_path / "a", tmp_path / "b"]
    procs = [_start(tmp_path, "step", 1.0, log) for log in logs]
    assert [p.wait(30) for p in procs] == [0, 0]
    (a0, a1), (b0, b1) = _span(logs[0]), _span(logs[1])
    assert a0 < b1 and b0 < a1, "the two steps ran side by side"


def test_a_timing_waits_for_the_steps_in_flight_and_holds_back_new_ones(tmp_path):
    step, timed, later = tmp_path / "step", tmp_path / "timed", tmp_path / "later"
    first = _start(tmp_path, "step", 1.0, step)
    _when_started(step)
    timer = _start(tmp_path, "timing", 1.0, timed)
    _until_turnstile_held(tmp_path)  # the timer waits for the step, holding new ones back
    second = _start(tmp_path, "step", 0.1, later)
    assert [p.wait(30) for p in (first, timer, second)] == [0, 0, 0]
    assert _span(timed)[0] >= _span(step)[1], "the timing began only once the step in flight had ended"
    assert _span(later)[0] >= _span(timed)[1], "a step asked for during the wait ran only after the timing"


def test_a_step_that_waits_for_another_step_of_its_process_is_not_held_behind_a_timing(tmp_path):
    """A student's shared sanitizer run (a step) ends once a hung lab's case has been run again (a
    second step of the same process). Another seat's timing that took the turnstile meanwhile
    waits for the sanitizer run: the second step must start, or neither ever ends (a class of 12
    with two seats stalled so on an H100)."""
    turns = gputurns.Turns(lock_place("GPU-test", tmp_path), wait_s=20)
    rerun_ended, first_ended = threading.Event(), []

    def sanitizer_run() -> None:
        with turns.step():
            rerun_ended.wait(15)
            first_ended.append(time.time())

    first = threading.Thread(target=sanitizer_run)
    first.start()
    time.sleep(0.2)
    timed = tmp_path / "timed"
    timer = _start(tmp_path, "timing", 0.1, timed)
    _until_turnstile_held(tmp_path)  # the other seat's timing waits for the sanitizer run
    began = time.monotonic()
    with turns.step():  # the rerun of the hung case
        rerun_ended.set()
    assert time.monotonic() - began < 5, "the rerun waited behind the timing that waited for it"
    first.join(20)
    assert timer.wait(30) == 0
    assert _span(timed)[0] >= first_ended[0], "the timing still began only once every step had ended"


SEAT = textwrap.dedent("""
    import random, sys, threading, time
    from pathlib import Path
    from grader.host import gputurns
    from grader.host.hostlock import lock_place
    folder, rounds, log = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    turns, spans, lock = gputurns.Turns(lock_place("GPU-test", folder), wait_s=60), [], threading.Lock()

    def span(kind, began):
        with lock:
            spans.append(f"{kind} {began} {time.time()}")

    for _ in range(rounds):
        rerun = threading.Event()

        def shared_run():  # a step that ends once a later step of this process has run
            with turns.step():
                began = time.time()
                rerun.wait(10)
                span("step", began)

        first = threading.Thread(target=shared_run)
        first.start()
        time.sleep(random.uniform(0, 0.02))
        with turns.step():
            began = time.time()
            rerun.set()
            span("step", began)
        first.join()
        with turns.timing():
            began = time.time()
            time.sleep(0.005)
            span("timing", began)
    log.write_text("\\n".join(spans))
""")


def test_seats_whose_steps_wait_on_each_other_all_finish_and_no_timing_overlaps_another_s_step(tmp_path):
    """Three seats, each round a step that waits for a later step of its own seat, then a
    timing: every seat finishes (no cycle between a timing and a seat's own steps), and no
    timing ever ran beside another seat's step."""
    logs = [tmp_path / f"seat{k}.log" for k in range(3)]
    procs = [subprocess.Popen([sys.executable, "-c", SEAT, str(tmp_path), "15", str(log)], cwd=ROOT) for log in logs]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    spans = [[(kind, float(a), float(b)) for kind, a, b in (line.split() for line in log.read_text().splitlines())] for log in logs]
    assert all(sum(kind == "timing" for kind, _, _ in seat) == 15 for seat in spans)
    for k, seat in enumerate(spans):
        for kind, a, b in seat:
            if kind == "timing":
                beside = [(o, c, d) for j, other in enumerate(spans) if j != k for o, c, d in other if o == "step" and c < b and a < d]
                assert not beside, f"seat {k}'s timing {a:.3f}-{b:.3f} ran beside {beside[:2]}"


def _until_timing_waits(folder: Path, limit_s: float = 20.0) -> None:
    """Until a timing waits for the turnstile (the waiting lock held shared)."""
    path = lock_place("GPU-test", folder).path(gputurns.WAITING)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        finally:
            os.close(fd)
        time.sleep(0.01)
    raise AssertionError("no timing ever waited")


def test_a_waiting_timing_goes_before_the_next_work_of_the_seat_that_just_timed(tmp_path):
    """A seat that has timed goes on to its next student's GPU work; another seat's timing that
    waited meanwhile goes first. (Racing it for the turnstile, the next student's first step could
    win, and the waiting timing then waited out that student's whole GPU work.) Steps of a process
    with steps in flight still go on beside it."""
    turns = gputurns.Turns(lock_place("GPU-test", tmp_path), wait_s=20)
    timed = tmp_path / "timed"
    with turns.timing():
        other = _start(tmp_path, "timing", 0.5, timed)
        _until_timing_waits(tmp_path)
    with turns.step():
        began = time.time()
    assert other.wait(30) == 0
    assert began >= _span(timed)[1], "the next step began only once the waiting timing had ended"

    step = tmp_path / "step"
    with turns.step():  # a step in flight here: the waiting timing waits for it, and for the steps it starts
        other = _start(tmp_path, "timing", 0.1, tmp_path / "timed2")
        _until_turnstile_held(tmp_path)
        with turns.step():
            step.write_text(f"{time.time()}")
    assert other.wait(30) == 0
    assert float(step.read_text()) <= _span(tmp_path / "timed2")[0]


def test_the_timing_process_passes_its_own_steps_and_waits_for_its_own_steps_in_flight(tmp_path):
    turns = gputurns.Turns(lock_place("GPU-test", tmp_path))
    ended: list[float] = []

    def own_step() -> None:
        with turns.step():
            time.sleep(0.5)
            ended.append(time.monotonic())

    thread = threading.Thread(target=own_step)
    thread.start()
    time.sleep(0.1)
    with turns.timing():
        began = time.monotonic()
        with turns.step():  # the timed calls' own steps: no deadlock
            pass
    with turns.step(), turns.step():  # a step within a step (a worker ended during a call) waits for nothing
        pass
    thread.join()
    assert ended and began >= ended[0]


def test_a_wait_for_another_process_s_timing_is_bounded_and_says_so(tmp_path):
    timed = tmp_path / "timed"
    timer = _start(tmp_path, "timing", 3.0, timed)
    _when_started(timed)
    turns = gputurns.Turns(lock_place("GPU-test", tmp_path), wait_s=0.3)
    with pytest.raises(LockTimeout, match="a timing to end"):
        with turns.step():
            pass
    assert timer.wait(30) == 0
    with turns.step():  # the timing over: the step goes ahead
        pass


def test_without_turns_configured_both_are_no_ops():
    assert current().turns is None and not gputurns.active()
    with gputurns.timing(), gputurns.step(), gputurns.step():
        pass


def test_a_step_waiting_when_its_own_process_s_timing_begins_goes_on_inside_it(tmp_path):
    """A worker of the last student ending (a step) waits at the turnstile that this process's
    timing took while another process's step ran; the timing, once it has the GPU, waits for that
    worker to be gone: the step goes on as part of the timing instead of waiting for it to end."""
    other = tmp_path / "other"
    proc = _start(tmp_path, "step", 1.0, other)
    _when_started(other)
    turns = gputurns.Turns(lock_place("GPU-test", tmp_path), wait_s=20)
    ended = threading.Event()
    took: list[float] = []

    def timer() -> None:
        with turns.timing():
            took.append(ended.wait(5))  # False: the timing and the step waited for each other

    thread = threading.Thread(target=timer)
    thread.start()
    time.sleep(0.3)  # the timing holds the turnstile and waits for the other process's step

    def teardown() -> None:
        with turns.step():
            ended.set()

    stepper = threading.Thread(target=teardown)
    stepper.start()
    thread.join(20)
    stepper.join(20)
    assert took == [True] and not thread.is_alive()
    assert proc.wait(30) == 0


def test_a_repository_times_its_labs_in_one_turn_of_its_own_once_their_tool_runs_are_over(monkeypatch, tmp_path):
    """The engine's side: each lab's background runs are waited for first (they are this student's
    steps: a timing waiting on them while they wait for a turn would never end), then the labs are
    opened beside other students' GPU work, timed inside one timing turn, and the last lab's check
    (CPU work: memory_types' oracle takes up to 2.5 s) waited for once the turn is over."""
    from types import SimpleNamespace

    from grader.engine import repo
    from grader.isolation.options import GradeOptions

    turns = gputurns.Turns(lock_place("GPU-test", tmp_path))
    seen: list[str] = []

    def wait_tools():
        seen.append(f"tools of a lab, inside a timing: {turns._timing}")
        return []

    def opened(started, reports):
        seen.append(f"opened {len(started)} labs, inside a timing: {turns._timing}")
        return started

    def timed(opened, reports, options, gate, scorer):
        seen.append(f"timed {len(opened)} labs, inside a timing: {turns._timing}")
        return ["scoring"]

    gradings = [(i, SimpleNamespace(sub=None, wait_tools=wait_tools, sessions=lambda: [])) for i in range(2)]
    monkeypatch.setattr(repo, "_opened", opened)
    monkeypatch.setattr(repo, "_timed", timed)
    monkeypatch.setattr(repo, "_scored", lambda scoring, reports: seen.append(f"scored {scoring}, inside a timing: {turns._timing}"))
    with entered(replace(current(), turns=turns)):
        repo._time_in_turn(gradings, [None, None], GradeOptions(gpu=False), None)
    assert seen == ["tools of a lab, inside a timing: False"] * 2 + [
        "opened 2 labs, inside a timing: False", "timed 2 labs, inside a timing: True", "scored ['scoring'], inside a timing: False"]


def test_a_long_wait_for_a_turn_is_told_to_the_student_s_progress(tmp_path, monkeypatch):
    """What a lane tells (``tell``) hears every ``NOTE_S`` of a wait: a seat held back by another's
    timing says so in the class's log, not nothing."""
    monkeypatch.setattr(gputurns, "NOTE_S", 0.2)
    timed = tmp_path / "timed"
    timer = _start(tmp_path, "timing", 1.5, timed)
    _when_started(timed)
    heard: list[str] = []
    with entered(replace(current(), turns=gputurns.Turns(lock_place("GPU-test", tmp_path)))):
        gputurns.tell(heard.append)
        with gputurns.step():
            pass
        gputurns.tell(None)
        with gputurns.step():  # nobody told: nothing heard
            pass
    assert timer.wait(30) == 0
    assert len(heard) >= 3 and all(h.endswith(" s for a timing to end on this GPU") and h.startswith("waiting ") for h in heard), heard
    gputurns.tell(print)  # without turns configured: nothing to tell
