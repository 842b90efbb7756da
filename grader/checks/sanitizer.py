"""compute-sanitizer checks: one launch on a tiny case, without CuPy's memory pool; ``grade`` scores one.

The pool rounds allocations up and packs them together, hiding out-of-bounds accesses, so the
worker runs with plain ``cudaMalloc`` here and memcheck pads every allocation.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from ..host import toolchain
from ..host.procgroup import Stop
from ..isolation.launch import Isolation, RunDirs
from ..isolation.options import usable_cpus
from ..isolation.submission import Submission
from ..isolation.toolrun import TOOL_LOG, ToolRun, run_under_tool
from ..labspec.spec import LabSpec, SanitizerCheck, params_label
from ..outcome import GATE, CheckResult, Outcome, SourceLocation, Stage
from ..textutil import cap_lines, quoted_line
from ..worker.protocol import Task
from .correctness import tool_task

ERROR_EXIT = 86  # what compute-sanitizer exits with when it reported an error
MEMCHECK_PADDING = 256
TOOL_FLAGS = {"memcheck": ("--padding", str(MEMCHECK_PADDING)), "racecheck": (), "synccheck": (), "initcheck": ()}
WHAT = {
    "memcheck": "out-of-bounds or misaligned memory accesses",
    "racecheck": "shared-memory data races",
    "synccheck": "barrier misuse (__syncthreads in divergent code)",
    "initcheck": "reads of uninitialised global memory",
}


@dataclass(frozen=True)
class SanitizerRun:
    errors: int = 0
    findings: tuple[str, ...] = ()  # the first reports, each a few lines
    skipped: str = ""  # cannot run here
    error: str = ""  # the submission failed under the tool in a way the tool did not report
    log: str = ""
    seconds: float = 0.0
    writes_outside: bool = False  # memcheck saw a store outside every global allocation
    shared: int = 0  # the labs whose cases this run ran, where it was a repository's shared run
    kept: bool = False  # kept from an earlier grade of the same compiled code


GLOBAL_WRITE = "Invalid __global__ write"
#: Sanitizer runs at once in this process (a lab's run side by side): each is a CPU-heavy process
#: with a CUDA context of its own.
RUNS_AT_ONCE = threading.BoundedSemaphore(max(2, usable_cpus()))
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
_PREFIX = re.compile(r"^========= ?")
#: Lines of a report kept as a finding; reports printed by a lab's own run.
FINDING_LINES, PRINT_LIMIT = 5, 20
#: What the tool prints where it left reports out (past ``--print-limit``).
NOT_PRINTED = "were not printed"
#: How a report of a failed CUDA call starts, and the note on the program's exit status: neither is a finding.
API_ERROR, EXIT_NOTE = "Program hit", "Target application returned"
#: "Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to cudaMalloc."
_FAILED_CALL = re.compile(rf"{API_ERROR} (\w+) .*? on CUDA API call to (\w+)")


def parse(text: str) -> tuple[int, list[str]]:
    """(error count, first findings) from compute-sanitizer's console output."""
    count = 0
    race = _RACE_SUMMARY.search(text)
    if race:
        count = int(race.group(1))
    else:
        summary = _SUMMARY.search(text)
        count = int(summary.group(1)) if summary else 0
    findings = [f for f in report_blocks(text, FINDING_LINES) if not f.startswith((API_ERROR, EXIT_NOTE))]
    return count, findings


def report_blocks(text: str, lines: int | None = None) -> list[str]:
    """Each report of compute-sanitizer's output, its backtraces left out; at most ``lines``
    lines of each (all of them by default)."""
    findings: list[str] = []
    block: list[str] = []
    skip_frames = False
    for raw in text.splitlines():
        if not raw.startswith("========="):
            continue
        line = _PREFIX.sub("", raw)
        stripped = line.strip()
        if not stripped or "SUMMARY" in stripped or stripped == "COMPUTE-SANITIZER":
            if block:
                findings.append("\n".join(block))
                block = []
            continue
        if not line.startswith(" "):  # a new report starts unindented
            if block:
                findings.append("\n".join(block))
            block, skip_frames = [stripped], False
            continue
        if stripped.startswith("Saved host backtrace") or stripped.startswith("Device Frame"):
            skip_frames = True
            continue
        if skip_frames or stripped.startswith("Host Frame"):
            continue
        if block and (lines is None or len(block) < lines):
            block.append("  " + stripped)
    if block:
        findings.append("\n".join(block))
    return findings


