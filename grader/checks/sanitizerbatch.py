"""One compute-sanitizer process per tool for a student's labs.

Each run under compute-sanitizer pays for the tool's start and a CUDA context of its own, and a
GPU's contexts are made and torn down one at a time: a repository's 16 sanitizer runs (three or
four tools on each of five labs) queued behind one another and behind the workers. Grading a
repository therefore runs each tool once, on every lab's case in turn (the labs are one
student's, so nothing of another student's shares the process).

A check's run is kept for the next grade of the same compiled code (``kept_file``): its case's
inputs come from the lab's public seed, so the same library, generator, tool, GPU and driver find
the same; a regrade of unchanged code runs the tool no more, and judges the kept run afresh.

A shared run settles a lab's check only where it is certain the lab's case was clean: the case
ran and ended well, and every report the tool printed names a kernel of another lab (reports
name the kernel, not the file: each lab's file is a ``student.cu``). A report that cannot be
told apart (it names no lab's kernel or only in part, it was left unprinted past the print
limit, the log was cut) settles nothing. The labs a report names, or whose case failed, are left
to their own runs, alone, as a lab graded alone would have them; the labs whose cases were not
reached (the context broke before them, or the run was stopped because another lab's case hangs)
share a run again. So a lab's verdicts never depend on the shared run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..context import carried
from ..host import toolchain
from ..host.hostdirs import private_dir, read_private, write_private
from ..host.procgroup import AnyOf, Stop
from ..isolation.launch import Isolation, RunDirs
from ..isolation.replies import Reply
from ..isolation.submission import Submission
from ..labspec.spec import SanitizerCheck
from ..labspec.version import problem_version
from ..outcome import CheckResult
from ..textutil import OMITTED
from ..worker.protocol import Status, Task, marked_tasks
from . import sanitizer
from .correctness import tool_task
from .counters.batch import combined
from .counters.ncu import cache_path
from .labbatch import LabBatch
from .sanitizer import SanitizerRun


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
    kernels: frozenset[str] = frozenset()  # the lab's kernels, by name (``kernel_name``)


#: The largest kept run read back (a run keeps a few reports and 60 lines of the tool's log), and where.
KEPT_LIMIT_BYTES, KEPT_FOLDER = 1 << 20, "sanitizer"
#: Reports a shared run prints: every one must be seen to tell whose kernel it names.
SHARED_PRINT_LIMIT = 1000
#: Where a report names the function it happened in: "at matmul(const float *, int)+0x730 in student.cu:23".
_AT = re.compile(r"\bat (.+?)\+0x[0-9a-fA-F]+ in ")
#: A failed CUDA call of the program, and its error: "Program hit cudaErrorLaunchFailure (error 719) ...".
_HIT = re.compile(rf"^{sanitizer.API_ERROR} (\w+)")


def kernel_name(signature: str) -> str:
    """A kernel's name as ptxas and the sanitizer both give it: ``void tiled<16>(float*)`` and
    ``tiled<16>(float *)`` are both ``tiled<16>``."""
    return signature.strip().removeprefix("void ").split("(", 1)[0].strip()


def requests_of(sub: Submission, reuse: bool = True) -> list[ToolRequest]:
    """The lab's sanitizer cases (inputs written), but those kept from an earlier grade (``reuse``)."""
    out = []
    kernels = frozenset(kernel_name(k.name) for k in sub.kernels)
    for check in sub.spec.sanitizers:
        if reuse and kept(sub, check) is not None:
            continue
        dirs = sub.tool_dirs(f"sanitizer-{check.id}")
        out.append(ToolRequest(sub.spec.id, check.id, check.tool, tool_task(sub, check, dirs), dirs, sub.isolation,
                               sub.time_left(check.time_limit_s), sub.moot, kernels))
    return out


def blamed(log: str, kernels: Mapping[str, frozenset[str]], broke: tuple[str, str] | None) -> set[str] | None:
    """The labs whose kernels the reports in ``log`` name; None where a report cannot be told
    apart. ``broke``: the lab whose case broke the CUDA context, and its error, which the
    program's later CUDA calls then hit (nothing else a failed call reports is attributed)."""
    if sanitizer.NOT_PRINTED in log or OMITTED in log:
        return None
    labs: set[str] = set()
    for block in sanitizer.report_blocks(log):
        if block.startswith(sanitizer.EXIT_NOTE):
            continue
        hit = _HIT.match(block)
        if hit:
            if broke is None or hit.group(1) != broke[1]:
                return None
            labs.add(broke[0])
            continue
        names = {kernel_name(n) for n in _AT.findall(block)}
        owners = {lab for lab, own in kernels.items() if names & own}
        if not names or names - set().union(*(kernels[lab] for lab in owners)):
            return None  # a function of no lab's (a device function, or the grader's)
        labs |= owners
    return labs


def one_tool(tool: str, requests: list[ToolRequest]) -> dict[tuple[str, str], SanitizerRun]:
    """Run ``requests`` (all under ``tool``) in shared runs; the runs they settle."""
    out: dict[tuple[str, str], SanitizerRun] = {}
    while len({r.lab for r in requests}) > 1:
        settled, requests = _shared_run(tool, requests)
        out.update(settled)
    return out


