"""The record of one launcher call, as the student's worker hands it back: hostile input, parsed
into typed records here or refused.

While the grader asks for it, the support file compiled into every graded library
(``grader/cuda/support.cu``) writes one line of text per call the launcher makes to the CUDA
runtime; the worker replies ``{"text": TEXT or null, "arrays": {NAME: ADDRESS}}`` (the address each
array parameter of the launcher was given). The lines, fields separated by one space, numbers in
decimal, bytes in lowercase hex (``-`` for none):

    launch plain KERNEL GX GY GZ BX BY BZ SHARED STREAM SIZE:HEX ...   a kernel launch: its symbol,
                                   grid, block, dynamic shared bytes, stream (0 the default stream,
                                   1 another), then each parameter's bytes (``?`` where unknown)
    malloc ADDRESS SIZE            cudaMalloc; also memory allocated before the record (kept by the
                                   launcher between calls), right before the record's first use of it
    free ADDRESS                   cudaFree
    memset ADDRESS VALUE SIZE STREAM
    copy KIND DST SRC SIZE STREAM HEX|-        cudaMemcpy(Async); KIND h2d, d2h, d2d or h2h; the
                                   host bytes copied from, up to 4 KiB (``-`` beyond, or from device)
    symbol NAME OFFSET SIZE KIND SRC STREAM HEX|-   cudaMemcpyToSymbol(Async) into the device
                                   variable NAME (``?`` where unregistered), KIND h2d or d2d
    unsupported WHAT               a call the replayer cannot repeat (a graph, managed memory, ...)

The worker is the student's once their library is loaded, so the text may be anything. A record of
the wrong shape is refused with :class:`MalformedRecord` (the case then goes to the profiler); a
well-formed one that names something the replayer cannot repeat carries the reasons in
``CallRecord.unsupported``. Nothing here makes a verdict: what a record claims is only believed
once its replay computes the case's right answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection, Mapping, Union

#: The support file's record buffer (``g_rec``), and so the longest text a record may have.
TEXT_LIMIT = 1 << 18
MAX_OPS = 4096
#: The most parameter bytes one launch records (``REC_PARAM_BYTES``), and host bytes one copy does.
MAX_PARAM_BYTES = 4096
MAX_DATA_BYTES = 4096
MAX_PARAMS = 256
MAX_NAME = 1024
MAX_SHARED_BYTES = 1 << 20
MAX_SIZE = 1 << 40
ADDRESS_END = 1 << 64
NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.]{0,%d}" % (MAX_NAME - 1))
HEX = re.compile(r"(?:[0-9a-f]{2})+")

#: What an ``unsupported`` line names, as said in the report.
UNSUPPORTED = {
    "cooperative-launch": "a cooperative launch",
    "launch-with-attributes": "a launch with attributes (cudaLaunchKernelEx)",
    "graph": "a CUDA graph",
    "managed-memory": "managed memory (cudaMallocManaged)",
    "stream-ordered-allocation": "stream-ordered allocation (cudaMallocAsync)",
    "driver-api": "a call through the driver API (cudaGetDriverEntryPoint)",
}
NON_DEFAULT_STREAM = "work on a stream other than the default stream"
NAMELESS = "a kernel or device variable the runtime gave no name"
TOO_LONG = "a record longer than the support file keeps"


class MalformedRecord(ValueError):
    """A record that is not what the support file writes: the reason, in one line."""


@dataclass(frozen=True)
class LaunchRecord:
    kernel: str  # the kernel's symbol (mangled) name
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    params: tuple[bytes, ...]  # each parameter's bytes, in order


@dataclass(frozen=True)
class AllocRecord:
    address: int
    size: int


@dataclass(frozen=True)
class FreeRecord:
    address: int


@dataclass(frozen=True)
class MemsetRecord:
    address: int
    value: int
    size: int


@dataclass(frozen=True)
class CopyRecord:
    kind: str  # h2d, d2h, d2d or h2h
    dst: int
    src: int
    size: int
    data: bytes | None  # the host bytes copied (None: from the device, or too many to record)


@dataclass(frozen=True)
class SymbolRecord:
    name: str  # the device variable's symbol
    offset: int
    size: int
    from_device: bool
    src: int
    data: bytes | None


Op = Union[LaunchRecord, AllocRecord, FreeRecord, MemsetRecord, CopyRecord, SymbolRecord]


@dataclass(frozen=True)
class CallRecord:
    """One launcher call as recorded: its operations in order, the address each array parameter
    was given, and why it cannot be replayed (empty where it can)."""

    ops: tuple[Op, ...]
    arrays: Mapping[str, int]
    unsupported: tuple[str, ...] = ()

    @property
    def launches(self) -> tuple[LaunchRecord, ...]:
        return tuple(op for op in self.ops if isinstance(op, LaunchRecord))


def parse(value: object, arrays: Collection[str]) -> CallRecord:
    """The record a worker replied (``value``) for a launcher whose array parameters are ``arrays``."""
    if not isinstance(value, dict) or set(value) != {"text", "arrays"}:
        raise MalformedRecord("not an object of exactly text and arrays")
    addresses = _arrays(value["arrays"], frozenset(arrays))
    text = value["text"]
    if text is None:
        return CallRecord((), addresses, (TOO_LONG,))
    if not isinstance(text, str) or len(text) > TEXT_LIMIT or not text.isascii():
        raise MalformedRecord(f"the text is not ASCII of at most {TEXT_LIMIT} characters")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_OPS:
        raise MalformedRecord(f"more than {MAX_OPS} lines")
    ops: list[Op] = []
    unsupported: list[str] = []
    for number, line in enumerate(lines, 1):
        try:
            op, why = _line(line.split(" "))
        except (ValueError, IndexError) as exc:
            raise MalformedRecord(f"line {number}: {exc or 'too few fields'}: {_short(line)}") from None
        if op is not None:
            ops.append(op)
        if why and why not in unsupported:
            unsupported.append(why)
    return CallRecord(tuple(ops), addresses, tuple(unsupported))


def _arrays(value: object, names: frozenset[str]) -> dict[str, int]:
    if not isinstance(value, dict) or set(value) != names:
        raise MalformedRecord(f"arrays does not name exactly {', '.join(sorted(names)) or 'nothing'}")
    for name, address in value.items():
        _number(address, ADDRESS_END, f"the address of {name}")
    return dict(value)


def _line(f: list[str]) -> tuple[Op | None, str]:
    """One line's operation (None for an ``unsupported`` line) and why it cannot be replayed ("")."""
    what = f[0]
    if what == "launch":
        return _launch(f)
    if what == "malloc":
        _fields(f, 3)
        return AllocRecord(_int(f[1], ADDRESS_END), _int(f[2], MAX_SIZE)), ""
    if what == "free":
        _fields(f, 2)
        return FreeRecord(_int(f[1], ADDRESS_END)), ""
    if what == "memset":
        _fields(f, 5)
        return MemsetRecord(_int(f[1], ADDRESS_END), _int(f[2], 256), _int(f[3], MAX_SIZE)), _stream(f[4])
    if what == "copy":
        _fields(f, 7)
        if f[1] not in ("h2d", "d2h", "d2d", "h2h"):
            raise ValueError("an unknown kind of copy")
        size = _int(f[4], MAX_SIZE)
        return CopyRecord(f[1], _int(f[2], ADDRESS_END), _int(f[3], ADDRESS_END), size, _data(f[6], size)), _stream(f[5])
    if what == "symbol":
        _fields(f, 8)
        if f[4] not in ("h2d", "d2d"):
            raise ValueError("an unknown kind of copy")
        size = _int(f[3], MAX_SIZE)
        data = _data(f[7], size)
        if f[4] == "d2d" and data is not None:
            raise ValueError("host bytes for a copy from the device")
        op = SymbolRecord(_name(f[1]), _int(f[2], MAX_SIZE), size, f[4] == "d2d", _int(f[5], ADDRESS_END), data)
        return op, _stream(f[6]) or (NAMELESS if op.name == "?" else "")
    if what == "unsupported":
        _fields(f, 2)
        if f[1] not in UNSUPPORTED:
            raise ValueError("an unknown call")
        return None, UNSUPPORTED[f[1]]
    raise ValueError("an unknown operation")