def run(task: Task, tool: str, dirs: RunDirs, time_limit_s: float, source_name: str,
        isolation: Isolation, stop: threading.Event | None = None) -> SanitizerRun:
    """Run one case task of the worker under ``compute-sanitizer --tool tool`` (killed once
    ``stop`` is set)."""
    return outcome(*run_tool(task, tool, dirs, time_limit_s, isolation, stop), time_limit_s, source_name)


def run_tool(task: Task, tool: str, dirs: RunDirs, time_limit_s: float, isolation: Isolation,
             stop: Stop | None = None, print_limit: int = PRINT_LIMIT) -> tuple[ToolRun | None, str]:
    """The worker's run of ``task`` under the tool (None, and why, where the tool is missing),
    printing at most ``print_limit`` reports.

    Its report comes through a pipe only the grader reads; what the program printed is not
    evidence (a student could print a clean summary)."""
    exe = toolchain.find("compute-sanitizer")
    if exe is None:
        return None, "compute-sanitizer is not installed on this machine"
    cmd = [
        str(exe), "--tool", tool, *TOOL_FLAGS[tool], "--error-exitcode", str(ERROR_EXIT),
        "--print-limit", str(print_limit), "--log-file", TOOL_LOG,
    ]
    return run_under_tool(cmd, task, dirs, time_limit_s, isolation, extra_env={"GRADER_NO_POOL": "1"}, stop=stop), ""


def outcome(result: ToolRun | None, missing: str, time_limit_s: float, source_name: str) -> SanitizerRun:
    """What a run under the tool found, the student's file named as they know it."""
    if result is None:
        return SanitizerRun(skipped=missing)
    text = _student_paths(result.log, source_name)
    if result.timed_out:
        return SanitizerRun(error=f"did not finish within {time_limit_s:g} s under compute-sanitizer and was killed",
                            seconds=result.seconds)
    count, findings = parse(text)
    if count or result.returncode == ERROR_EXIT:
        return SanitizerRun(errors=max(count, 1), findings=tuple(findings[:3]), log=cap_lines(text, 60), seconds=result.seconds,
                            writes_outside=GLOBAL_WRITE in text)
    if "Unable to find injection library" in text or "Error: Device not supported" in text:
        return SanitizerRun(skipped=f"compute-sanitizer cannot run on this machine: {cap_lines(text, 3)}", seconds=result.seconds)
    failure = result.failure("the process ended before it reported")
    if failure:
        printed = _student_paths(result.console, source_name)
        return SanitizerRun(error=failure, log=cap_lines(f"{text}\n{printed}".strip(), 30), seconds=result.seconds)
    return SanitizerRun(seconds=result.seconds)


_ACCESS = re.compile(r"Invalid (__global__|__shared__|__local__) (read|write) of size (\d+) bytes?")
_WHERE = re.compile(r"\bin (\S+):(\d+)")
_BY = re.compile(r"by thread \((?P<t>[\d,]+)\) in block \((?P<b>[\d,]+)\)")
SPACES = {"__global__": "", "__shared__": "shared-memory ", "__local__": "local-memory "}
#: How much of the student's line a message quotes.
QUOTE_CHARS = 100


def summary(finding: str, source_name: str, source: tuple[str, ...]) -> tuple[str, SourceLocation | None]:
    """One finding in a student's words: what happened, on which line of their file (quoted), by
    which thread of which block; and that line, for the reports' annotations."""
    first = finding.splitlines()[0] if finding else ""
    access = _ACCESS.search(first)
    if access:
        kind = "out-of-bounds" if "out of bounds" in finding else "invalid"
        what = f"{kind} {SPACES[access.group(1)]}{access.group(2)} of {access.group(3)} bytes"
    elif first.startswith("Barrier error"):
        what = "a barrier that not every thread of the warp reached"
    elif "Race reported" in first:
        what = "a shared-memory race between threads"
    else:
        what = first.rstrip(".")
    where = next((SourceLocation(source_name, int(m.group(2))) for m in _WHERE.finditer(finding) if m.group(1) == source_name),
                 None)
    if where is not None:
        code = quoted_line(source, where.line, QUOTE_CHARS)
        what += f" at line {where.line}" + (f" ({code})" if code else "")
    by = _BY.search(finding)
    if by:
        what += f", thread ({by['t']}) block ({by['b']})"
    return what, where


def _student_paths(text: str, source_name: str) -> str:
    """Show the student's own file name where the sanitizer prints the build copy's path."""
    base = Path(source_name).name
    return re.sub(r"(?:/[^\s:]*/)?" + re.escape(base) + r":", source_name + ":", text)


def grade(sub: Submission, check: SanitizerCheck) -> CheckResult:
    """One sanitizer check of the submission, run alone: pass when the tool reports nothing."""
    result = run_alone(sub, check)
    return judge(sub, check, result) if result is not None else gated(check)


