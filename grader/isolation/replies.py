"""What the grader believes of a worker's reply: every field checked for type, size and name.

Once the student's shared object is loaded, the worker process is the student's: a constructor
can run Python inside it and rewrite any reply. So a reply is hostile input. ``problem`` says
what is wrong with one ("" when it has the shape its task asks for); the runner turns a wrong
reply of a worker that loaded student code into the ``interfered`` status, a verdict against the
submission, never an internal error of the grader's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..worker.protocol import Kind, SharedBuffer, Status, Task

#: The most a reply line may hold; a longer one is cut off and judged malformed.
REPLY_LIMIT_BYTES = 1 << 20
#: A file a worker names in its outbox: a plain name, no folder.
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.npy")
MAX_KERNELS = 256
MAX_TEXT = 64 << 10
MAX_NAME = 512
#: Statuses a worker may report itself (the others the grader gives).
WORKER_STATUSES = frozenset({Status.OK.value, Status.CUDA_ERROR.value, Status.OUT_OF_MEMORY.value, Status.WORKER_ERROR.value})

Check = Callable[[Any], str]


def _number(low: float = -math.inf) -> Check:
    """A finite number of at least ``low``. The worker's own clock readings may be anything finite:
    a library that forges the clock makes them so, and the grader bounds them with its own."""
    def check(value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
            return f"not a finite number{f' >= {low:g}' if low > -math.inf else ''}: {_short(value)}"
        return ""
    return check


def _integer(value: Any) -> str:
    return "" if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else f"not a count: {_short(value)}"


def _text(limit: int) -> Check:
    def check(value: Any) -> str:
        return "" if isinstance(value, str) and len(value) <= limit else f"not a text of at most {limit} characters"
    return check


def _file(value: Any) -> str:
    return "" if isinstance(value, str) and FILE_NAME.fullmatch(value) else f"not a plain .npy file name: {_short(value)}"


def _names(allowed: frozenset[str] | None) -> Check:
    def check(value: Any) -> str:
        if not isinstance(value, list) or len(value) > MAX_KERNELS or not all(isinstance(v, str) and len(v) <= MAX_NAME for v in value):
            return "not a list of names"
        stray = [v for v in value if allowed is not None and v not in allowed]
        return f"names no such buffer: {_short(stray[0])}" if stray else ""
    return check


def _mapping(keys: frozenset[str] | None, each: Check, exact: bool = False) -> Check:
    def check(value: Any) -> str:
        if not isinstance(value, dict) or len(value) > MAX_KERNELS:
            return "not a mapping"
        if keys is not None:
            stray = [k for k in value if k not in keys]
            if stray:
                return f"names no such buffer: {_short(stray[0])}"
            if exact and set(value) != keys:
                return f"lacks {', '.join(sorted(keys - set(value)))}"
        for k, v in value.items():
            why = each(v)
            if why:
                return f"{k}: {why}"
        return ""
    return check


def _pair(value: Any) -> str:
    if isinstance(value, list) and len(value) == 2 and not any(_integer(v) for v in value):
        return ""
    return f"not two counts: {_short(value)}"


def _optional_names(value: Any) -> str:
    return "" if value is None else _names(None)(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _roles(task: Task) -> tuple[frozenset[str], frozenset[str]]:
    """The input and output names of a task's launcher."""
    args = task.get("launcher", {}).get("args", [])
    return (frozenset(a["name"] for a in args if a.get("role") == "input"),
            frozenset(a["name"] for a in args if a.get("role") == "output"))


def _fields(task: Task) -> dict[str, tuple[Check, bool]]:
    """The fields an ok reply to ``task`` holds: name -> (check, required)."""
    kind = task.get("kind")
    inputs, outputs = _roles(task)
    if kind == Kind.CASE.value:
        return {"seconds": (_number(), True), "kernels_launched": (_optional_names, True), "shared_cleared": (_integer, False)}
    if kind == Kind.TIMING_OPEN.value:
        if task.get("export"):
            return _shared_fields(task)
        return {"device": (_device, True)}
    if kind == Kind.TIMING_SAMPLE.value:
        return {"ms": (_number(), True), "wall_ms": (_number(), True), "gate": (_text(MAX_NAME), True)}
    if kind == Kind.TIMING_CLOSE.value and task.get("out_dir"):
        return {"check_outputs": (_mapping(None, _file), True), "check_inputs": (_mapping(None, _file), True),
                "inputs_modified": (_names(None), True)}
    if kind == Kind.SHARE.value:
        return _shared_fields(task)
    if kind == Kind.READ.value:
        files = frozenset(f"{n}.npy" for n in outputs)
        return {"outputs": (_mapping(outputs, lambda v: "" if v in files else f"not its own file: {_short(v)}", exact=True), True),
                "guard_violations": (_mapping(outputs, _pair), True), "inputs_modified": (_names(inputs), True),
                "gpu_memory": (_pair, True)}
    if kind == Kind.MEMORY.value:
        return {"gpu_memory": (_pair, True)}
    if kind == Kind.MARKED.value:
        return {"results": (_results(task), True)}
    return {}


