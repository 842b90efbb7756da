"""What the grader and the worker say to each other: one JSON object a line, typed here.

Both sides import this module (standard library only). The grader builds tasks with the
functions below; the worker answers each with a reply whose ``status`` is a :class:`Status`.
"""

from __future__ import annotations

import enum
from typing import Any, TypedDict


class Status(str, enum.Enum):
    """How a task ended, as the worker (or, for the last five, the grader) reports it."""

    OK = "ok"
    CUDA_ERROR = "cuda_error"  # the student's launch failed or a kernel faulted
    OUT_OF_MEMORY = "out_of_memory"  # the student's code left no GPU memory for the grader's buffers
    WORKER_ERROR = "worker_error"  # a bug of the grader's inside the worker
    TIMEOUT = "timeout"  # killed at the time limit
    CRASHED = "crashed"  # a fatal signal
    EXITED = "exited"  # exit() from student code
    STARTUP_FAILED = "startup_failed"  # the worker never became ready
    INTERFERED = "interfered"  # a reply malformed or forged: the student's code changed what the worker does


class Kind(str, enum.Enum):
    CASE = "case"
    TIMING_OPEN = "timing_open"
    TIMING_PREPARE = "timing_prepare"
    TIMING_SAMPLE = "timing_sample"
    TIMING_CLOSE = "timing_close"
    TIMING_INPUTS = "timing_inputs"
    MARKED = "marked"
    QUIT = "quit"


class ArgSpec(TypedDict):
    """One launcher parameter: ``role`` is input, output or scalar; sizes are expressions."""

    name: str
    role: str
    dtype: str
    shape: list[str]
    init: str
    ctype: str
    value: str
    host: bool


class LauncherSpec(TypedDict):
    name: str
    args: list[ArgSpec]


class Task(TypedDict, total=False):
    """Every task: ``kind`` always, the rest by kind (see the builders below)."""

    kind: str
    id: str  # a nonce the grader sets per task; the reply must carry it back
    lib: str
    libs: dict[str, str]
    launcher: LauncherSpec
    params: dict[str, Any]
    inputs: dict[str, str]
    out_dir: str
    guard: int
    memcpy_only: bool
    problem: str
    seed: int
    measure_copy: bool
    gated: bool
    session: str  # timing tasks: which of the worker's open timing sessions (the lab)
    tasks: list["Task"]
    marks: list[int]
    count: int  # timing_inputs: the inputs of the call after this many refills


Reply = dict[str, Any]  # {"status": Status value, ...}; the fields each task's reply holds are below


def case_task(lib: str, launcher: LauncherSpec, params: dict[str, Any], inputs: dict[str, str], out_dir: str,
              guard: int = 0, memcpy_only: bool = False) -> Task:
    """Run the launcher once on ``inputs`` (.npy paths). Reply: ``seconds``, ``outputs`` (file names
    in ``out_dir``), ``kernels_launched`` (names, or None when some launch had none),
    ``guard_violations`` ({output: [bytes before, bytes after]}), ``inputs_modified``.
    ``memcpy_only``: no CuPy kernels, no outputs (for profilers and sanitizers)."""
    return Task(kind=Kind.CASE.value, lib=lib, launcher=launcher, params=params, inputs=inputs, out_dir=out_dir,
                guard=guard, memcpy_only=memcpy_only)


def timing_open(libs: dict[str, str], launcher: LauncherSpec, params: dict[str, Any], problem: str, seed: int,
                measure_copy: bool = False) -> Task:
    """Generate inputs with the lab's ``problem`` module and load ``libs``. Reply: ``device``."""
    return Task(kind=Kind.TIMING_OPEN.value, libs=libs, launcher=launcher, params=params, problem=problem, seed=seed,
                measure_copy=measure_copy)


def timing_prepare(lib: str) -> Task:
    """Fresh inputs, NaN-filled outputs, flushed L2, reset persisting L2, synchronized."""
    return Task(kind=Kind.TIMING_PREPARE.value, lib=lib)


def timing_sample(lib: str, gated: bool = True) -> Task:
    """One timed call, behind a timing gate unless ``gated`` is false. Reply: ``ms`` (events),
    ``wall_ms`` (up to a device-wide synchronize) and ``gate`` (held, expired or off)."""
    return Task(kind=Kind.TIMING_SAMPLE.value, lib=lib, gated=gated)


def timing_close(out_dir: str) -> Task:
    """Save the last call's outputs. Reply: ``check_outputs`` (file names in ``out_dir``),
    ``inputs_modified``."""
    return Task(kind=Kind.TIMING_CLOSE.value, out_dir=out_dir)


def timing_inputs(count: int, out_dir: str) -> Task:
    """Generate again the inputs a session of the same seed timed after ``count`` refills, and
    save them (a trusted worker does this for the student's last timed call). Reply:
    ``check_inputs`` (file names in ``out_dir``)."""
    return Task(kind=Kind.TIMING_INPUTS.value, count=count, out_dir=out_dir)


def marked_tasks(tasks: list[Task], marks: list[int]) -> Task:
    """Run ``tasks`` in turn, each after a launch of the marker kernel ``MARK_KERNEL`` on a grid of
    its ``marks`` blocks, so that a profiler's list of kernels can be split by task. Stops after
    a task that leaves the CUDA context unusable. Reply: ``results``, one reply per task run."""
    return Task(kind=Kind.MARKED.value, tasks=tasks, marks=marks)


#: The kernel the worker launches between marked tasks.
MARK_KERNEL = "grader_task_mark"

QUIT = Task(kind=Kind.QUIT.value)


def first_visible_device(visible: str | None) -> int:
    """The NVML index of the first GPU in ``CUDA_VISIBLE_DEVICES`` (0 when unset or not an index)."""
    first = (visible or "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0
