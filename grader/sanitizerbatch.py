"""One compute-sanitizer process per tool for a student's labs.

Each run under compute-sanitizer pays for the tool's start and a CUDA context of its own, and a
GPU's contexts are made and torn down one at a time: a repository's 16 sanitizer runs (three or
four tools on each of five labs) queued behind one another and behind the workers. Grading a
repository therefore runs each tool once, on every lab's case in turn (the labs are one
student's, so nothing of another student's shares the process). A tool's shared run settles its
checks only when it found nothing at all and every case ran: a clean run is clean for each lab.
Anything else (a report, a crash, a stop, a time-out) is left to each lab's own run, alone, as a
lab graded alone would have it, so a lab's verdicts never depend on the shared run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from . import sanitizer
from .correctness import tool_task
from .counterbatch import combined
from .labbatch import LabBatch
from .outcome import CheckResult
from .procgroup import AnyOf, Stop
from .runner import Isolation, RunDirs
from .sanitizer import SanitizerRun
from .spec import SanitizerCheck
from .submission import Submission
from .worker.protocol import Task, marked_tasks


@dataclass(frozen=True)
class ToolRequest:
    """One sanitizer check's case of one lab: what to run under which tool."""

    lab: str
    check: str  # the check's id
    tool: str
    task: Task
    dirs: RunDirs
    isolation: Isolation
    time_limit_s: float
    stop: Stop  # set once the lab's verdicts no longer need the run (a correctness case hung)


def requests_of(sub: Submission) -> list[ToolRequest]:
    """The lab's sanitizer cases (inputs written)."""
    out = []
    for check in sub.spec.sanitizers:
        dirs = sub.tool_dirs(f"sanitizer-{check.id}")
        out.append(ToolRequest(sub.spec.id, check.id, check.tool, tool_task(sub, check, dirs), dirs, sub.isolation,
                               sub.time_left(check.time_limit_s), sub.moot))
    return out


def one_tool(tool: str, requests: list[ToolRequest]) -> dict[tuple[str, str], SanitizerRun]:
    """Run ``requests`` (all under ``tool``) in one process; the runs it settles."""
    limit = sum(r.time_limit_s for r in requests)
    with sanitizer.RUNS_AT_ONCE:
        run, missing = sanitizer.run_tool(marked_tasks([r.task for r in requests], [1] * len(requests)), tool,
                                          requests[0].dirs.sub(f"together-{tool}"), limit,
                                          combined([r.isolation for r in requests]), AnyOf(r.stop for r in requests))
    found = sanitizer.outcome(run, missing, limit, "")
    if found.skipped:  # no compute-sanitizer here: the same for every lab
        return {(r.lab, r.check): found for r in requests}
    results = (run.result or {}).get("results") if run is not None else None
    clean = not (found.errors or found.error) and isinstance(results, list) and len(results) == len(requests)
    if not clean or not all(isinstance(r, dict) and r.get("status") == "ok" for r in results or []):
        return {}
    shared = SanitizerRun(seconds=found.seconds, shared=len({r.lab for r in requests}))
    return {(r.lab, r.check): shared for r in requests}


def sanitize_together(requests: list[ToolRequest]) -> dict[tuple[str, str], SanitizerRun]:
    """Each tool's requests in one process, the tools side by side; the runs settled."""
    tools: dict[str, list[ToolRequest]] = {}
    for request in requests:
        tools.setdefault(request.tool, []).append(request)
    out: dict[tuple[str, str], SanitizerRun] = {}
    failures: list[BaseException] = []

    def settle(tool: str, batch: list[ToolRequest]) -> None:
        try:
            out.update(one_tool(tool, batch))
        except BaseException as exc:  # noqa: B036 - raised below, to every lab
            failures.append(exc)

    threads = [threading.Thread(target=settle, args=(tool, batch), name=f"sanitize-{tool}")
               for tool, batch in tools.items() if len({r.lab for r in batch}) > 1]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return out


class SanitizerBatch(LabBatch[ToolRequest, str, SanitizerRun]):
    """Collects the labs' sanitizer cases; runs them one process per tool once every lab has sent
    its own (none, for a lab that runs no sanitizer), then hands each lab its settled runs."""

    name = "sanitizer-session"

    def _together(self, requests: list[ToolRequest]) -> dict[tuple[str, str], SanitizerRun]:
        return sanitize_together(requests)


def grade(sub: Submission, check: SanitizerCheck, batch: SanitizerBatch | None) -> list[CheckResult]:
    """The check from the repository's shared run of its tool where that settled it, else run alone."""
    if batch is not None:
        try:
            settled = batch.runs(sub.spec.id).get(check.id)
        except Exception:  # the shared run broke: the lab's own run decides, as it would alone
            settled = None
        if settled is not None:
            return [sanitizer.judge(sub, check, settled)]
    return [sanitizer.grade(sub, check)]
