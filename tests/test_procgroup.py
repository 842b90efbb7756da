import subprocess
import threading
import time
from pathlib import Path

import pytest

from grader.host.procgroup import AnyOf, kill_group, live_members, run_capped, start_lasting
from grader.isolation import sandbox as sandboxing
from grader.textutil import CappedOutput

SANDBOX = sandboxing.detect()


def _wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _descendants(pid: int) -> list[str]:
    """The command names of every process below ``pid``."""
    names, todo = [], [pid]
    while todo:
        parent = todo.pop(0)
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            try:
                names.append(Path(f"/proc/{child}/comm").read_text().strip())
            except OSError:
                continue
            todo.append(child)
    return names


def test_kill_group_returns_only_once_every_member_has_stopped():
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    _wait_for(lambda: len(live_members(proc.pid)) == 3)
    assert kill_group(proc.pid)
    assert live_members(proc.pid) == []  # no sleep is left running or about to run
    proc.wait(5)


def test_a_process_that_cannot_be_read_as_it_exits_stops_no_kill(monkeypatch):
    """A class on four GPUs: psutil raised IndexError reading /proc/PID/stat of some exiting
    process (not the group's), out of the whole walk of the process table, and the worker the
    walk was for was never killed. Another process's unreadable entry is skipped now."""
    import psutil

    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    try:
        _wait_for(lambda: len(live_members(proc.pid)) == 2)
        real = psutil._pslinux.Process.create_time

        def short_stat(self, *args, **kwargs):
            if self.pid == other.pid:
                raise IndexError("list index out of range")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(psutil._pslinux.Process, "create_time", short_stat)
        monkeypatch.setattr(psutil, "_pmap", {})  # no Process of it kept from an earlier walk
        assert kill_group(proc.pid)
        assert live_members(proc.pid) == []
        assert other.poll() is None  # (not the group's: left running)
    finally:
        other.kill()
        other.wait(5)
        proc.wait(5)


def test_a_child_in_a_session_of_its_own_is_killed_while_psutil_cannot_read_the_table(monkeypatch):
    """psutil lists a process's children from every process's /proc/PID/stat, and one read short
    (IndexError) lost them all: a sandboxed worker sits in a session of its own, below the group."""
    import psutil

    proc = subprocess.Popen(["sh", "-c", "setsid sleep 300 & wait"], start_new_session=True)
    _wait_for(lambda: "sleep" in _descendants(proc.pid))
    child = next(p for p in psutil.Process(proc.pid).children() if p.name() == "sleep")

    def short_stat():
        raise IndexError("list index out of range")

    monkeypatch.setattr(psutil, "_ppid_map", short_stat)
    assert kill_group(proc.pid)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    proc.wait(5)


def test_zombies_are_not_live_members():
    proc = subprocess.Popen(["sh", "-c", "exit 0"], start_new_session=True)
    stat = Path(f"/proc/{proc.pid}/stat")
    _wait_for(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")  # exited, not yet reaped
    assert live_members(proc.pid) == []
    proc.wait(5)


def test_killing_a_group_that_is_gone_is_harmless():
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait(5)
    assert kill_group(proc.pid)


def test_a_run_stops_when_its_stop_event_is_set(tmp_path):
    """A sanitizer run whose verdict became moot (the kernel hung in a correctness case) is killed
    at once instead of at its time limit."""
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    console = CappedOutput(1 << 10, 1 << 10)
    started = time.monotonic()
    code = run_capped(["sh", "-c", "echo started; sleep 30"], console, 20, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, stop=stop)
    assert code is None
    assert time.monotonic() - started < 5
    assert "started" in console.text()


def test_a_run_stops_once_any_of_its_events_is_set(tmp_path):
    """A profiler session of several labs stops once one lab's case hung."""
    events = [threading.Event(), threading.Event()]
    stop = AnyOf(events)
    assert not stop.is_set()
    threading.Timer(0.3, events[1].set).start()
    console = CappedOutput(1 << 10, 1 << 10)
    assert run_capped(["sh", "-c", "sleep 30"], console, 20, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, stop=stop) is None
    assert stop.is_set()


def test_a_run_without_a_stop_ends_with_its_exit_status(tmp_path):
    console = CappedOutput(1 << 10, 1 << 10)
    assert run_capped(["sh", "-c", "exit 3"], console, 20, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, stop=threading.Event()) == 3


@pytest.mark.skipif(not SANDBOX.active, reason=f"no sandbox here: {SANDBOX.reason}")
def test_a_sandboxed_worker_started_from_a_short_lived_thread_outlives_it():
    """The sandbox ends its process when the starting thread ends: labs start their workers from
    threads that end long before the timing uses them (which then found them gone)."""
    cmd = SANDBOX.wrap(["sleep", "60"])
    started = {}

    def start():
        started["lasting"] = start_lasting(cmd, start_new_session=True)
        started["plain"] = subprocess.Popen(cmd, start_new_session=True)
        for proc in started.values():  # the thread ends only once both sandboxes run their command
            _wait_for(lambda pid=proc.pid: "sleep" in _descendants(pid), 20)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    try:
        started["plain"].wait(10)  # the control: a plain start dies with its thread
        time.sleep(0.5)
        assert started["lasting"].poll() is None
    finally:
        for proc in started.values():
            kill_group(proc.pid)
            proc.wait(5)


def test_kill_group_also_ends_and_waits_for_processes_below_it_in_sessions_of_their_own():
    """The sandbox runs its command in a new session: killing the sandbox's group alone left the
    worker below it releasing its GPU while the next kernel was timed."""
    proc = subprocess.Popen(["sh", "-c", "setsid sleep 300 & wait"], start_new_session=True)
    _wait_for(lambda: "sleep" in _descendants(proc.pid))
    below = list(map(int, Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()))
    assert below and all(pid not in live_members(proc.pid) for pid in below)  # another group
    assert kill_group(proc.pid)
    proc.wait(5)
    for pid in below:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] if Path(f"/proc/{pid}").exists() else "gone"
        assert state in ("Z", "X", "gone"), (pid, state)