def _shared_fields(task: Task) -> dict[str, tuple[Check, bool]]:
    """A trusted worker's shared buffers: an id, and one buffer per array of the launcher."""
    arrays = [a["name"] for a in task.get("launcher", {}).get("args", []) if a.get("role") != "scalar"]

    def buffers(value: Any) -> str:
        if not isinstance(value, list) or [b.get("name") if isinstance(b, dict) else None for b in value] != arrays:
            return f"not one buffer for each of {', '.join(arrays)}"
        bad = [b for b in value if _integer(b.get("size")) or not isinstance(b.get("host"), bool)]
        return f"a buffer of no size: {_short(bad[0])}" if bad else ""
    return {"share": (_text(64), True), "buffers": (buffers, True)}


def _device(value: Any) -> str:
    if not isinstance(value, dict):
        return "not a mapping"
    for key, check in (("name", _text(MAX_NAME)), ("compute_capability", _text(16)), ("sms", _integer), ("l2_bytes", _integer)):
        why = check(value.get(key))
        if why:
            return f"{key}: {why}"
    for key in ("peak_fp32_gflops", "peak_dram_gbps", "copy_gbps"):
        why = _number(0.0)(value[key]) if key in value else ""
        if why:
            return f"{key}: {why}"
    return ""


def _results(task: Task) -> Check:
    subtasks = task.get("tasks", [])

    def check(value: Any) -> str:
        if not isinstance(value, list) or len(value) > len(subtasks):
            return f"not a list of at most {len(subtasks)} replies"
        for i, (reply, sub) in enumerate(zip(value, subtasks)):
            why = problem(sub, reply)
            if why:
                return f"reply {i + 1}: {why}"
        return ""
    return check


def problem(task: Task, reply: Mapping[str, Any]) -> str:
    """What is wrong with ``reply`` to ``task`` ("" if nothing): unknown status, a field of the
    wrong type or size, a name the task does not have."""
    if not isinstance(reply, Mapping):
        return f"not an object but {_short(reply)}"
    status = reply.get("status")
    if status not in WORKER_STATUSES:
        return f"unknown status {_short(status)}"
    if status != Status.OK.value:
        if _text(MAX_TEXT)(reply.get("error", "")):
            return "an error that is not a text of at most 64 KiB"
        if not isinstance(reply.get("sticky", False), bool):
            return "sticky is not true or false"
        return ""
    for name, (check, required) in _fields(task).items():
        if name not in reply:
            if required:
                return f"no {name}"
            continue
        why = check(reply[name])
        if why:
            return f"{name} {why}"
    return ""


def result_problem(reply: Mapping[str, Any]) -> str:
    """What is wrong with a one-shot worker's result (a case, or marked cases, run under a tool
    with no outputs saved), checked without its task."""
    if "results" not in reply:
        return problem(_result_task(reply), reply)
    results = reply.get("results")
    if not isinstance(results, list) or len(results) > MAX_KERNELS:
        return "results is not a list of replies"
    return problem(_result_task(reply), reply)


def _result_task(reply: Mapping[str, Any]) -> Task:
    """The task a one-shot worker's result answers, as far as its shape says: one case, or marked cases."""
    results = reply.get("results")
    if "results" not in reply or not isinstance(results, list):
        return Task(kind=Kind.CASE.value, memcpy_only=True)
    return Task(kind=Kind.MARKED.value, tasks=[Task(kind=Kind.CASE.value, memcpy_only=True) for _ in results])


