"""What the grader sends the replayer (``grader/cuda/replay.cu``) and what it believes of its answers.

A task is text, one directive a line, fields separated by spaces; buffers are numbered, and only
the kernels' and device variables' symbols (checked against the cubin) and the grader's own
paths appear by name:

    task ID CUBIN                   load the module
    global NAME                     a device variable, restored to its loaded bytes before each pass
    case ID                         then, for the case:
    metrics N NAME...               what to collect (planned into passes by CUPTI)
    buffer K SIZE device|host KIND file PATH | pattern HEX | none -
                                    KIND input, output, scratch or data; its bytes before each pass
    alloc K | free K | memset K OFFSET VALUE SIZE | copy DST DOFF SRC SOFF SIZE |
    symbol NAME OFFSET SRC SOFF SIZE | launch KERNEL GX GY GZ BX BY BZ SHARED N HEX...
                                    the recorded steps, in order
    patch PARAM AT K OFFSET         the last launch's parameter PARAM holds buffer K's address + OFFSET at AT
    output K PATH                   write buffer K's bytes after the last pass
    run                             the case is complete
    end                             the task is complete: the replayer prepares it (module, inputs,
                                    buffers; a case that cannot be prepared is answered failed) and
                                    answers {"task": ID, "status": "prepared"}

Then the grader, holding the GPU's profiling lock, sends a line ``go``: every prepared case is
profiled in one session ({"task": ID, "status": "profiled"}), after which each case is answered
(one JSON line) and the task ends with {"task": ID, "status": "done"} (or "failed" where the
module did not load).

The replayer is the grader's own program, but it has run the student's device code: its answers
are read as strictly as a worker's (exact keys, finite numbers in range, sizes capped).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .cubin import Module
from .plan import Alloc, Copy, Free, Launch, Memset, ReplayPlan, Step, SymbolCopy

#: The longest answer line read, the longest reason kept, the largest figure believed.
LINE_LIMIT = 64 << 10
REASON_LIMIT = 2000
VALUE_LIMIT = 1e18
MAX_PASSES = 64
TOKEN = re.compile(r"[A-Za-z0-9_/.$+:=-]+")
CASE_ID = re.compile(r"[a-z0-9_]{1,64}")


@dataclass(frozen=True)
class CaseTask:
    """One case to profile: its metrics, its replay, the files of its inputs and of its outputs."""

    id: str
    metrics: tuple[str, ...]
    plan: ReplayPlan
    inputs: Mapping[int, Path] = field(default_factory=dict)  # buffer index -> its bytes
    outputs: Mapping[int, Path] = field(default_factory=dict)  # buffer index -> where its bytes go


@dataclass(frozen=True)
class CaseResult:
    """The replayer's answer for one case: metric values summed over its launches, or why none."""

    id: str
    values: Mapping[str, float] = field(default_factory=dict)
    reason: str = ""
    passes: int = 0
    planned: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.reason


def _token(text: str) -> str:
    if not TOKEN.fullmatch(text):
        raise ValueError(f"not a token the replayer reads: {text!r}")
    return text


def _step(step: Step) -> list[str]:
    if isinstance(step, Alloc):
        return [f"alloc {step.buffer}"]
    if isinstance(step, Free):
        return [f"free {step.buffer}"]
    if isinstance(step, Memset):
        return [f"memset {step.buffer} {step.offset} {step.value} {step.size}"]
    if isinstance(step, Copy):
        return [f"copy {step.dst} {step.dst_offset} {step.src} {step.src_offset} {step.size}"]
    if isinstance(step, SymbolCopy):
        return [f"symbol {_token(step.name)} {step.offset} {step.src} {step.src_offset} {step.size}"]
    launch: Launch = step
    params = " ".join(p.hex() for p in launch.params)
    lines = [f"launch {_token(launch.kernel)} {' '.join(map(str, launch.grid))} {' '.join(map(str, launch.block))} "
             f"{launch.shared_bytes} {len(launch.params)} {params}".rstrip()]
    return lines + [f"patch {p.param} {p.at} {p.buffer} {p.offset}" for p in launch.patches]