def test_a_worker_start_waits_for_gpu_memory_another_process_holds(monkeypatch, tmp_path):
    """A submission that keeps every byte of the GPU's memory also does so in its sanitizer runs:
    the next correctness case's fresh worker waits for it instead of failing at once."""
    from grader.isolation import runner
    from grader.isolation.launch import Isolation, RunDirs
    from grader.isolation.runner import TaskResult, WorkerSession
    from grader.isolation.sandbox import Sandbox

    oom = TaskResult("startup_failed", reason="could not start the GPU worker: CUDARuntimeError: out of memory")
    answers = [oom, oom, None]
    monkeypatch.setattr(runner, "MEMORY_POLL_S", 0.01)
    monkeypatch.setattr(WorkerSession, "_start_once", lambda self: answers.pop(0))
    session = WorkerSession(RunDirs(tmp_path / "in", tmp_path / "out"), Isolation(Sandbox(None, reason="test")))
    assert session._start() is None and answers == []

    monkeypatch.setattr(runner, "MEMORY_WAIT_S", 0.05)
    monkeypatch.setattr(WorkerSession, "_start_once", lambda self: oom)
    failed = session._start()
    assert failed is not None and failed.reason.startswith(oom.reason) and "stayed taken" in failed.reason

    other = TaskResult("startup_failed", reason="could not start the GPU worker: no CUDA-capable device")
    calls = []
    monkeypatch.setattr(WorkerSession, "_start_once", lambda self: calls.append(1) or other)
    assert session._start() is other and calls == [1]  # nothing to wait for


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2:].split()[0]


def test_a_held_group_and_what_it_started_are_stopped_until_continued(tmp_path):
    """A student's worker is stopped while another lab is timed: a child in a session of its own
    (as the sandbox starts its command) is stopped with it, and both run again once continued."""
    from grader.host.procgroup import hold_group

    ticks = tmp_path / "ticks"
    proc = start_lasting(["sh", "-c", f"setsid sh -c 'while :; do echo >> {ticks}; sleep 0.01; done' & wait"],
                         start_new_session=True)
    try:
        _wait_for(lambda: ticks.exists() and ticks.stat().st_size > 0)
        child = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        hold_group(proc.pid, True)
        _wait_for(lambda: _state(proc.pid) == "T" and _state(child) == "T")
        size = ticks.stat().st_size
        time.sleep(0.2)
        assert ticks.stat().st_size == size  # nothing of it ran
        hold_group(proc.pid, False)
        _wait_for(lambda: ticks.stat().st_size > size)
        assert _state(child) != "T" and _state(proc.pid) != "T"
    finally:
        assert kill_group(proc.pid)
        proc.wait(5)


def test_a_worker_started_ahead_starts_at_once_unless_gpu_work_takes_turns(tmp_path):
    """Started ahead, a student's worker makes its CUDA context while its first case is readied;
    where several students share the GPU its start waits for its first call's turn instead."""
    from dataclasses import replace

    from grader.context import current, entered
    from grader.host import gputurns
    from grader.host.hostlock import lock_place
    from grader.isolation.launch import Isolation, RunDirs
    from grader.isolation.runner import WorkerSession
    from grader.isolation.sandbox import Sandbox

    def session(name: str) -> WorkerSession:
        return WorkerSession(RunDirs(tmp_path / name / "in", tmp_path / name / "out"), Isolation(Sandbox(None, reason="test")))

    ahead = session("ahead")
    try:
        ahead.spawn_ahead()
        assert ahead.proc is not None and ahead.starts == 1 and not ahead.ready  # started, not waited for
    finally:
        ahead.kill()
    with entered(replace(current(), turns=gputurns.Turns(lock_place("GPU-test", tmp_path)))):
        turned = session("turned")
        turned.spawn_ahead()
        assert turned.proc is None and turned.starts == 0



def test_a_process_whose_name_holds_brackets_and_spaces_is_still_found_below_its_parent():
    """A student's program names itself what it likes (``prctl``): the walk of /proc reads the
    parent from after the name's last bracket, so a name like ``x) 1 (y`` hides no process."""
    import os
    import sys

    import psutil

    from grader.host.procgroup import _below

    code = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(15, b'x) 1 (y z', 0, 0, 0)\n"
            "print('named', flush=True); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "named"
        assert Path(f"/proc/{child.pid}/comm").read_text().strip() == "x) 1 (y z"
        assert child.pid in [p.pid for p in _below(psutil.Process(os.getpid()))]
    finally:
        child.kill()
        child.wait()