@dataclass(frozen=True)
class Reply:
    """A worker's reply once :func:`problem` found it of its task's shape: the fields its task's
    kind holds (``_fields``), typed; the others keep their empty default. Numbers are kept as the
    worker wrote them (an int stays an int: the reports show them).

    ``error`` is None where the reply gave none. Only a failed reply's ``error`` and ``sticky``
    are checked; an ok reply's are kept as their text and truth, which is all a reader takes of them."""

    status: Status
    error: str | None = None
    sticky: bool = False
    # a case
    seconds: float = 0.0
    kernels_launched: tuple[str, ...] | None = None  # None: some launch had no name
    shared_cleared: int = 0
    record: object = None  # the recorded calls, as the worker wrote them: the replayer's parser checks them
    # timing
    device: dict[str, Any] = field(default_factory=dict)  # kept whole: the reports show it
    ms: float = 0.0
    wall_ms: float = 0.0
    gate: str = ""
    check_outputs: Mapping[str, str] = field(default_factory=dict)
    check_inputs: Mapping[str, str] = field(default_factory=dict)
    # the trusted worker's shared buffers, and what it read of them
    share: str = ""
    buffers: tuple[SharedBuffer, ...] | None = None  # None: the reply shares none
    outputs: Mapping[str, str] = field(default_factory=dict)
    guard_violations: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    inputs_modified: tuple[str, ...] = ()
    gpu_memory: tuple[int, int] | None = None  # [free, total] bytes
    # marked cases
    results: tuple[Reply, ...] | None = None  # None: the reply holds no list of them


@dataclass(frozen=True)
class Invalid:
    """A reply not of its task's shape: ``why`` is :func:`problem`'s text."""

    why: str


def parse(task: Task, raw: Mapping[str, Any]) -> Reply | Invalid:
    """``raw``, the reply to ``task``, checked (:func:`problem`) and, if it holds, typed."""
    why = problem(task, raw)
    return Invalid(why) if why else _typed(task, raw)


def parse_result(raw: Mapping[str, Any]) -> Reply | Invalid:
    """A one-shot worker's result checked (:func:`result_problem`) and, if it holds, typed."""
    why = result_problem(raw)
    return Invalid(why) if why else _typed(_result_task(raw), raw)


def _typed(task: Task, raw: Mapping[str, Any]) -> Reply:
    """The record of ``raw``, a reply to ``task`` that :func:`problem` found of its shape."""
    status = Status(raw["status"])
    error = str(raw["error"]) if "error" in raw else None
    sticky = bool(raw.get("sticky", False))
    if status != Status.OK:
        return Reply(status, error, sticky)
    kind = task.get("kind")
    if kind == Kind.CASE.value:
        names = raw["kernels_launched"]
        return Reply(status, error, sticky, seconds=raw["seconds"], kernels_launched=None if names is None else tuple(names),
                     shared_cleared=raw.get("shared_cleared", 0), record=raw.get("record"))
    if kind == Kind.SHARE.value or (kind == Kind.TIMING_OPEN.value and task.get("export")):
        buffers = tuple(SharedBuffer(name=b["name"], size=b["size"], host=b["host"]) for b in raw["buffers"])
        return Reply(status, error, sticky, share=raw["share"], buffers=buffers)
    if kind == Kind.TIMING_OPEN.value:
        return Reply(status, error, sticky, device=dict(raw["device"]))
    if kind == Kind.TIMING_SAMPLE.value:
        return Reply(status, error, sticky, ms=raw["ms"], wall_ms=raw["wall_ms"], gate=raw["gate"])
    if kind == Kind.TIMING_CLOSE.value and task.get("out_dir"):
        return Reply(status, error, sticky, check_outputs=dict(raw["check_outputs"]), check_inputs=dict(raw["check_inputs"]),
                     inputs_modified=tuple(raw["inputs_modified"]))
    if kind == Kind.READ.value:
        return Reply(status, error, sticky, outputs=dict(raw["outputs"]), inputs_modified=tuple(raw["inputs_modified"]),
                     guard_violations={k: (v[0], v[1]) for k, v in raw["guard_violations"].items()},
                     gpu_memory=_two(raw["gpu_memory"]))
    if kind == Kind.MEMORY.value:
        return Reply(status, error, sticky, gpu_memory=_two(raw["gpu_memory"]))
    if kind == Kind.MARKED.value:
        return Reply(status, error, sticky, results=tuple(_typed(sub, one) for one, sub in zip(raw["results"], task.get("tasks", []))))
    return Reply(status, error, sticky)


def _two(pair: list[int]) -> tuple[int, int]:
    return pair[0], pair[1]


def start_seconds(ready: Mapping[str, Any], limit_s: float) -> float | None:
    """The seconds a worker's ready message says its start took (CuPy and its CUDA context: where
    a host's context starts queue; shown, never judged); None where the figure is missing or not
    within ``limit_s``, the start's own limit."""
    value = ready.get("start_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= limit_s:
        return None
    return float(value)
