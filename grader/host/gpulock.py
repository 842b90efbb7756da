"""One GPU, one grading at a time, and one profiler at a time per GPU.

Each GPU's locks are named after its UUID, in the grader's lock folder (``hostlock.lock_place``:
the user's own, or the administrator's ``GRADER_LOCK_DIR``). A lane holds the GPU's
``grader-gpu.lock`` while it grades a student, so a timing never overlaps another grading on that
GPU (two class runs, two shards on one node); a class grading several students at once on each
GPU holds one lock per seat, and their GPU work takes turns with each timing
(:mod:`grader.host.gputurns`). The profiling lock of every profiler run (``profiling_lock``,
``grader-ncu.lock``) is in the same place, so profilers on different GPUs run side by side, and
so is the lock of the baselines profiled ahead (``grader.checks.counters.baselines``).
A wait is bounded (``GPU_WAIT_S``) and its error names the grader that held the lock.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator

from .gpu import GpuInfo, key_of
from .hostlock import LockPlace, hold, lock_place

__all__ = ["BASELINES_LOCK", "GPU_WAIT_S", "LOCK_NAME", "PROFILER_LOCK", "gpu_folder", "gpu_lock", "lock_folder", "profiling_lock", "seat_lock"]

LOCK_NAME = "grader-gpu.lock"
PROFILER_LOCK = "grader-ncu.lock"
#: Held while the baselines' cases are profiled ahead (``grader.checks.counters.baselines``).
BASELINES_LOCK = "grader-baselines.lock"
#: The longest a lane waits for another grader to finish with its GPU.
GPU_WAIT_S = 3600.0


def gpu_folder(key: str, base: Path | None = None) -> LockPlace:
    """Where the locks of the GPU ``key`` live (``base``: a folder of this user's instead)."""
    return lock_place(key, base)


def seat_lock(seat: int) -> str:
    """The lock of a GPU's ``seat``: ``LOCK_NAME`` for the first (a lane per GPU), one more per
    student graded at once on it (``grade-class --per-gpu``)."""
    return LOCK_NAME if seat == 0 else LOCK_NAME.replace(".lock", f"-{seat}.lock")


@contextlib.contextmanager
def gpu_lock(place: LockPlace, poll_s: float = 0.2, wait_s: float = GPU_WAIT_S, what: str = "grading",
             notify: Callable[[str], None] | None = None, seat: int = 0) -> Iterator[float]:
    """Hold the lock of the GPU's ``seat`` (waiting at most ``wait_s``); yields the seconds waited."""
    with hold(place, seat_lock(seat), "the GPU lock", what, wait_s, poll_s, notify) as waited:
        yield waited


def lock_folder(gpu: GpuInfo | None) -> LockPlace:
    """Where the profiling lock of ``gpu`` lives: its ``gpu_folder`` (one for every GPU whose UUID
    is not known)."""
    return gpu_folder(key_of(gpu))


@contextlib.contextmanager
def profiling_lock(time_limit_s: float, folder: LockPlace | Path | None = None) -> Iterator[float]:
    """Hold a GPU's profiling lock; yields the seconds spent waiting for it.

    A GPU's counters serve one profiler at a time. ncu keeps its own runs apart, but not across the namespaces of
    separate sandboxes (the later runs fail with "a driver resource was unavailable"), so every grader process of this
    user (or of every user, with a shared ``GRADER_LOCK_DIR``) takes this lock around each run: in ``folder``, the GPU's
    place (``lock_folder``), a folder of this user's, or else the lock folder's GPU-less lock. Raises TimeoutError (a
    :class:`~grader.host.hostlock.LockTimeout` naming the holder) after ``time_limit_s``.
    """
    place = folder if isinstance(folder, LockPlace) else lock_place("", folder)
    with hold(place, PROFILER_LOCK, "the profiler lock", "profiling", time_limit_s, 0.05) as waited:
        yield waited
