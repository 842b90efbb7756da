"""One submission being graded for one lab: everything its checks need, in one frozen record."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from ..errors import GraderError
from ..host.gpu import GpuInfo
from ..host.safeio import SOURCE_LIMIT_BYTES, read_file
from ..labspec.spec import LabSpec
from ..outcome import KernelResources
from .launch import Isolation, RunDirs


@dataclass(frozen=True)
class Submission:
    """A compiled submission on its way through the GPU checks.

    ``work`` is the grading's private folder: ``grader/`` only the grader writes (inputs, task
    files; the sandbox sees it read-only), ``student/`` and ``runs/`` the student's runs may
    write (read back only through safeio), ``baselines/`` the trusted runs' own.
    """

    spec: LabSpec
    name: str  # the file as the student knows it
    library: Path
    kernels: tuple[KernelResources, ...]
    archs: tuple[str, ...]
    problem: ModuleType  # the lab's generator and oracle
    isolation: Isolation  # how the student's code runs
    cache_dir: Path
    work: Path
    deadline: float  # time.monotonic() by which all of the submission's grading ends
    limit_s: float  # the whole submission's limit, for messages
    secret: str  # mixed into the seeds of graded inputs
    gpu: GpuInfo
    # set once a correctness case hangs: runs whose verdict is then moot (the sanitizers) stop
    moot: threading.Event = field(default_factory=threading.Event, compare=False)
    source_lines: tuple[str, ...] = ()  # the student's file, to quote the line a finding names

    def time_left(self, limit: float = math.inf) -> float:
        """Seconds a step may take: its own limit, within what is left of the submission's."""
        return max(0.0, min(limit, self.deadline - time.monotonic()))

    def out_of_time(self) -> str:
        return f"not run: grading this submission reached its time limit of {self.limit_s:g} s"

    def student_dirs(self) -> RunDirs:
        return RunDirs(self.work / "grader", self.work / "student")

    def trusted_dirs(self) -> RunDirs:
        return RunDirs(self.work / "grader" / "baselines", self.work / "baselines")

    def tool_dirs(self, name: str) -> RunDirs:
        """The folders of one sanitizer or profiler run of the student's code."""
        return RunDirs(self.work / "grader" / name, self.work / "runs" / name)


def source_lines(path: Path) -> tuple[str, ...]:
    """The lines of the student's file (none where it cannot be read), to quote in messages."""
    try:
        return tuple(read_file(path, SOURCE_LIMIT_BYTES).decode("utf-8", errors="replace").splitlines())
    except (OSError, GraderError):
        return ()
