"""What the compiled code says about memory use: SASS opcodes and cuobjdump resource usage;
``static_checks`` grades a lab's compiled-code checks from them."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..host import toolchain
from ..host.safeio import write_whole
from ..isolation.compilerlog import demangle
from ..labspec.spec import LabSpec
from ..outcome import CheckResult, KernelResources, Outcome, Stage


@dataclass(frozen=True)
class FunctionCode:
    name: str  # demangled
    opcodes: Mapping[str, int]  # base opcode (before the first dot) -> count
    constant_bank3: bool  # reads c[0x3][...]: user __constant__ memory


@dataclass(frozen=True)
class CodeFacts:
    functions: tuple[FunctionCode, ...]
    constant_bytes: int = 0  # CONSTANT[3] in the Common block
    resources: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def count(self, *opcodes: str) -> int:
        return sum(f.opcodes.get(op, 0) for f in self.functions for op in opcodes)

    def without(self, unused: set[str]) -> "CodeFacts":
        """These facts less the functions named in ``unused`` (kernels that never ran)."""
        return dataclasses.replace(self, functions=tuple(f for f in self.functions if f.name not in unused))


class SassUnavailable(RuntimeError):
    pass


SHARED_OPS = ("LDS", "STS", "LDSM", "STSM", "ATOMS", "LDGSTS")
LOCAL_OPS = ("LDL", "STL")
GLOBAL_ATOMIC_OPS = ("ATOMG", "RED", "REDG", "ATOM")
SHARED_ATOMIC_OPS = ("ATOMS",)

_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[\w.]*)?\b(.*?);")
_RES_FUNC = re.compile(r"^\s*Function\s+(\S+):")
_RES_FIELD = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")


def _cuobjdump(args: list[str], library: Path) -> str:
    exe = toolchain.find("cuobjdump")
    if exe is None:
        raise SassUnavailable("cuobjdump not found (install the CUDA toolkit or `pip install nvidia-cuda-cuobjdump`)")
    proc = subprocess.run(
        [str(exe), *args, str(library)], capture_output=True, text=True, errors="replace",
        timeout=120, env=toolchain.tool_env(),
    )
    if proc.returncode != 0:
        raise SassUnavailable(f"cuobjdump failed: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout


def parse_sass(text: str) -> tuple[FunctionCode, ...]:
    """Split ``cuobjdump -sass`` output on ``Function :`` lines (``-fun`` fails for extern "C")."""
    funcs: list[FunctionCode] = []
    name: str | None = None
    ops: dict[str, int] = {}
    bank3 = False

    def flush() -> None:
        if name is not None:
            funcs.append(FunctionCode(demangle(name), dict(ops), bank3))

    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            flush()
            name, ops, bank3 = m.group(1), {}, False
            continue
        if name is None:
            continue
        m = _INSN.search(line)
        if m:
            ops[m.group(1)] = ops.get(m.group(1), 0) + 1
            if "c[0x3]" in m.group(2):
                bank3 = True
    flush()
    return tuple(funcs)


def parse_resource_usage(text: str) -> tuple[int, dict[str, dict[str, int]]]:
    """``cuobjdump --dump-resource-usage``: (CONSTANT[3] bytes of the module, per-function fields)."""
    constant = 0
    per_func: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _RES_FUNC.match(line)
        if m:
            current = demangle(m.group(1))
            per_func.setdefault(current, {})
            continue
        if line.strip().startswith(("Common:", "Resource usage:")):
            current = None
            continue
        fields = {k: int(v) for k, v in _RES_FIELD.findall(line)}
        if current is None:
            constant = max(constant, fields.get("CONSTANT[3]", 0))
        else:
            per_func[current].update(fields)
    return constant, per_func


def inspect(library: Path) -> CodeFacts:
    """Facts about a built library; kept beside it (build folders are content-addressed)."""
    cached = library.with_name(library.name + ".sass.json")
    if cached.exists():
        try:
            data = json.loads(cached.read_text())
            return CodeFacts(
                tuple(FunctionCode(f["name"], f["opcodes"], f["constant_bank3"]) for f in data["functions"]),
                data["constant_bytes"], data["resources"],
            )
        except (OSError, ValueError, KeyError):
            pass
    funcs = parse_sass(_cuobjdump(["-sass"], library))
    constant, resources = parse_resource_usage(_cuobjdump(["--dump-resource-usage"], library))
    facts = CodeFacts(funcs, constant, resources)
    try:
        write_whole(cached, json.dumps(dataclasses.asdict(facts)))
    except OSError:
        pass  # a read-only cache still works, only slower
    return facts


# Static requirements a lab can grade: name -> (test, what it looks for, what the student sees when missing)
#: What each static requirement asks, for READMEs and reports.
REQUIREMENT_TEXT = {
    "shared_memory": "the compiled kernel reads and writes shared memory (SASS LDS/STS)",
    "constant_memory": "a kernel reads `__constant__` data (SASS `c[0x3][...]`, `CONSTANT[3]` in the resource usage)",
    "no_local_memory": "no local memory and no register spills (no SASS LDL/STL)",
    "global_atomics": "atomic operations on global memory (SASS RED/ATOMG)",
    "shared_atomics": "atomic operations on shared memory (SASS ATOMS)",
    "atomics": "atomic operations, on global or shared memory (SASS RED/ATOMG/ATOMS)",
}


#: Requirements that asking of more kernels can only help ("some kernel has X"); the others ("no
#: kernel has X") can only be hurt by more kernels.
SOME_KERNEL_HAS = frozenset({"shared_memory", "constant_memory", "global_atomics", "shared_atomics", "atomics"})


def settled_without_knowing_what_ran(requirement: str, met_by_the_file: bool) -> bool:
    """Whether the file-wide verdict holds whichever of its kernels run: a kernel that is never
    launched must not earn a "some kernel has X" requirement, nor lose a "no kernel has X" one."""
    return met_by_the_file != (requirement in SOME_KERNEL_HAS)


def requirement_met(facts: CodeFacts, requirement: str) -> tuple[bool, str]:
    """Whether compiled code meets a named requirement, with the evidence in one line."""
    if requirement == "shared_memory":
        n = facts.count(*SHARED_OPS)
        return n > 0, f"{n} shared-memory instructions ({'/'.join(SHARED_OPS[:2])}) in the SASS"
    if requirement == "constant_memory":
        used = facts.constant_bytes > 0 and any(f.constant_bank3 for f in facts.functions)
        return used, f"{facts.constant_bytes} bytes of __constant__ data; kernels reading c[0x3]: " + (
            ", ".join(f.name for f in facts.functions if f.constant_bank3) or "none"
        )
    if requirement == "no_local_memory":
        n = facts.count(*LOCAL_OPS)
        return n == 0, f"{n} local-memory instructions (LDL/STL) in the SASS"
    if requirement == "global_atomics":
        n = facts.count(*GLOBAL_ATOMIC_OPS)
        return n > 0, f"{n} global atomic instructions (RED/ATOMG) in the SASS"
    if requirement == "atomics":
        g, sh = facts.count(*GLOBAL_ATOMIC_OPS), facts.count(*SHARED_ATOMIC_OPS)
        return g + sh > 0, f"{g} global (RED/ATOMG) and {sh} shared (ATOMS) atomic instructions in the SASS"
    if requirement == "shared_atomics":
        n = facts.count(*SHARED_ATOMIC_OPS)
        return n > 0, f"{n} shared-memory atomic instructions (ATOMS) in the SASS"
    raise ValueError(f"unknown static requirement {requirement!r}")


def static_checks(spec: LabSpec, library: Path, kernels: tuple[KernelResources, ...] = (),
                   launched: set[str] | None = None) -> list[CheckResult]:
    """The compiled-code checks; with ``launched``, only kernels that ran are judged (a kernel the
    file defines but never launches earns nothing)."""
    if not spec.static:
        return []
    try:
        facts = inspect(library)
    except SassUnavailable as exc:
        return [CheckResult(c.id, Stage.STATIC, Outcome.SKIPPED, 0, c.points, str(exc)) for c in spec.static]
    scope = ""
    if launched is not None:
        unused = {k.name for k in kernels} - launched
        facts = facts.without(unused)
        scope = f" (judged on the kernels that ran: {', '.join(sorted(launched)) or 'none'})"
    unsure = launched is None and len(kernels) > 1  # which of several kernels run is not known yet
    out = []
    for c in spec.static:
        ok, evidence = requirement_met(facts, c.require)
        if unsure and not settled_without_knowing_what_ran(c.require, ok):
            out.append(CheckResult(c.id, Stage.STATIC, Outcome.SKIPPED, 0, c.points,
                                   f"{evidence}; your file defines {len(kernels)} kernels, and only those that run "
                                   "count: which ones do is recorded by Nsight Compute on a GPU"))
            continue
        evidence += scope
        message = evidence if ok else f"{evidence}. {c.hint}".strip()
        out.append(
            CheckResult(c.id, Stage.STATIC, Outcome.PASS if ok else Outcome.FAIL, c.points if ok else 0, c.points, message)
        )
    return out
