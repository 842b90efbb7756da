"""A recorded call turned into a replay on buffers of the grader's own: every address the record
holds is mapped onto a buffer (the launcher's arrays, the launcher's own allocations, host bytes
it copied), or the call is not replayed and says why.

The student's process claims addresses; the replayer has its own. An argument word that falls
inside a buffer the record knows (``base <= value < base + size``, or exactly its end) becomes that
buffer plus the offset; a word that looks like an address (from 2**32 up to 2**48: where device and
host memory live on a 64-bit host, above any count a lab passes) but falls in none makes the call
unreplayable, since a kernel would follow it into memory the replayer does not have. Smaller
words are values. Each launch is held against the cubin's own parameter layout (count and sizes)
and each device variable against its symbol table: a record that does not fit the compiled code
is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .cubin import Module
from .record import AllocRecord, CallRecord, CopyRecord, FreeRecord, LaunchRecord, MemsetRecord, SymbolRecord

#: Words from here up to ``POINTER_END`` are taken as addresses (see the module's docstring).
POINTER_START = 1 << 32
POINTER_END = 1 << 48
#: The most the launcher may allocate for itself (live at once) in a replayed call.
MAX_SCRATCH_BYTES = 16 << 30


@dataclass(frozen=True)
class ArraySlot:
    """One array parameter of the launcher as the case lays it out."""

    name: str
    size: int  # bytes
    role: str  # input or output
    host: bool
    fill: bytes = b""  # an output's bytes before the call, one element's worth repeated


@dataclass(frozen=True)
class Buffer:
    """A buffer of the replay: ``kind`` is ``input`` or ``output`` (a launcher array, ``name``),
    ``scratch`` (the launcher's own allocation) or ``data`` (host bytes the launcher copied from,
    ``data``)."""

    index: int
    size: int
    kind: str
    host: bool
    name: str = ""
    fill: bytes = b""
    data: bytes = b""


@dataclass(frozen=True)
class Alloc:
    buffer: int


@dataclass(frozen=True)
class Free:
    buffer: int


@dataclass(frozen=True)
class Memset:
    buffer: int
    offset: int
    value: int
    size: int


@dataclass(frozen=True)
class Copy:
    dst: int
    dst_offset: int
    src: int
    src_offset: int
    size: int


@dataclass(frozen=True)
class SymbolCopy:
    name: str
    offset: int
    src: int
    src_offset: int
    size: int


@dataclass(frozen=True)
class Patch:
    """Parameter ``param``'s bytes at ``at`` hold the address of ``buffer`` plus ``offset``."""

    param: int
    at: int
    buffer: int
    offset: int


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    params: tuple[bytes, ...]
    patches: tuple[Patch, ...]


Step = Union[Alloc, Free, Memset, Copy, SymbolCopy, Launch]


@dataclass(frozen=True)
class ReplayPlan:
    buffers: tuple[Buffer, ...]
    steps: tuple[Step, ...]

    @property
    def kernels(self) -> tuple[str, ...]:
        """The kernels launched, each once, in the order of their first launch."""
        return tuple(dict.fromkeys(s.kernel for s in self.steps if isinstance(s, Launch)))

    @property
    def launches(self) -> int:
        return sum(isinstance(s, Launch) for s in self.steps)


class Unreplayable(ValueError):
    """Why a recorded call cannot be replayed (one line, for the report)."""


@dataclass
class _Region:
    buffer: int
    base: int
    size: int
    host: bool
    live: bool = True


def find(value: int, regions: list[_Region]) -> tuple[_Region, int] | None:
    """The live region ``value`` points into (or exactly at the end of), with the offset."""
    inside = [r for r in regions if r.live and r.base <= value < r.base + r.size]
    if inside:
        return inside[0], value - inside[0].base
    at_end = [r for r in regions if r.live and r.size and value == r.base + r.size]
    return (at_end[0], at_end[0].size) if at_end else None


def looks_like_address(value: int) -> bool:
    return POINTER_START <= value < POINTER_END


def patches(params: tuple[bytes, ...], regions: list[_Region], kernel: str) -> tuple[Patch, ...]:
    """Each 8-byte word of the parameters that holds a buffer's address, as a patch; raises
    :class:`Unreplayable` for a word that looks like an address of no buffer, or of host memory."""
    out = []
    for index, data in enumerate(params):
        for at in range(0, len(data) - 7, 8):
            value = int.from_bytes(data[at:at + 8], "little")
            hit = find(value, regions)
            if hit is None:
                if looks_like_address(value):
                    raise Unreplayable(f"parameter {index + 1} of {kernel} holds an address of memory the grader cannot "
                                       "map (memory the launcher did not get or allocate, or freed)")
                continue
            region, offset = hit
            if region.host:
                raise Unreplayable(f"parameter {index + 1} of {kernel} points to host memory")
            out.append(Patch(index, at, region.buffer, offset))
    return tuple(out)


