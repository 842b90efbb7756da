import subprocess
import time
from pathlib import Path

from grader.procgroup import kill_group, live_members


def _wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_kill_group_returns_only_once_every_member_has_stopped():
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    _wait_for(lambda: len(live_members(proc.pid)) == 3)
    assert kill_group(proc.pid)
    assert live_members(proc.pid) == []  # no sleep is left running or about to run
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
