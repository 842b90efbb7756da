"""A stopped command ends: whatever its exit would wait for (a stuck thread, a child), it is gone
within the grace, saying why in one line, with where its threads were in the log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

STUCK = """
import subprocess, sys, threading
from grader.classroom import stopping
child = subprocess.Popen(["sleep", "600"])
print(child.pid, flush=True)
def stuck_at_exit():
    threading.Event().wait()
threading.Thread(target=stuck_at_exit, name="stuck-join").start()  # not a daemon: the exit waits for it
stopping.end_within(130, seconds=float(sys.argv[1]))
sys.exit(130)
"""

STOP_STUCK = """
import os, signal, subprocess, sys, threading
from grader.classroom import stopping
stopping.install(grace_s=float(sys.argv[1]))
child = subprocess.Popen(["sleep", "600"])
print(child.pid, flush=True)
try:
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(30)  # (the stop interrupts it)
except KeyboardInterrupt:
    def cleanup_stuck():
        threading.Event().wait()
    cleanup_stuck()  # what the stop then does never ends
sys.exit(0)
"""

STOPPED_IDLE = """
import atexit, os, pathlib, signal, subprocess, sys, threading
from grader.classroom import stopping
stopping.install(quiet=True, grace_s=float(sys.argv[1]), idle=lambda: True)
atexit.register(pathlib.Path(os.environ["GRADER_LOG"] + ".cleaned").write_text, "yes")
child = subprocess.Popen(["sleep", "600"])
print(child.pid, flush=True)
try:
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(30)
except KeyboardInterrupt:  # (a pool's worker loop takes it for its call's failure and goes on)
    threading.Event().wait(30)
sys.exit(0)
"""

ENDS = """
import sys
from grader.classroom import stopping
stopping.end_within(130, seconds=float(sys.argv[1]))
sys.exit(130)
"""


def _run(script: str, grace: float, log: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "GRADER_LOG": str(log), "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script, str(grace)], capture_output=True, text=True, env=env, timeout=60)
    return done, time.monotonic() - started


def _gone_soon(child: int) -> None:
    deadline = time.monotonic() + 5
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the stopped process's child outlived it"
        time.sleep(0.05)


def test_a_stopped_process_whose_exit_is_stuck_ends_itself_and_what_it_started(tmp_path):
    log = tmp_path / "grader.log"
    done, took = _run(STUCK, 1.0, log)
    assert done.returncode == 130 and took < 20, (done.returncode, took, done.stderr)
    child = int(done.stdout.split()[0])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("the grader had not ended 1 s after the stop: ended it and the 1 processes below it"), done.stderr
    assert f"in {log})" in lines[0]
    short = lines[0].split("under ")[1].split()[0]
    text = log.read_text()
    assert f"--- not ended 1 s after the stop {short}" in text
    assert "thread stuck-join:" in text and "in stuck_at_exit" in text  # where the exit waited
    assert f"process {child} sleep (" in text and "sleep 600" in text
    _gone_soon(child)


def test_a_stopped_process_that_ends_in_time_is_not_held_and_says_nothing_more(tmp_path):
    log = tmp_path / "grader.log"
    done, took = _run(ENDS, 30.0, log)
    assert done.returncode == 130 and took < 15 and done.stderr == "", (took, done.stderr)
    assert not log.exists()


def test_a_stop_whose_own_cleanup_is_stuck_ends_the_process_its_grace_after_the_signal(tmp_path):
    log = tmp_path / "grader.log"
    done, took = _run(STOP_STUCK, 1.0, log)
    assert done.returncode == 130 and took < 20, (done.returncode, took, done.stderr)
    assert done.stderr.startswith("the grader had not ended 1 s after the stop: ended it and the 1 processes below it"), done.stderr
    text = log.read_text()
    assert "in cleanup_stuck" in text and "sleep 600" in text


def test_a_process_stopped_between_calls_ends_at_once_after_its_exit_clean_ups(tmp_path):
    """A lane's process between calls: the stop ends it at once (not its watchdog, 30 s on), its
    exit's clean-ups run (they remove its folders) and its child is ended."""
    log = tmp_path / "grader.log"
    done, took = _run(STOPPED_IDLE, 30.0, log)
    assert done.returncode == 130 and took < 15 and done.stderr == "", (done.returncode, took, done.stderr)
    assert (tmp_path / "grader.log.cleaned").read_text() == "yes"
    child = int(done.stdout.split()[0])
    _gone_soon(child)