def run_alone(sub: Submission, check: SanitizerCheck) -> SanitizerRun | None:
    """The check's case run alone under its tool; None where a correctness case hung (the verdict
    would be gated anyway)."""
    if sub.moot.is_set():
        return None
    dirs = sub.tool_dirs(f"sanitizer-{check.id}")
    with RUNS_AT_ONCE:
        return run(tool_task(sub, check, dirs), check.tool, dirs, sub.time_left(check.time_limit_s), sub.name,
                   sub.isolation, sub.moot)


def gated(check: SanitizerCheck) -> CheckResult:
    return CheckResult(check.id, Stage.SANITIZER, Outcome.FAIL, 0, check.points, GATE)


def judge(sub: Submission, check: SanitizerCheck, result: SanitizerRun) -> CheckResult:
    """The check's verdict on what its run under the tool found."""
    if sub.moot.is_set():  # ... and this run was stopped for it
        return dataclasses.replace(gated(check), duration_s=result.seconds)
    case = params_label(check.params)
    if result.skipped:
        return CheckResult(check.id, Stage.SANITIZER, Outcome.SKIPPED, 0, check.points, result.skipped)
    if result.error:
        return CheckResult(check.id, Stage.SANITIZER, Outcome.ERROR, 0, check.points,
                           f"under compute-sanitizer {check.tool} ({case}): {result.error}", result.log,
                           duration_s=result.seconds)
    measured: dict[str, object] = {"errors": result.errors, "case": case, "seconds": round(result.seconds, 2)}
    if result.shared:
        measured["shared_run_labs"] = result.shared
    if result.kept:
        measured["kept"] = True
    if result.writes_outside:
        measured["global_writes_outside"] = True
    failed_call = _FAILED_CALL.search(result.log) if not result.findings else None
    if result.errors and failed_call:  # no access of the kernel's was at fault: a CUDA call failed and went on
        msg = (f"{check.tool} reported {result.errors} error(s) on {case}, all of them failed CUDA calls, not memory accesses "
               f"(first: {failed_call.group(1)} from {failed_call.group(2)}): check what each CUDA call returns")
        return CheckResult(check.id, Stage.SANITIZER, Outcome.FAIL, 0, check.points, msg, result.log, measured, result.seconds)
    if result.errors:
        first = result.findings[0].replace("\n", " ") if result.findings else "see the details"
        said, where = summary(result.findings[0], sub.name, sub.source_lines) if result.findings else ("", None)
        msg = (f"{check.tool} reported {result.errors} error(s) ({WHAT[check.tool]}) on {case}"
               + (f": {said}" if said else "") + f"; first report: {first}")
        if check.hint:
            msg += f". {check.hint}"
        return CheckResult(check.id, Stage.SANITIZER, Outcome.FAIL, 0, check.points, msg,
                           "\n\n".join(result.findings) or result.log, measured, result.seconds, location=where)
    return CheckResult(check.id, Stage.SANITIZER, Outcome.PASS, check.points, check.points,
                       f"{check.tool}: no {WHAT[check.tool]} on {case}", "", measured, result.seconds)


def explain_nans(checks: list[CheckResult], sanitizer_checks: list[CheckResult], spec: LabSpec) -> list[CheckResult]:
    """Where memcheck saw out-of-bounds accesses, say so in correctness messages about NaNs: a
    kernel that reads past its inputs brings in the NaN the grader fills outputs with, and "was
    it never written?" would send the student the wrong way."""
    tools = {s.id: s.tool for s in spec.sanitizers}
    seen = [c for c in sanitizer_checks if tools.get(c.id) == "memcheck" and c.outcome is Outcome.FAIL]
    if not seen:
        return checks
    note = f"; memcheck saw out-of-bounds accesses ({seen[0].id}): reads past a buffer bring in NaN or stale values"
    return [dataclasses.replace(c, message=c.message + note)
            if c.stage is Stage.CORRECTNESS and c.outcome is Outcome.FAIL and " NaN" in c.message else c for c in checks]


def stray_writes(sanitizer_checks: list[CheckResult]) -> str:
    """Why the speed checks are not run, where memcheck saw stores outside every buffer: in the
    timed runs they land in the kernel's own inputs or the baselines' (whether they do depends
    on the memory layout), so neither the times nor the answers checked after them would be fair."""
    seen = next((c.id for c in sanitizer_checks if c.outcome is Outcome.FAIL and c.measured.get("global_writes_outside")), None)
    if seen is None:
        return ""
    return (f"not timed: memcheck saw stores outside every buffer ({seen}), which in the large timed runs "
            "can overwrite the inputs of your kernel or of the baselines; fix those first")
