"""What the grader and the worker say to each other: one JSON object a line, typed here.

Both sides import this module (standard library only). The grader builds tasks with the
functions below; the worker answers each with a reply whose ``status`` is a :class:`Status`.
"""

from __future__ import annotations

import enum
import zlib
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
    MARKED = "marked"
    SHARE = "share"
    READ = "read"
    DROP = "drop"
    MEMORY = "memory"
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


class SharedBuffer(TypedDict):
    """One buffer the trusted worker shares: the launcher parameter it holds, the size of its
    mapping and whether it is host memory (a memfd) or device memory."""

    name: str
    size: int
    host: bool


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
    fill: int  # tool cases: the seed of inputs the worker fills itself (no input files)
    pad: int  # tool cases: bytes of the worker's own after each device buffer (``tool_case_task``)
    poison: int  # correctness cases: the pattern shared memory holds before the call (poison.fill_shared)
    problem: str
    seed: int
    measure_copy: bool
    gated: bool
    session: str  # timing tasks: which of the worker's open timing sessions (the lab)
    tasks: list["Task"]
    marks: list[int]
    share: str  # the id of buffers the trusted worker shares (their descriptors come tagged with it)
    buffers: list[SharedBuffer]
    keep: bool
    export: bool
    record: bool  # case tasks: reply with a record of the launcher's calls too (``record_task``)


Reply = dict[str, Any]  # {"status": Status value, ...}; the fields each task's reply holds are below


def case_task(lib: str, launcher: LauncherSpec, params: dict[str, Any], share: str, buffers: list[SharedBuffer],
              guard: int = 0, poison: int | None = None) -> Task:
    """Run the launcher once on the buffers the trusted worker shared as ``share`` (their
    descriptors arrive on the worker's socket). With ``poison`` (a 32-bit pattern) every SM's
    shared memory is filled with it first (``poison.fill_shared``). Reply: ``seconds``,
    ``kernels_launched`` (names, or None when some launch had none), with ``poison``
    ``shared_cleared`` (launches that ran on shared memory another context cleared). What the call left in the
    buffers is read by the trusted worker (``read_task``), never reported by this one."""
    task = Task(kind=Kind.CASE.value, lib=lib, launcher=launcher, params=params, share=share, buffers=buffers, guard=guard)
    if poison is not None:
        task["poison"] = poison
    return task


def poison_pattern(case_id: str, run: int) -> int:
    """The shared-memory pattern of one run of a case: fixed for a case and run, new for each repeat."""
    return zlib.crc32(f"{case_id}:{run}".encode())


def tool_case_task(lib: str, launcher: LauncherSpec, params: dict[str, Any], inputs: dict[str, str],
                   fill: int | None = None, pad: int = 0) -> Task:
    """Run the launcher once on ``inputs`` (.npy paths) in buffers of the worker's own, with no CuPy
    kernel and nothing read back (under a profiler or sanitizer). With ``fill`` (a seed) the worker
    fills the inputs itself, with arbitrary values. With ``pad``, each device buffer is followed by
    that many bytes of its own allocation: a stray store just past a buffer lands there on every
    run, not in whatever the process (or the tool inside it) allocated next. Reply: ``seconds``,
    ``kernels_launched``."""
    task = Task(kind=Kind.CASE.value, lib=lib, launcher=launcher, params=params, inputs=inputs, memcpy_only=True)
    if fill is not None:
        task["fill"] = fill
    if pad:
        task["pad"] = pad
    return task


def record_task(task: Task) -> Task:
    """``task`` (a case) with the launcher's calls recorded: its reply also holds ``record``, the
    support file's text (None where it outgrew its buffer) and ``arrays``, the address each array
    parameter was given, for the grader's replayer."""
    recorded = Task(**task)
    recorded["record"] = True
    return recorded


def share_task(launcher: LauncherSpec, params: dict[str, Any], inputs: dict[str, str], guard: int) -> Task:
    """(Trusted worker.) Allocate a call's buffers to share: inputs from ``inputs`` (.npy paths),
    outputs filled, ``guard`` elements of canary around each. Reply: ``share`` (an id) and
    ``buffers``; their descriptors follow on the worker's socket, tagged with the id."""
    return Task(kind=Kind.SHARE.value, launcher=launcher, params=params, inputs=inputs, guard=guard)


def read_task(share: str, out_dir: str, keep: bool, launcher: LauncherSpec) -> Task:
    """(Trusted worker.) Read what the calls left in shared buffers: reply ``outputs`` (file names
    in ``out_dir``), ``guard_violations`` ({output: [bytes before, bytes after]}),
    ``inputs_modified`` and ``gpu_memory`` (as ``memory_task``'s, once they are read). With
    ``keep`` the buffers are filled again for another call; without, released."""
    return Task(kind=Kind.READ.value, share=share, out_dir=out_dir, keep=keep, launcher=launcher)


def makes_shared(task: Task) -> bool:
    """A trusted worker's task of making shared buffers. Where the GPU's memory is taken then, it is
    another process's: the worker goes on (a worker that runs out otherwise ends, to free its own)."""
    return task.get("kind") == Kind.SHARE.value or bool(task.get("export"))


def memory_task() -> Task:
    """(Trusted worker.) The GPU's memory now: reply ``gpu_memory``, [free bytes, total bytes]."""
    return Task(kind=Kind.MEMORY.value)


def memory_taken(held: int, total: int, free: int) -> str:
    """The verdict on a call that returned holding ``held`` bytes of the GPU's memory."""
    gib = 1 << 30
    return (f"your code left no free GPU memory: {held / gib:.1f} GiB of {total / gib:.1f} GiB held after it returned "
            f"({free / gib:.2f} GiB free); free what you allocate with cudaFree before the launcher returns")


def drop_task(share: str) -> Task:
    """(Trusted worker.) Release shared buffers, whatever became of the call."""
    return Task(kind=Kind.DROP.value, share=share)


def timing_open(libs: dict[str, str], launcher: LauncherSpec, params: dict[str, Any], problem: str, seed: int,
                measure_copy: bool = False) -> Task:
    """Generate inputs with the lab's ``problem`` module and load ``libs``. Reply: ``device``.
    With ``export`` (trusted worker, no libs) the buffers are made to share, refilled by each
    ``timing_prepare``: reply ``share`` and ``buffers``, their descriptors on the socket. With
    ``share`` and ``buffers`` (student's worker) the calls run on those, mapped: nothing generated."""
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
    """End a timing session. The trusted worker's session of a student's buffers saves the last
    call's outputs and inputs first: reply ``check_outputs`` and ``check_inputs`` (file names in
    ``out_dir``), ``inputs_modified``. With no ``out_dir``, or in any other session, nothing is saved."""
    return Task(kind=Kind.TIMING_CLOSE.value, out_dir=out_dir)


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
