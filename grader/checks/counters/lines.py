"""The source lines a failing counter check's figure comes from, worst first.

Where a counter check with ``by_line`` fails, its case is profiled once more with Nsight
Compute's SourceCounters section, and ncu prints its source page (``--page source --print-source
cuda,sass``: every SASS instruction with its counters, under the line of the ``-lineinfo`` build it
came from) into the pipe that only the grader reads. An instruction ncu lists only under a CUDA
header (``atomicAdd`` is inlined from ``device_atomic_functions.hpp``) is the student's line that
runs just before it. The verdict never depends on this run: it only says where to look.
"""

from __future__ import annotations

import csv
import dataclasses
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ...isolation.submission import Submission
from ...labspec.spec import LineFigure
from ...outcome import SourceLocation
from ...textutil import quoted_line

#: The most instruction rows read of one source page (a kernel has a few thousand at most).
MAX_ROWS = 200_000
#: Lines named in a message.
MAX_LINES = 3
#: SASS opcodes of atomic operations on global memory (``REDG``/``ATOMG`` on sm_90, ``RED``/``ATOM`` before).
GLOBAL_ATOMICS = ("REDG", "ATOMG", "RED", "ATOM")
SHARED_OPCODES = ("LDS", "STS", "LDSM", "ATOMS")
#: ncu's options for the run: the source counters, printed as the source page (before ``--log-file``).
NCU_ARGS = ("--section", "SourceCounters", "--page", "source", "--print-source", "cuda,sass", "--csv", "--import-source", "no")


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction of the source page, on the line of ``file`` it is listed under."""

    address: int
    file: str
    line: int
    opcode: str  # the base opcode: "LDG" for "@!P0 LDG.E.U8 R2, ..."
    executed: int  # warp-level executions
    threads: int = 0  # thread-level executions with the predicate on
    access_bits: int = 0  # bits each thread's access moves
    sectors: int = 0  # L2 theoretical sectors, global
    wavefronts: int = 0  # L1 wavefronts, shared
    wavefronts_ideal: int = 0  # ... without bank conflicts


@dataclass(frozen=True)
class LineCount:
    """A line's share of a check's figure: ``value`` as its message shows it, ``weight`` to rank by."""

    line: int
    value: float
    weight: float


COLUMNS = {"executed": "Instructions Executed", "threads": "Predicated-On Thread Instructions Executed",
           "access_bits": "Access Size", "sectors": "L2 Theoretical Sectors Global", "wavefronts": "L1 Wavefronts Shared",
           "wavefronts_ideal": "L1 Wavefronts Shared Ideal"}


def parse(text: str) -> list[Instruction]:
    """The instructions of ``ncu --page source --csv --print-source cuda,sass`` output, each on its
    (file, line). Kernels without line information (a SASS-only table) are left out; rows that do
    not parse (a cut log) are skipped."""
    out: list[Instruction] = []
    file, line, header = "", 0, dict[str, int]()
    for row in csv.reader(raw for raw in text.splitlines() if not raw.startswith("==")):
        if len(out) >= MAX_ROWS:
            break
        if not row:
            continue
        if row[0] in ("File Path", "File Name"):
            file, line, header = row[1] if len(row) > 1 else "", 0, {}
        elif row[0] == "Line No":
            header = {name: i for i, name in enumerate(row) if name != "Source"}
        elif row[0] in ("Address", "Function Name", "Kernel Name"):
            header = {} if row[0] == "Address" else header  # a table without source lines
        elif row[0]:
            line = int(row[0]) if row[0].isdigit() else 0
        elif header and line and len(row) > 3 and row[2].startswith("0x"):
            sass = row[3].split()
            opcode = next((w for w in sass if not w.startswith("@")), "").split(".")[0]
            counts = {key: _count(row, header.get(name)) for key, name in COLUMNS.items()}
            out.append(Instruction(_count(row, 2, 16), file, line, opcode, **counts))
    return out


def _count(row: list[str], index: int | None, base: int = 10) -> int:
    try:
        return int(row[index], base) if index is not None and index < len(row) else 0
    except ValueError:
        return 0  # "-": not this kind of instruction


def on_student_lines(instructions: list[Instruction], student_file: str) -> list[Instruction]:
    """Each instruction once, on a line of the student's file: as ncu lists it there, or where it
    lists it only under a header (inlined), on the student's line of the nearest instruction before."""
    base = Path(student_file).name
    mine = {i.address: i.line for i in instructions if Path(i.file).name == base}
    ordered = sorted(mine)
    out: dict[int, Instruction] = {}
    for ins in sorted(instructions, key=lambda i: i.address):
        if ins.address in out:
            continue
        line = mine.get(ins.address)
        if line is None:
            before = bisect_right(ordered, ins.address)
            if not before:
                continue
            line = mine[ordered[before - 1]]
        out[ins.address] = dataclasses.replace(ins, file=student_file, line=line)
    return list(out.values())


def counts(figure: LineFigure, instructions: list[Instruction]) -> list[LineCount]:
    """Each line's share of ``figure``, worst first; lines with none left out."""
    by_line: dict[int, list[Instruction]] = defaultdict(list)
    for ins in instructions:
        if _counted(figure, ins):
            by_line[ins.line].append(ins)
    out = []
    for line, group in by_line.items():
        executed = sum(i.executed for i in group)
        if figure == "global_load_sectors":  # as the check's figure: sectors per 32 bytes the threads asked for
            sectors, asked = sum(i.sectors for i in group), sum(i.threads * i.access_bits for i in group) / 256
            out.append(LineCount(line, sectors / asked if asked else 0.0, sectors - asked))
        elif figure == "shared_bank_conflicts":
            extra = sum(i.wavefronts - i.wavefronts_ideal for i in group)
            out.append(LineCount(line, extra / executed if executed else 0.0, extra))
        else:
            out.append(LineCount(line, executed, executed))
    return sorted((c for c in out if c.weight > 0), key=lambda c: (-c.weight, c.line))


def _counted(figure: LineFigure, ins: Instruction) -> bool:
    if figure in ("global_load_sectors", "global_load_requests"):
        return ins.opcode == "LDG"
    if figure == "shared_bank_conflicts":
        return ins.opcode in SHARED_OPCODES
    return ins.opcode in GLOBAL_ATOMICS


def described(figure: LineFigure, count: LineCount) -> str:
    if figure == "global_load_sectors":
        return f"{count.value:.1f} sectors per 32 bytes requested (1 when coalesced)"
    if figure == "shared_bank_conflicts":
        return f"{count.value:.1f} extra wavefronts (bank conflicts) per shared-memory instruction"
    noun = "global load request" if figure == "global_load_requests" else "global atomic instruction"
    return f"{int(count.value):,} {noun}{'' if count.value == 1 else 's'} (warp-level)"


def message(figure: LineFigure, found: list[LineCount], sub: Submission) -> tuple[str, SourceLocation | None]:
    """The lines to look at, in the student's words, and the first as the check's location."""
    if not found:
        return "", None
    parts = []
    for count in found[:MAX_LINES]:
        code = quoted_line(sub.source_lines, count.line)
        parts.append(f"{sub.name}:{count.line}" + (f" ({code})" if code else "") + f": {described(figure, count)}")
    return "; ".join(parts), SourceLocation(sub.name, found[0].line)


def lines(figure: LineFigure, page: str, sub: Submission) -> tuple[str, SourceLocation | None]:
    """Which lines of the student's file ``figure`` comes from, by the source ``page`` of a run
    with ``NCU_ARGS`` ("" and None where it names none)."""
    return message(figure, counts(figure, on_student_lines(parse(page), sub.name)), sub)
