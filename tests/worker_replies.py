"""Replies for tests that stand in for a worker: written as the worker writes them (JSON), then
checked and typed by the grader's own parser (``grader.isolation.replies``), as the runner and
the one-shot tool runs do. A stand-in's reply of the wrong shape fails the test that sent it."""

from __future__ import annotations

from typing import Any

from grader.isolation import replies
from grader.isolation.replies import Reply
from grader.isolation.runner import TaskResult
from grader.worker.protocol import LauncherSpec, Task

#: A matmul launcher (M and N in, P out, width), as the stand-ins' tasks name it.
LAUNCHER = LauncherSpec(name="matmul", args=[
    {"name": n, "role": r, "dtype": "float32", "shape": ["width", "width"], "init": "nan", "ctype": "", "value": "", "host": False}
    for n, r in (("M", "input"), ("N", "input"), ("P", "output"))
] + [{"name": "width", "role": "scalar", "dtype": "", "shape": [], "init": "", "ctype": "int", "value": "width", "host": False}])


def ok(task: Task, fields: dict[str, Any], **kw: Any) -> TaskResult:
    """``task`` ended ok with ``fields``."""
    reply = replies.parse(task, {"status": "ok", **fields})
    assert isinstance(reply, Reply), reply
    return TaskResult("ok", reply, **kw)


def tool_result(raw: dict[str, Any]) -> Reply:
    """A one-shot worker's result; an ok case that names neither gets ``seconds`` and
    ``kernels_launched`` (unknown), which the tests that leave them out do not look at."""
    def filled(one: dict[str, Any]) -> dict[str, Any]:
        return {"seconds": 0.1, "kernels_launched": None, **one} if one.get("status") == "ok" else one
    if isinstance(raw.get("results"), list):
        raw = {**raw, "results": [filled(one) for one in raw["results"]]}
    elif "results" not in raw:
        raw = filled(raw)
    reply = replies.parse_result(raw)
    assert isinstance(reply, Reply), reply
    return reply
