"""The student's device code, taken out of their shared object: the cubin the replayer loads, and
what the grader reads from it first (its kernels' parameter layout, its device variables).

``cuobjdump -xelf all`` writes every ELF of the library's fat binaries (one per compiled file and
arch: the student's file, the grader's support file). Each is then read as an ELF file (pyelftools
for its sections): the kernels are the symbols marked as entries, each parameter's size is in the
kernel's ``.nv.info.NAME`` section (``EIATTR_KPARAM_INFO``), and the device variables are the
objects of the ``.nv.constant3`` and ``.nv.global`` sections. cuobjdump's own listing of these is
not read: its layout differs between toolkit releases (13.0's ``-elf`` prints no symbol table).
The grader builds the library itself with nvcc, so these are the compiler's facts, not the
student's claims: a record whose launches do not fit them is refused before any replay.
"""

from __future__ import annotations

import io
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from ....host import toolchain
from ....host.safeio import read_file

#: The most of cuobjdump's output read, and the largest cubin loaded.
OUTPUT_LIMIT_BYTES = 16 << 20
CUBIN_LIMIT_BYTES = 64 << 20
TIME_LIMIT_S = 120.0

#: An ELF64 symbol: name, info, other, section index, value, size.
_SYMBOL = struct.Struct("<IBBHQQ")
_STT_OBJECT, _STT_FUNC = 1, 2
#: ``st_other`` flag of a kernel (an entry point) in a CUDA ELF.
_STO_CUDA_ENTRY = 0x10
#: ``.nv.info`` records: format byte, attribute byte, then 2 bytes of value or (EIFMT_SVAL) of size.
_EIFMT_SVAL = 0x04
_EIATTR_KPARAM_INFO = 0x17


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


def parse_elf(data: bytes, path: Path) -> Module:
    """The kernels and variables of one cubin (its bytes)."""
    # (imported here, not by every grade's start: a grade whose counters are kept reads no cubin)
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(io.BytesIO(data))
        sections = [sec.name for sec in elf.iter_sections()]
        symtab = elf.get_section_by_name(".symtab")
        strtab = elf.get_section_by_name(".strtab")
        if symtab is None or strtab is None:
            return Module(path)
        names, raw = strtab.data(), symtab.data()
        kernels: dict[str, Kernel] = {}
        variables: dict[str, Variable] = {}
        for at in range(0, len(raw) - _SYMBOL.size + 1, _SYMBOL.size):
            name_at, info, other, shndx, _, size = _SYMBOL.unpack_from(raw, at)
            name = names[name_at:names.index(b"\0", name_at)].decode(errors="replace")
            kind = info & 0xF
            if kind == _STT_FUNC and other & _STO_CUDA_ENTRY:
                info_section = elf.get_section_by_name(f".nv.info.{name}")
                kernels[name] = Kernel(name, _param_sizes(info_section.data() if info_section is not None else b""))
            elif kind == _STT_OBJECT and 0 < shndx < len(sections) and sections[shndx].startswith((".nv.constant3", ".nv.global")):
                variables[name] = Variable(name, size)
    except (ELFError, ValueError, struct.error) as exc:
        raise CubinError(f"{path.name} is not a readable cubin: {exc}") from None
    return Module(path, kernels, variables)


def _param_sizes(info: bytes) -> tuple[int, ...]:
    """Each parameter's size in bytes, by ordinal, from a kernel's ``.nv.info.NAME`` records."""
    sizes: dict[int, int] = {}
    at = 0
    while at + 4 <= len(info):
        fmt, attr, value = struct.unpack_from("<BBH", info, at)
        at += 4
        if fmt != _EIFMT_SVAL:
            continue
        if attr == _EIATTR_KPARAM_INFO and value >= 12:
            _, ordinal, _, flags = struct.unpack_from("<IHHI", info, at)
            sizes[ordinal] = (flags >> 18) & 0x3FFF
        at += value
    return tuple(sizes[i] for i in sorted(sizes))


def extract(library: Path, folder: Path, arch: str) -> list[Module]:
    """Every cubin for ``arch`` (``sm_90``) in ``library``, written into ``folder`` (the grader's)."""
    folder.mkdir(parents=True, exist_ok=True)
    _cuobjdump(["-xelf", "all", str(library.resolve())], folder)
    written = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink())
    found = [p for p in written if p.name.endswith(f".{arch}.cubin")]
    if not found:
        names = ", ".join(p.name for p in written[:6]) or "nothing"
        raise CubinError(f"the library holds no {arch} device code (cuobjdump -xelf wrote {names})")
    return [parse_elf(read_file(p, CUBIN_LIMIT_BYTES, "a cubin"), p) for p in found]


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