def _launch(f: list[str]) -> tuple[LaunchRecord, str]:
    if len(f) < 11 or f[1] != "plain":
        raise ValueError("not a launch the support file writes")
    grid = (_int(f[3], 1 << 31), _int(f[4], 1 << 16), _int(f[5], 1 << 16))
    block = (_int(f[6], 1025), _int(f[7], 1025), _int(f[8], 65))
    shared = _int(f[9], MAX_SHARED_BYTES + 1)
    why = _stream(f[10])
    if min(*grid, *block) < 1 or block[0] * block[1] * block[2] > 1024:
        why = why or "an invalid launch configuration"
    if len(f) - 11 > MAX_PARAMS:
        raise ValueError(f"more than {MAX_PARAMS} parameters")
    params: list[bytes] = []
    for field in f[11:]:
        if field == "?":  # (the support file stops at a parameter it could not read)
            why = why or "launch parameters the runtime would not describe"
            break
        size_text, _, hex_text = field.partition(":")
        size = _int(size_text, MAX_PARAM_BYTES + 1)
        data = _data(hex_text, size)
        if size < 1 or data is None:
            raise ValueError("a parameter of no bytes")
        params.append(data)
    if sum(len(p) for p in params) > MAX_PARAM_BYTES:
        raise ValueError(f"more than {MAX_PARAM_BYTES} bytes of parameters")
    name = _name(f[2])
    if name == "?":
        why = why or NAMELESS
    return LaunchRecord(name, grid, block, shared, tuple(params)), why


def _fields(f: list[str], count: int) -> None:
    if len(f) != count:
        raise ValueError(f"{len(f)} fields, not {count}")


def _int(text: str, end: int) -> int:
    """A decimal count below ``end``, written as the support file writes one (no sign, no padding)."""
    if not text.isdigit() or not text.isascii() or (len(text) > 1 and text[0] == "0") or len(text) > 20:
        raise ValueError(f"not a count: {_short(text)}")
    return _number(int(text), end, "a count")


def _number(value: object, end: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < end:
        raise MalformedRecord(f"{what} is not a whole number from 0 below {end}: {_short(repr(value))}")
    return value


def _stream(text: str) -> str:
    if text not in ("0", "1"):
        raise ValueError("a stream that is neither 0 nor 1")
    return NON_DEFAULT_STREAM if text == "1" else ""


def _data(text: str, size: int) -> bytes | None:
    if text == "-":
        return None
    if len(text) != 2 * size or size > max(MAX_DATA_BYTES, MAX_PARAM_BYTES) or not HEX.fullmatch(text):
        raise ValueError("bytes that are not the size's worth of hex")
    return bytes.fromhex(text)


def _name(text: str) -> str:
    if text != "?" and not NAME.fullmatch(text):
        raise ValueError("not a symbol name")
    return text


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."