def _shared_run(tool: str, requests: list[ToolRequest]) -> tuple[dict[tuple[str, str], SanitizerRun], list[ToolRequest]]:
    """One process running ``requests`` in turn: the runs it settled, and the requests of the labs
    it did not reach, to share a run again."""
    limit = sum(r.time_limit_s for r in requests)
    with sanitizer.RUNS_AT_ONCE:
        run, missing = sanitizer.run_tool(marked_tasks([r.task for r in requests], [1] * len(requests)), tool,
                                          requests[0].dirs.sub(f"together-{tool}"), limit,
                                          combined([r.isolation for r in requests]), AnyOf(r.stop for r in requests),
                                          print_limit=SHARED_PRINT_LIMIT)
    found = sanitizer.outcome(run, missing, limit, "")
    if found.skipped:  # no compute-sanitizer here: the same for every lab
        return {(r.lab, r.check): found for r in requests}, []
    results = run.result.results if run is not None and not run.timed_out and run.result is not None else None
    if run is None or results is None:  # stopped, killed at the limit, or the process died
        # stopped for a lab whose case hangs (its check is gated): the others share a run again
        return {}, [r for r in requests if not r.stop.is_set()] if any(r.stop.is_set() for r in requests) else []
    replies: list[Reply | None] = [*results[:len(requests)]]
    replies += [None] * (len(requests) - len(replies))  # not reached
    broke = next(((q.lab, (r.error or "").split(":")[0]) for q, r in zip(requests, replies) if r is not None and r.sticky), None)
    faulty = blamed(run.log, {r.lab: r.kernels for r in requests}, broke)
    if faulty is None or (found.errors and not faulty):
        return {}, []
    labs: dict[str, list[tuple[ToolRequest, Reply | None]]] = {}
    for request, reply in zip(requests, replies):
        labs.setdefault(request.lab, []).append((request, reply))
    shared = SanitizerRun(seconds=found.seconds, shared=len(labs))
    settled: dict[tuple[str, str], SanitizerRun] = {}
    again: list[ToolRequest] = []
    for lab, pairs in labs.items():
        if lab in faulty or any(reply is not None and reply.status != Status.OK for _, reply in pairs):
            continue  # its own run tells
        if any(reply is None for _, reply in pairs):
            again += [request for request, _ in pairs]
        else:
            settled.update({(lab, request.check): shared for request, _ in pairs})
    return settled, again if len(again) < len(requests) else []


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

    threads = [threading.Thread(target=carried(settle), args=(tool, batch), name=f"sanitize-{tool}")
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


def grade(sub: Submission, check: SanitizerCheck, batch: SanitizerBatch | None, reuse: bool = True) -> list[CheckResult]:
    """The check from its run kept from an earlier grade of the same code (``reuse``), else from
    the repository's shared run of its tool where that settled it, else run alone."""
    run = kept(sub, check) if reuse else None
    if run is None and batch is not None:
        try:
            run = batch.runs(sub.spec.id).get(check.id)
        except Exception:  # the shared run broke: the lab's own run decides, as it would alone
            run = None
    if run is None:
        run = sanitizer.run_alone(sub, check)
    if run is not None and not run.kept and keepable(run) and not sub.moot.is_set() and (path := kept_file(sub, check)):
        with contextlib.suppress(OSError):  # (kept only to spare the next grade the run)
            write_private(path, json.dumps(dataclasses.asdict(run)).encode())
    return [sanitizer.judge(sub, check, run) if run is not None else sanitizer.gated(check)]


def keepable(run: SanitizerRun) -> bool:
    """A run that says what the code does: clean, or with the tool's reports (not one that could
    not run, or that failed or was stopped in a way the tool did not report)."""
    return not (run.skipped or run.error)


def kept_file(sub: Submission, check: SanitizerCheck) -> Path | None:
    """Where ``check``'s run of the student's library is kept: by the library's bytes, the tool
    and its flags, the case and what makes its inputs, the name the student's file is shown by,
    the GPU and driver and the tool's own file. None without a GPU or the tool."""
    tool = toolchain.identity("compute-sanitizer")
    if sub.gpu is None or tool is None:
        return None
    key = (f"sanitizer|{sub.gpu.name}|{sub.gpu.driver}|{tool}|{check.tool}|{sanitizer.TOOL_FLAGS[check.tool]}|"
           f"{sorted(check.params.items())}|{check.seed}|{problem_version(sub.spec)}|{sub.name}")
    private_dir(sub.cache_dir / KEPT_FOLDER, "the sanitizer runs kept")
    return cache_path(key, sub.cache_dir, sub.library, KEPT_FOLDER)


def kept(sub: Submission, check: SanitizerCheck) -> SanitizerRun | None:
    """``check``'s run kept from an earlier grade of the same compiled code (None: none is)."""
    path = kept_file(sub, check)
    stored = read_private(path, KEPT_LIMIT_BYTES, "a kept sanitizer run") if path is not None else None
    try:
        data = json.loads(stored) if stored else None
        run = SanitizerRun(**{**data, "findings": tuple(data["findings"]), "kept": True}) if isinstance(data, dict) else None
    except (TypeError, KeyError, ValueError):
        return None  # (a file of another version's: run again)
    if run is None or not isinstance(run.errors, int) or not all(isinstance(f, str) for f in (*run.findings, run.log)):
        return None
    return run if keepable(run) else None
