"""The student's shared object and the device buffers of one call."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import expr
from .protocol import LauncherSpec

CANARY = 0xA5
RESULT_FD = int(os.environ.get("GRADER_RESULT_FD", "-1"))  # where exit() and crashes are reported
CTYPES = {"int": ctypes.c_int, "long long": ctypes.c_longlong, "float": ctypes.c_float}
#: The support file's record buffer (``g_rec`` in grader/cuda/support.cu).
RECORD_LIMIT_BYTES = 1 << 18


class StudentCudaError(Exception):
    def __init__(self, message: str, sticky: bool):
        super().__init__(message)
        self.sticky = sticky


class Library:
    """A graded shared object: the launcher plus the grader's support functions."""

    def __init__(self, path: str, launcher: LauncherSpec):
        self.path = path
        self.lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.launcher = getattr(self.lib, launcher["name"])
        self.launcher.restype = None
        self.launcher.argtypes = [
            CTYPES[a["ctype"]] if a["role"] == "scalar" else ctypes.c_void_p for a in launcher["args"]
        ]
        self._status = self.lib.cudalab_grader_status
        self._status.restype = ctypes.c_int
        self._status.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.reset_l2 = self.lib.cudalab_grader_reset_l2
        self.reset_l2.restype = ctypes.c_int
        self._arm = self.lib.cudalab_grader_arm
        self._arm.argtypes = [ctypes.c_int]
        self._disarm = self.lib.cudalab_grader_disarm
        self._launched = self.lib.cudalab_grader_launched
        self._launched.restype = ctypes.c_int
        self._launched.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        self._record = self.lib.cudalab_grader_record
        self._record.restype = None
        self._record.argtypes = [ctypes.c_int]
        self._recorded = self.lib.cudalab_grader_recorded
        self._recorded.restype = ctypes.c_long
        self._recorded.argtypes = [ctypes.c_char_p, ctypes.c_long]
        self.fill_shared = self.lib.cudalab_grader_fill_shared
        self.fill_shared.restype = ctypes.c_int
        self.fill_shared.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint]
        self.check_shared = self.lib.cudalab_grader_check_shared
        self.check_shared.restype = ctypes.c_int
        self.check_shared.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
        self.shared_checks = self.lib.cudalab_grader_shared_checks
        self.shared_checks.restype = ctypes.c_uint
        self.shared_checks.argtypes = []

    def launched(self, reset: bool = False) -> list[str] | None:
        """Names of the kernels launched since the last reset (None if some had no name)."""
        buf = ctypes.create_string_buffer(1 << 16)
        unnamed = self._launched(buf, len(buf), int(reset))
        if unnamed:
            return None
        return [n for n in buf.value.decode(errors="replace").split("\n") if n]

    def record(self, on: bool) -> None:
        """Start (clearing it) or stop the support file's record of the calls the launcher makes."""
        self._record(int(on))

    def recorded(self) -> str | None:
        """The record's text, or None where it outgrew the support file's buffer."""
        buf = ctypes.create_string_buffer(RECORD_LIMIT_BYTES)
        length = self._recorded(buf, len(buf))
        return None if length < 0 or length >= len(buf) else buf.value.decode("ascii", errors="replace")

    def call(self, args: list[Any]) -> None:
        """Run the launcher; exit() or a crash inside it is reported on the result fd at once."""
        self._arm(RESULT_FD)
        try:
            self.launcher(*args)
        finally:
            self._disarm()

    def check(self) -> None:
        """Raise StudentCudaError if the launch failed or a kernel faulted (synchronizes)."""
        buf = ctypes.create_string_buffer(512)
        code = self._status(buf, len(buf))
        if code != 0:
            message = buf.value.decode(errors="replace") or f"CUDA error {code}"
            sticky = self._status(None, 0) != 0  # still failing: the context is unusable
            raise StudentCudaError(message, sticky)


_LIBS: dict[str, Library] = {}


