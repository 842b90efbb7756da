"""The student's device code, taken out of their shared object: the cubin the replayer loads, and
what the grader reads from it first (its kernels' parameter layout, its device variables).

``cuobjdump -xelf all`` writes every ELF of the library's fat binaries (one per compiled file and
arch: the student's file, the grader's support file); ``cuobjdump -elf`` on each prints its symbol
table and, per kernel, an ``EIATTR_KPARAM_INFO`` line per parameter (ordinal, offset, size). The
grader builds the library itself with nvcc, so these are the compiler's facts, not the student's
claims: a record whose launches do not fit them is refused before any replay.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from ..host import toolchain
from ..host.safeio import read_file

#: The most of cuobjdump's output read, and the largest cubin loaded.
OUTPUT_LIMIT_BYTES = 16 << 20
CUBIN_LIMIT_BYTES = 64 << 20
TIME_LIMIT_S = 120.0

_SECTION = re.compile(r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+\S+\s+[0-9a-f]+\s+[0-9a-f]+\s+[0-9a-f]+\s+(\S+)\s*$")
_SYMBOL = re.compile(r"^\s*(?:0x)?[0-9a-f]+\s+(?:0x)?([0-9a-f]+)\s+(?:0x)?([0-9a-f]+)\s+(\w+)\s+(\w+)\s+\w+\s+(\S+)\s+(?:0x)?([0-9a-f]+)\s+(\S+)\s*$")
_PARAM = re.compile(r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x([0-9a-f]+)\s+Size\s*:\s*0x([0-9a-f]+)")
_INFO = re.compile(r"^\.nv\.info\.(\S+)\s*$")


class CubinError(RuntimeError):
    """The device code could not be taken out or read (one line: why)."""


@dataclass(frozen=True)
class Kernel:
    name: str
    params: tuple[int, ...]  # each parameter's size in bytes, in order


@dataclass(frozen=True)
class Variable:
    name: str
    size: int


@dataclass(frozen=True)
class Module:
    """One cubin: its file, the kernels it defines and its device variables (``__constant__``,
    ``__device__``), by symbol name."""

    path: Path
    kernels: Mapping[str, Kernel] = field(default_factory=dict)
    variables: Mapping[str, Variable] = field(default_factory=dict)


def parse_elf(text: str, path: Path) -> Module:
    """The kernels and variables of one cubin from ``cuobjdump -elf``'s listing of it."""
    sections: dict[int, str] = {}
    entries: list[str] = []
    params: dict[str, list[tuple[int, int]]] = {}
    variables: dict[str, Variable] = {}
    info_of = ""
    for line in text.splitlines():
        if (m := _SECTION.match(line)) and m.group(2).startswith("."):
            sections[int(m.group(1), 16)] = m.group(2)
        elif m := _SYMBOL.match(line):
            size, kind, other, index, name = m.group(2), m.group(3), m.group(5), m.group(6), m.group(7)
            if kind == "FUNC" and other == "ENTRY":
                entries.append(name)
            elif kind == "OBJECT" and sections.get(int(index, 16), "").startswith((".nv.constant3", ".nv.global")):
                variables[name] = Variable(name, int(size, 16))
        elif m := _INFO.match(line.strip()):
            info_of = m.group(1)
        elif (m := _PARAM.search(line)) and info_of:
            params.setdefault(info_of, []).append((int(m.group(1), 16), int(m.group(3), 16)))
    kernels = {name: Kernel(name, tuple(size for _, size in sorted(params.get(name, [])))) for name in entries}
    return Module(path, kernels, variables)


def extract(library: Path, folder: Path, arch: str) -> list[Module]:
    """Every cubin for ``arch`` (``sm_90``) in ``library``, written into ``folder`` (the grader's)."""
    folder.mkdir(parents=True, exist_ok=True)
    _cuobjdump(["-xelf", "all", str(library.resolve())], folder)
    found = sorted(p for p in folder.iterdir() if p.name.endswith(f".{arch}.cubin") and p.is_file() and not p.is_symlink())
    return [parse_elf(_cuobjdump(["-elf", p.name], folder), p) for p in found]


def module_of(modules: Iterable[Module], kernels: Iterable[str]) -> Module | str:
    """The cubin that defines the most of ``kernels`` (the launcher's, from every case), or why
    there is none; a case whose kernels it lacks is then refused by its plan."""
    wanted = set(kernels)
    best = max(modules, key=lambda m: len(wanted & set(m.kernels)), default=None)
    if best is None or not wanted & set(best.kernels):
        missing = sorted(wanted)
        return f"the launcher ran {missing[0] if missing else 'no kernel'}, which the compiled device code does not define"
    return best


def read_cubin(module: Module) -> bytes:
    """The cubin's bytes (a regular file of the grader's, size capped)."""
    return read_file(module.path, CUBIN_LIMIT_BYTES, "a cubin")


def _cuobjdump(args: list[str], cwd: Path) -> str:
    exe = toolchain.find("cuobjdump")
    if exe is None:
        raise CubinError("cuobjdump not found (install the CUDA toolkit or `pip install nvidia-cuda-cuobjdump`)")
    try:
        proc = subprocess.run([str(exe), *args], capture_output=True, timeout=TIME_LIMIT_S, cwd=cwd, env=toolchain.tool_env(),
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CubinError(f"cuobjdump {args[0]} failed: {exc}") from None
    out = proc.stdout[:OUTPUT_LIMIT_BYTES].decode(errors="replace")
    if proc.returncode != 0:
        raise CubinError(f"cuobjdump {args[0]} failed: {(proc.stderr.decode(errors='replace') or out).strip()[:300]}")
    return out