class _Planner:
    def __init__(self, record: CallRecord, arrays: tuple[ArraySlot, ...], module: Module) -> None:
        self.module = module
        self.buffers: list[Buffer] = []
        self.regions: list[_Region] = []
        self.steps: list[Step] = []
        self.scratch_live = 0
        for slot in arrays:
            address = record.arrays[slot.name]
            index = self._buffer(slot.size, slot.role, slot.host, name=slot.name, fill=slot.fill)
            if slot.size and address:
                self._region(index, address, slot.size, slot.host)

    def _buffer(self, size: int, kind: str, host: bool, name: str = "", fill: bytes = b"", data: bytes = b"") -> int:
        self.buffers.append(Buffer(len(self.buffers), size, kind, host, name, fill, data))
        return len(self.buffers) - 1

    def _region(self, index: int, base: int, size: int, host: bool) -> None:
        for r in self.regions:
            if r.live and r.host == host and r.base < base + size and base < r.base + r.size:
                raise Unreplayable("the recorded buffers overlap")
        self.regions.append(_Region(index, base, size, host))

    def _device(self, address: int, size: int, what: str) -> tuple[int, int]:
        """The device buffer and offset ``size`` bytes at ``address`` lie in."""
        hit = find(address, self.regions)
        if hit is None or hit[0].host or hit[1] + size > hit[0].size:
            raise Unreplayable(f"{what} device memory the grader cannot map")
        return hit[0].buffer, hit[1]

    def _host(self, address: int, size: int, data: bytes | None, what: str) -> tuple[int, int]:
        """Where host bytes a copy reads come from: a host array of the launcher, else the bytes recorded."""
        hit = find(address, self.regions)
        if hit is not None and hit[0].host and hit[1] + size <= hit[0].size:
            return hit[0].buffer, hit[1]
        if data is None:
            raise Unreplayable(f"{what} host memory the grader cannot map")
        return self._buffer(size, "data", True, data=data), 0

    def add(self, op: object) -> None:
        if isinstance(op, AllocRecord):
            self.scratch_live += op.size
            if self.scratch_live > MAX_SCRATCH_BYTES:
                raise Unreplayable(f"the launcher allocates more than {MAX_SCRATCH_BYTES >> 30} GiB")
            index = self._buffer(op.size, "scratch", False)
            self._region(index, op.address, max(op.size, 1), False)
            self.steps.append(Alloc(index))
        elif isinstance(op, FreeRecord):
            self._free(op.address)
        elif isinstance(op, MemsetRecord) and op.size:
            buffer, offset = self._device(op.address, op.size, "a memset of")
            self.steps.append(Memset(buffer, offset, op.value, op.size))
        elif isinstance(op, CopyRecord) and op.size and op.kind in ("h2d", "d2d"):  # (copies to the host change no device state)
            dst, dst_offset = self._device(op.dst, op.size, "a copy into")
            if op.kind == "d2d":
                src, src_offset = self._device(op.src, op.size, "a copy from")
            else:
                src, src_offset = self._host(op.src, op.size, op.data, "a copy from")
            self.steps.append(Copy(dst, dst_offset, src, src_offset, op.size))
        elif isinstance(op, SymbolRecord) and op.size:
            variable = self.module.variables.get(op.name)
            if variable is None or op.offset + op.size > variable.size:
                raise Unreplayable(f"a copy to a device variable the compiled code does not have ({op.name})")
            if op.from_device:
                src, src_offset = self._device(op.src, op.size, "a copy to a device variable from")
            else:
                src, src_offset = self._host(op.src, op.size, op.data, "a copy to a device variable from")
            self.steps.append(SymbolCopy(op.name, op.offset, src, src_offset, op.size))
        elif isinstance(op, LaunchRecord):
            self._launch(op)

    def _free(self, address: int) -> None:
        if address == 0:
            return
        hit = [r for r in self.regions if r.live and r.base == address and self.buffers[r.buffer].kind == "scratch"]
        if not hit:
            raise Unreplayable("the launcher frees memory it did not allocate")
        hit[0].live = False
        self.scratch_live -= self.buffers[hit[0].buffer].size
        self.steps.append(Free(hit[0].buffer))

    def _launch(self, op: LaunchRecord) -> None:
        kernel = self.module.kernels.get(op.kernel)
        if kernel is None:
            raise Unreplayable(f"the launcher ran {op.kernel}, which the compiled device code does not define")
        if tuple(len(p) for p in op.params) != kernel.params:
            raise Unreplayable(f"the recorded arguments of {op.kernel} do not fit its parameters")
        self.steps.append(Launch(op.kernel, op.grid, op.block, op.shared_bytes, op.params,
                                 patches(op.params, self.regions, op.kernel)))


def plan_call(record: CallRecord, arrays: tuple[ArraySlot, ...], module: Module) -> ReplayPlan:
    """The replay of ``record`` (a call of a launcher whose array parameters are ``arrays``) with
    the kernels of ``module``; raises :class:`Unreplayable` with the reason where there is none."""
    if record.unsupported:
        raise Unreplayable(f"the launcher uses {record.unsupported[0]}")
    if not record.launches:
        raise Unreplayable("the launcher ran no kernel")
    planner = _Planner(record, arrays, module)
    for op in record.ops:
        planner.add(op)
    return ReplayPlan(tuple(planner.buffers), tuple(planner.steps))
