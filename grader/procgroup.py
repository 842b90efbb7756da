"""Killing a process group and waiting until none of its members still runs."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

SETTLE_S = 2.0


def live_members(pgid: int) -> list[int]:
    """Process ids in group ``pgid`` that have not yet exited (zombies are not counted)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in "ZX":
            members.append(int(entry.name))
    return members


def kill_group(pgid: int, settle_s: float = SETTLE_S) -> bool:
    """SIGKILL every process in group ``pgid``, then wait up to ``settle_s`` for them to be gone.

    A killed process only stops once the kernel delivers the signal, so a caller that goes on
    at once could still see it running; returns False when some member outlived ``settle_s``
    (stuck in the kernel, for instance releasing a GPU)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return True
    deadline = time.monotonic() + settle_s
    while live_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
