"""How a grading run is configured: options, the secret behind graded inputs, sandbox, GPU, archs."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..cachedirs import default_cache_dir
from ..context import current
from ..errors import GraderError
from ..host import gpu
from ..host.hostdirs import output_dir, private_dir
from . import sandbox as sandboxing


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (a SLURM allocation, ``taskset``, a
    container's cpuset), not every core of the host."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


def default_archs() -> tuple[str, ...]:
    """Archs to build for when there is no GPU to ask: ``GRADER_ARCHS`` (comma-separated) or sm_90."""
    return tuple(a.strip() for a in os.environ.get("GRADER_ARCHS", "sm_90").split(",") if a.strip())

#: Where progress messages go (one line each).
Progress = Callable[[str], None]


def no_progress(_: str) -> None:
    pass


@dataclass(frozen=True)
class GradeOptions:
    archs: tuple[str, ...] | None = None  # default: the GPU's, else default_archs()
    cache_dir: Path | None = None
    timing: bool = True
    counters: bool = True
    counter_source: str = "replay"  # the trusted replayer measures what it can (grader/checks/counters/replay/), ncu the rest; "ncu": ncu alone
    sanitizers: bool = True
    reuse_tool_runs: bool = True  # a profiler or sanitizer run kept from an earlier grade of the same compiled code stands
    gpu: bool = True  # False: run only the checks that need no GPU
    keep_work: Path | None = None  # keep worker files under this folder
    sandbox: bool = True  # run compile and run steps in bubblewrap where it is installed
    sandbox_required: bool = False  # a class run: where bubblewrap cannot start, refuse (unless turned off)
    submission_limit_s: float = 600.0  # all of one lab's grading of a submission, compile to timing
    secret: str | None = None  # seeds the graded inputs; default: $GRADER_SECRET, else new per run

    def __post_init__(self) -> None:
        # folders given relative to where the grader started: the sandbox and the workers run
        # elsewhere, and bubblewrap would not find a relative path
        for name in ("cache_dir", "keep_work"):
            value = getattr(self, name)
            if value is not None and not value.is_absolute():
                object.__setattr__(self, name, value.absolute())


def secret_of(options: GradeOptions) -> str:
    """The secret behind graded inputs: the option, else $GRADER_SECRET, else the run's own
    (``RunContext.secret``, new for each run and handed to the processes it starts)."""
    return options.secret or os.environ.get("GRADER_SECRET") or current().secret


def secret_given(secret: str) -> bool:
    """Whether ``secret`` was given to the run (the option, $GRADER_SECRET) rather than being the
    run's own: only inputs seeded from a given one are drawn again by a later run."""
    return secret != current().secret


def secret_seed(secret: str, lab: str, what: str, seed: int) -> int:
    """The seed actually used for a graded input: the YAML seed mixed with the run's secret.

    Students know the YAML seeds; they cannot know the secret, so outputs cannot be precomputed.
    """
    digest = hashlib.sha256(f"{secret}|{lab}|{what}|{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def kernel_cache(options: GradeOptions) -> Path:
    """The trusted CuPy kernel cache: trusted workers compile into it, sandboxed ones start from a copy.
    It and the cache folder must be this user's alone (CuPy loads the kernels it finds there)."""
    root = private_dir(options.cache_dir or default_cache_dir(), "the grader's cache folder")
    return private_dir(root / "cupy-kernels", "the CuPy kernel cache")


def work_folder(options: GradeOptions, prefix: str) -> Path:
    """A new private folder (mode 0700) for a grading's files: under ``--keep-work``, which must be
    this user's own (another user's would see the graded inputs, or plant links where the grader
    writes), else in the temporary folder."""
    if options.keep_work is not None:
        output_dir(options.keep_work, "the --keep-work folder")
    return Path(tempfile.mkdtemp(prefix=prefix, dir=options.keep_work))


def sandbox_for(options: GradeOptions) -> sandboxing.Sandbox:
    """The sandbox student code runs in: every step of a grading asks here. Where the options require
    one (a class run, in every lane of it) and it cannot start, a GraderError, never a step unsandboxed."""
    if not options.sandbox:
        return sandboxing.Sandbox(None, reason="turned off (--no-sandbox)", turned_off=True)
    found = sandboxing.detect()
    if options.sandbox_required and not found.active and not found.turned_off:
        raise GraderError(sandboxing.refusal(found))
    return found


def probe_for(options: GradeOptions) -> gpu.GpuProbe:
    return gpu.probe() if options.gpu else gpu.GpuProbe(None, "GPU checks turned off (--no-gpu)")


def archs_for(options: GradeOptions, probe: gpu.GpuProbe) -> tuple[str, ...]:
    return options.archs or ((probe.gpu.arch,) if probe.gpu else default_archs())