def case_lines(case: CaseTask) -> list[str]:
    lines = [f"case {_token(case.id)}", f"metrics {len(case.metrics)} {' '.join(map(_token, case.metrics))}"]
    for buf in case.plan.buffers:
        where = "host" if buf.host else "device"
        if buf.index in case.inputs:
            fill = f"file {_token(str(case.inputs[buf.index]))}"
        elif buf.kind == "data":
            fill = f"pattern {buf.data.hex()}"
        elif buf.fill:
            fill = f"pattern {buf.fill.hex()}"
        else:
            fill = "none -"
        lines.append(f"buffer {buf.index} {buf.size} {where} {buf.kind} {fill}")
    for step in case.plan.steps:
        lines += _step(step)
    lines += [f"output {k} {_token(str(path))}" for k, path in case.outputs.items()]
    return lines + ["run"]


def task_text(task_id: str, cubin: Path, module: Module, cases: Sequence[CaseTask]) -> str:
    """The task that profiles ``cases`` with the kernels of ``module`` (loaded from ``cubin``)."""
    lines = [f"task {_token(task_id)} {_token(str(cubin))}", *(f"global {_token(v)}" for v in module.variables)]
    for case in cases:
        lines += case_lines(case)
    return "\n".join([*lines, "end"]) + "\n"


class BadAnswer(ValueError):
    """An answer of the replayer's that is not what it writes."""


def _count(value: Any, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadAnswer(f"{what} is not a whole number from {low} to {high}")
    return value


def _figure(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value < VALUE_LIMIT:
        raise BadAnswer(f"{what} is not a finite figure from 0 below {VALUE_LIMIT:g}")
    return float(value)


def _keys(obj: Mapping[str, Any], keys: set[str]) -> None:
    if set(obj) != keys:
        raise BadAnswer(f"its keys are {sorted(obj)}, not {sorted(keys)}")


def parse_line(line: str) -> dict[str, Any]:
    """One answer line as a JSON object."""
    if len(line) > LINE_LIMIT:
        raise BadAnswer(f"a line longer than {LINE_LIMIT} characters")
    try:
        obj = json.loads(line)
    except ValueError:
        raise BadAnswer("a line that is not JSON") from None
    if not isinstance(obj, dict):
        raise BadAnswer("a line that is not a JSON object")
    return obj


def case_result(obj: Mapping[str, Any], metrics: Mapping[str, tuple[str, ...]]) -> CaseResult:
    """A case's answer, checked against the cases asked for (id -> its metrics)."""
    case = obj.get("case")
    if not isinstance(case, str) or case not in metrics:
        raise BadAnswer(f"an answer for a case not asked for: {str(case)[:80]!r}")
    if obj.get("status") == "failed":
        _keys(obj, {"case", "status", "reason"})
        reason = obj["reason"]
        if not isinstance(reason, str):
            raise BadAnswer("a reason that is not text")
        return CaseResult(case, reason=f"the replay failed: {reason[:REASON_LIMIT]}")
    if obj.get("status") != "ok":
        raise BadAnswer("a case's status that is neither ok nor failed")
    _keys(obj, {"case", "status", "values", "passes", "planned", "ranges", "seconds"})
    values = obj["values"]
    if not isinstance(values, dict) or set(values) != set(metrics[case]):
        raise BadAnswer(f"values of other metrics than {', '.join(metrics[case])}")
    return CaseResult(case, {m: _figure(v, m) for m, v in values.items()}, "",
                      _count(obj["passes"], 1, MAX_PASSES, "passes"), _count(obj["planned"], 1, MAX_PASSES, "planned"),
                      _figure(obj["seconds"], "seconds"))