def library(path: str, launcher: LauncherSpec) -> Library:
    key = f"{path}:{launcher['name']}"
    if key not in _LIBS:
        _LIBS[key] = Library(path, launcher)
    return _LIBS[key]


@dataclass(frozen=True)
class Slot:
    """One array parameter of the launcher as laid out in memory: its body, with ``guard_bytes``
    of canary before and after it (outputs only)."""

    name: str
    role: str  # input or output
    dtype: np.dtype
    shape: tuple[int, ...]
    host: bool
    fill: Any  # what an output's body holds before the call
    guard_bytes: int

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    @property
    def body_bytes(self) -> int:
        return self.elements * self.dtype.itemsize

    @property
    def total_bytes(self) -> int:
        return self.body_bytes + 2 * self.guard_bytes


def layout(launcher: LauncherSpec, params: dict[str, Any], guard: int) -> list[Slot | Any]:
    """The launcher's parameters in order: a :class:`Slot` per array, a ctypes value per scalar."""
    out: list[Slot | Any] = []
    for a in launcher["args"]:
        if a["role"] == "scalar":
            out.append(CTYPES[a["ctype"]](expr.evaluate(a["value"], params)))  # type: ignore[arg-type]
            continue
        dtype = np.dtype(a["dtype"])
        shape = tuple(int(expr.evaluate(s, params)) for s in a["shape"])
        fill: Any = 0
        if a["role"] == "output" and a.get("init", "nan") == "nan":
            fill = np.nan if dtype.kind == "f" else np.iinfo(dtype).max
        out.append(Slot(a["name"], a["role"], dtype, shape, bool(a.get("host")), fill,
                        guard * dtype.itemsize if a["role"] == "output" else 0))
    return out


#: Distinct values in inputs the worker fills itself; larger inputs repeat them.
FILL_BLOCK = 1 << 16


