"""What the compiler printed, read: per-kernel resources from ptxas, demangled kernel names, the
log a student sees (``file:12: error``), where its first error is, and a one-line summary."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from typing import Any

from ..outcome import KernelResources, SourceLocation
from ..textutil import cap_lines, clean

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")


def parse_ptxas(output: str, arch: str | None) -> tuple[KernelResources, ...]:
    """Per-kernel resources from ``-Xptxas -v`` output, for one arch (the graded one)."""
    found: dict[str, dict[str, Any]] = {}
    current: str | None = None
    entry: str | None = None  # the entry function being compiled for the graded arch
    for line in output.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1) if (arch is None or m.group(2) == arch) else None
            entry = current
            if current is not None:
                found.setdefault(current, {"name": current})
            continue
        m = _PROPS.search(line)
        if m:
            # a device function's block is not the kernel's; the kernel's own block may follow it
            current = m.group(1) if m.group(1) == entry else None
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            found[current].update(stack_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)), spill_load_bytes=int(m.group(3)))
            continue
        m = _USED.search(line)
        if m:
            found[current].update(registers=int(m.group(1)), barriers=int(m.group(2) or 0), smem_bytes=int(m.group(3) or 0))
            for cm in _CMEM.finditer(line):
                if cm.group(2) == "3":
                    found[current]["cmem_bytes"] = int(cm.group(1))
    return tuple(KernelResources(**{**v, "name": demangle(v["name"])}) for v in found.values())


@functools.lru_cache(maxsize=None)
def demangle(name: str) -> str:
    """C++ kernel names as written in the source (``tiled(const float*, ...)``)."""
    if not name.startswith("_Z"):
        return name
    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None:
        return name
    try:
        out = subprocess.run([cxxfilt, name], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return name
    return out or name


_DIAG = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?P<kind>error|warning|catastrophic error)\b(?P<rest>.*)$")


def student_log(output: str, max_lines: int = 60) -> str:
    """Compiler output with nvcc's ``file(12): error`` turned into ``file:12: error``, capped."""
    lines = []
    for line in clean(output).splitlines():
        m = _DIAG.match(line)
        if m:
            line = f"{m['file']}:{m['line']}: {m['kind']}{m['rest']}"
        lines.append(line)
    return cap_lines("\n".join(lines), max_lines)


_ERROR_AT = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?:\d+:)? (?:catastrophic error|fatal error|error)\b")


def error_location(log: str, student_file: str) -> SourceLocation | None:
    """The first error that :func:`student_log` shows in ``student_file`` (nvcc's front end
    writes ``file(12): error``, the host compiler ``file:12:5: error``); None when every error is
    elsewhere (the lab's header, the linker)."""
    for line in log.splitlines():
        m = _ERROR_AT.match(line.strip())
        if m and m["file"] == student_file:
            return SourceLocation(student_file, int(m["line"]))
    return None


#: How an interface header offers a name a student may declare themselves: the header's
#: declaration stands inside ``#ifndef GRADER_OWN_<NAME>``, and the build defines that macro when
#: the student's file declares NAME (a ``#define``, a ``const``/``constexpr`` variable, an enumerator).
_OFFERED = re.compile(rb"^[ \t]*#[ \t]*ifndef[ \t]+GRADER_OWN_([A-Za-z_]\w*)", re.MULTILINE)
_COMMENT_OR_TEXT = re.compile(rb'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)


def offered_names(header: bytes) -> tuple[str, ...]:
    """The names the interface header declares only where the student's file does not."""
    return tuple(dict.fromkeys(m.group(1).decode() for m in _OFFERED.finditer(header)))


def own_names(source: bytes, names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``names`` the student's file declares itself (comments and strings left out):
    ``#define NAME``, or NAME followed by ``=`` (not ``==``) or ``{`` as in ``constexpr int NAME = 7;``,
    ``const int NAME{15};`` or ``enum { NAME = 7 }``."""
    code = _COMMENT_OR_TEXT.sub(b" ", source)
    found = []
    for name in names:
        n = re.escape(name.encode())
        if re.search(rb"^[ \t]*#[ \t]*define[ \t]+" + n + rb"\b", code, re.MULTILINE) or \
                re.search(rb"(?<![\w.>:])" + n + rb"\s*(=(?!=)|\{)", code):
            found.append(name)
    return tuple(found)


def summarize_errors(output: str, display: str) -> str:
    """One line naming the first error and where it is."""
    log = student_log(output, max_lines=10_000)
    errors = [line for line in log.splitlines() if re.search(r":\d+:(\d+:)? (catastrophic error|fatal error|error)", line)]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"compile error: {errors[0].strip()}{more}"
    undefined = re.search(r"undefined reference to `([^']+)'", log) or re.search(
        r"required symbol `([^']+)' not defined", log
    )
    if undefined:
        return (
            f"link error: {display} does not define `{undefined.group(1)}` "
            "(define the launcher with exactly the prototype in the lab's interface header)"
        )
    twice = re.search(r"multiple definition of `([^']+)'", log)
    if twice:
        return (
            f"link error: {display} defines `{twice.group(1)}`, which the CUDA runtime already defines "
            "(give your function another name)"
        )
    tail = [line for line in log.splitlines() if line.strip()]
    return "compile failed: " + (tail[-1].strip() if tail else "nvcc exited with an error and printed nothing")
