"""The student's shared object and the device buffers of one call."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from . import expr
from .protocol import LauncherSpec

CANARY = 0xA5
RESULT_FD = int(os.environ.get("GRADER_RESULT_FD", "-1"))  # where exit() and crashes are reported
CTYPES = {"int": ctypes.c_int, "long long": ctypes.c_longlong, "float": ctypes.c_float}


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

    def launched(self, reset: bool = False) -> list[str] | None:
        """Names of the kernels launched since the last reset (None if some had no name)."""
        buf = ctypes.create_string_buffer(1 << 16)
        unnamed = self._launched(buf, len(buf), int(reset))
        if unnamed:
            return None
        return [n for n in buf.value.decode(errors="replace").split("\n") if n]

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


class Buffers:
    """Device buffers for one call, in launcher order, with canary guards around outputs."""

    def __init__(self, cp: Any, launcher: LauncherSpec, params: dict[str, Any], inputs: dict[str, np.ndarray], guard: int,
                 memcpy_only: bool = False):
        self.cp = cp
        self.args: list[Any] = []  # ctypes scalars and device pointers, in launcher order
        self.inputs: dict[str, Any] = {}  # device arrays (numpy ones for host inputs)
        self.host_inputs: dict[str, np.ndarray] = {}
        self.outputs: dict[str, Any] = {}  # the body of each output buffer
        self.raw: dict[str, Any] = {}  # each output with its guards
        self.guard_bytes: dict[str, int] = {}
        self.launcher = launcher
        for a in launcher["args"]:
            name = a["name"]
            if a["role"] == "scalar":
                self.args.append(CTYPES[a["ctype"]](expr.evaluate(a["value"], params)))  # type: ignore[arg-type]
                continue
            shape = tuple(int(expr.evaluate(s, params)) for s in a["shape"])
            dtype = np.dtype(a["dtype"])
            if a["role"] == "input":
                host = np.ascontiguousarray(inputs[name], dtype=dtype).reshape(shape)
                self.host_inputs[name] = host
                if a.get("host"):
                    self.inputs[name] = host.copy()
                    self.args.append(self.inputs[name].ctypes.data)
                else:
                    dev = cp.asarray(host)
                    self.inputs[name] = dev
                    self.args.append(dev.data.ptr if dev.size else 0)
                continue
            n = int(np.prod(shape)) if shape else 1
            fill = np.nan if a.get("init", "nan") == "nan" and dtype.kind == "f" else 0
            if a.get("init", "nan") == "nan" and dtype.kind != "f":
                fill = np.iinfo(dtype).max
            gb = guard * dtype.itemsize
            if memcpy_only:  # no CuPy kernels at all, so that only student kernels get profiled
                host_raw = np.full(n * dtype.itemsize + 2 * gb, CANARY, dtype=np.uint8)
                host_raw[gb : gb + n * dtype.itemsize].view(dtype)[:] = fill
                raw = cp.asarray(host_raw)
            else:
                raw = cp.empty(n * dtype.itemsize + 2 * gb, dtype=cp.uint8)
                raw.fill(CANARY)
                raw[gb : gb + n * dtype.itemsize].view(dtype).fill(fill)
            body = raw[gb : gb + n * dtype.itemsize].view(dtype).reshape(shape)
            self.raw[name], self.guard_bytes[name], self.outputs[name] = raw, gb, body
            self.args.append(raw.data.ptr + gb if raw.size else 0)

    def guard_violations(self) -> dict[str, list[int]]:
        bad = {}
        for name, raw in self.raw.items():
            gb = self.guard_bytes[name]
            if gb == 0:
                continue
            host = raw.get()
            before = int(np.count_nonzero(host[:gb] != CANARY))
            after = int(np.count_nonzero(host[len(host) - gb :] != CANARY))
            if before or after:
                bad[name] = [before, after]
        return bad

    def modified_inputs(self) -> list[str]:
        changed = []
        for name, value in self.inputs.items():
            now = value if isinstance(value, np.ndarray) else value.get()
            if not np.array_equal(now, self.host_inputs[name], equal_nan=True):
                changed.append(name)
        return changed