def filled_inputs(launcher: LauncherSpec, params: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Arbitrary inputs for a case whose figure does not depend on their values (a profiled run
    of a large case): a seeded block of small floats repeated, made in a fraction of the time a
    generator and an input file take. Integer inputs are zeros: were they indices, every one is
    in bounds."""
    rng = np.random.default_rng(seed)
    out = {}
    for slot in layout(launcher, params, 0):
        if isinstance(slot, Slot) and slot.role == "input":
            if slot.dtype.kind != "f":  # (np.resize of one element joins one array per element: 24 s for 100 M)
                out[slot.name] = np.zeros(slot.shape, slot.dtype)
                continue
            block = rng.integers(0, 100, size=min(slot.elements, FILL_BLOCK)).astype(slot.dtype)
            out[slot.name] = np.resize(block, slot.elements).reshape(slot.shape)
    return out


def array_addresses(launcher: LauncherSpec, args: list[Any]) -> dict[str, int]:
    """The address each array parameter of the launcher was given (``args`` in launcher order)."""
    return {a["name"]: int(v) for a, v in zip(launcher["args"], args) if a["role"] != "scalar"}


def address(slot: Slot, base: int) -> int:
    """What the launcher gets for ``slot`` held at ``base``: NULL for an empty input."""
    if slot.role == "input" and slot.body_bytes == 0:
        return 0
    return base + slot.guard_bytes


#: How a Buffers gets memory: slot -> a flat uint8 array (numpy for a host slot, CuPy otherwise).
Allocator = Callable[[Slot], Any]


class Buffers:
    """Device buffers for one call, in launcher order, with canary guards around outputs.

    ``allocate`` gives each array its memory (by default CuPy's pool and numpy, each device array
    ``pad`` bytes longer than it); the trusted worker passes one whose memory it can share with the
    student's worker (``owned``)."""

    def __init__(self, cp: Any, launcher: LauncherSpec, params: dict[str, Any], inputs: dict[str, np.ndarray], guard: int,
                 memcpy_only: bool = False, allocate: Allocator | None = None, pad: int = 0):
        self.cp = cp
        self.pad = max(0, pad)
        self.args: list[Any] = []  # ctypes scalars and device pointers, in launcher order
        self.inputs: dict[str, Any] = {}  # device arrays (numpy ones for host inputs)
        self.host_inputs: dict[str, np.ndarray] = {}
        self.outputs: dict[str, Any] = {}  # the body of each output buffer
        self.raw: dict[str, Any] = {}  # each output with its guards
        self.slots: list[Slot] = []
        self.launcher = launcher
        self.memcpy_only = memcpy_only
        allocate = allocate or self._allocate
        for item in layout(launcher, params, guard):
            if not isinstance(item, Slot):
                self.args.append(item)
                continue
            slot = item
            self.slots.append(slot)
            raw = allocate(slot)
            if slot.role == "input":
                host = np.ascontiguousarray(inputs[slot.name], dtype=slot.dtype).reshape(slot.shape)
                self.host_inputs[slot.name] = host
                view = raw[: slot.body_bytes].view(slot.dtype).reshape(slot.shape)
                self.inputs[slot.name] = view
                self._put(view, host)
                self.args.append(address(slot, self._pointer(raw)))
                continue
            body = raw[slot.guard_bytes : slot.guard_bytes + slot.body_bytes].view(slot.dtype).reshape(slot.shape)
            self.raw[slot.name], self.outputs[slot.name] = raw, body
            self.arm(slot.name)
            self.args.append(address(slot, self._pointer(raw)))

    def _allocate(self, slot: Slot) -> Any:
        if slot.host:
            return np.empty(slot.total_bytes, dtype=np.uint8)
        if self.memcpy_only and slot.role == "output":  # no CuPy kernels: only student kernels get profiled
            return self.cp.asarray(np.empty(slot.total_bytes + self.pad, dtype=np.uint8))
        return self.cp.empty(slot.total_bytes + self.pad, dtype=self.cp.uint8)

    @staticmethod
    def _pointer(raw: Any) -> int:
        if isinstance(raw, np.ndarray):
            return int(raw.ctypes.data)
        return int(raw.data.ptr) if raw.size else 0

    def arm(self, name: str) -> None:
        """Canary guards around output ``name`` and its fill value in the body."""
        slot = next(s for s in self.slots if s.name == name)
        raw = self.raw[name]
        if self.memcpy_only:  # filled on the host and copied: no CuPy kernel
            host = np.full(slot.total_bytes, CANARY, dtype=np.uint8)
            host[slot.guard_bytes : slot.guard_bytes + slot.body_bytes].view(slot.dtype)[:] = slot.fill
            raw[: slot.total_bytes].set(host)  # (the pad after it, if any, is never read)
            return
        raw.fill(CANARY)
        self.outputs[name].fill(slot.fill)

    def rearm(self) -> None:
        """Outputs and guards as before the first call, inputs as generated: ready for another call."""
        for name in self.raw:
            self.arm(name)
        for name, value in self.inputs.items():
            self._put(value, self.host_inputs[name])

    @staticmethod
    def _put(target: Any, host: np.ndarray) -> None:
        """Copy ``host`` into ``target`` (a copy, never a CuPy kernel)."""
        if isinstance(target, np.ndarray):
            target[...] = host
        elif host.size:
            target.set(host)

    def guard_violations(self) -> dict[str, list[int]]:
        bad = {}
        for slot in self.slots:
            gb = slot.guard_bytes
            if slot.role != "output" or gb == 0:
                continue
            host = self.raw[slot.name][: slot.total_bytes].get()
            before = int(np.count_nonzero(host[:gb] != CANARY))
            after = int(np.count_nonzero(host[len(host) - gb :] != CANARY))
            if before or after:
                bad[slot.name] = [before, after]
        return bad

    def modified_inputs(self) -> list[str]:
        changed = []
        for name, value in self.inputs.items():
            now = value if isinstance(value, np.ndarray) else value.get()
            if not np.array_equal(now, self.host_inputs[name], equal_nan=True):
                changed.append(name)
        return changed
