"""Buffers one process owns and another maps: how a trusted process reads what student code left.

The trusted worker allocates a case's device buffers with CUDA's virtual memory management
(``cuMemCreate``), exportable as POSIX file descriptors, and its host buffers as memfds; the
descriptors cross to the student's worker over a Unix socket (``SCM_RIGHTS``), which maps the same
memory and hands its addresses to the launcher. After the call the trusted worker reads the
outputs, the guard words and the inputs from its own mapping: no reply of the student's worker
carries them. A legacy CUDA IPC handle would not do: it is tied to the exporter's process id,
which the sandbox's own PID namespace hides.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
from dataclasses import dataclass, field
from typing import Any

#: CUmemAllocationType, CUmemAllocationHandleType, CUmemLocationType and CUmemAccess_flags values.
_PINNED, _POSIX_FD, _ON_DEVICE, _READ_WRITE = 1, 1, 1, 3
#: The most descriptors one message may carry (a launcher has a handful of buffers).
MAX_FDS = 16


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class SharingError(Exception):
    """A driver call of the sharing failed (its name and CUresult in the message)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.out_of_memory = code == 2  # CUDA_ERROR_OUT_OF_MEMORY


_U64 = ctypes.c_uint64
_SIGNATURES: dict[str, list[Any]] = {
    "cuMemGetAllocationGranularity": [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_AllocationProp), ctypes.c_int],
    "cuMemCreate": [ctypes.POINTER(_U64), ctypes.c_size_t, ctypes.POINTER(_AllocationProp), _U64],
    "cuMemExportToShareableHandle": [ctypes.c_void_p, _U64, ctypes.c_int, _U64],
    "cuMemImportFromShareableHandle": [ctypes.POINTER(_U64), ctypes.c_void_p, ctypes.c_int],
    "cuMemAddressReserve": [ctypes.POINTER(_U64), ctypes.c_size_t, ctypes.c_size_t, _U64, _U64],
    "cuMemMap": [_U64, ctypes.c_size_t, ctypes.c_size_t, _U64, _U64],
    "cuMemSetAccess": [_U64, ctypes.c_size_t, ctypes.POINTER(_AccessDesc), ctypes.c_size_t],
    "cuMemUnmap": [_U64, ctypes.c_size_t],
    "cuMemAddressFree": [_U64, ctypes.c_size_t],
    "cuMemRelease": [_U64],
}
_DRIVER: dict[str, Any] = {}


def _call(name: str, *args: Any) -> None:
    if not _DRIVER:
        lib = ctypes.CDLL("libcuda.so.1")
        for fn, argtypes in _SIGNATURES.items():
            func = getattr(lib, fn)
            func.argtypes, func.restype = argtypes, ctypes.c_int
            _DRIVER[fn] = func
    code = _DRIVER[name](*args)
    if code != 0:
        raise SharingError(f"{name} failed (CUresult {code})", code)


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
    prop.location.type, prop.location.id = _ON_DEVICE, device
    return prop


def granularity(device: int) -> int:
    size = ctypes.c_size_t()
    _call("cuMemGetAllocationGranularity", ctypes.byref(size), ctypes.byref(_prop(device)), 0)
    return int(size.value)


def rounded(nbytes: int, device: int) -> int:
    """``nbytes`` (at least one) rounded up to the allocation granularity."""
    step = granularity(device)
    return max(step, -(-nbytes // step) * step)


@dataclass
class DeviceMapping:
    """Device memory mapped into this process: ``ptr`` is its address here, ``size`` its length."""

    ptr: int
    size: int
    handle: int
    fd: int = -1  # the exporter's descriptor (-1 in the importer, which closes it at once)

    def release(self) -> None:
        if self.ptr:
            for name, args in (("cuMemUnmap", (self.ptr, self.size)), ("cuMemAddressFree", (self.ptr, self.size)),
                               ("cuMemRelease", (self.handle,))):
                try:
                    _call(name, *args)
                except SharingError:
                    pass  # the context is gone or broken: the process is ending anyway
            self.ptr = 0
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _map(handle: int, size: int, device: int) -> int:
    ptr = _U64()
    _call("cuMemAddressReserve", ctypes.byref(ptr), size, 0, 0, 0)
    _call("cuMemMap", ptr.value, size, 0, handle, 0)
    access = _AccessDesc()
    access.location.type, access.location.id, access.flags = _ON_DEVICE, device, _READ_WRITE
    _call("cuMemSetAccess", ptr.value, size, ctypes.byref(access), 1)
    return int(ptr.value)


def allocate(nbytes: int, device: int) -> DeviceMapping:
    """Device memory of at least ``nbytes``, mapped here and exportable (``fd``)."""
    size = rounded(nbytes, device)
    handle = _U64()
    _call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(_prop(device)), 0)
    fd = ctypes.c_int(-1)
    try:
        _call("cuMemExportToShareableHandle", ctypes.byref(fd), handle.value, _POSIX_FD, 0)
        ptr = _map(handle.value, size, device)
    except SharingError:
        if fd.value >= 0:
            os.close(fd.value)
        _call("cuMemRelease", handle.value)
        raise
    return DeviceMapping(ptr, size, int(handle.value), fd.value)


def import_device(fd: int, size: int, device: int) -> DeviceMapping:
    """Map the device memory another process exported as ``fd`` (closed here), ``size`` bytes."""
    handle = _U64()
    try:
        _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
    finally:
        os.close(fd)
    try:
        ptr = _map(handle.value, size, device)
    except SharingError:
        _call("cuMemRelease", handle.value)
        raise
    return DeviceMapping(ptr, size, int(handle.value))


@dataclass
class HostMapping:
    """Host memory both processes map (a memfd): ``view`` is this process's, ``address`` its address."""

    view: mmap.mmap
    fd: int = -1
    _pin: Any = field(default=None, repr=False)

    @property
    def address(self) -> int:
        if self._pin is None:
            self._pin = ctypes.c_char.from_buffer(self.view)
        return ctypes.addressof(self._pin)

    def release(self) -> None:
        self._pin = None
        try:
            self.view.close()
        except BufferError:
            pass  # a view of it is still alive here; it goes with the process
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def allocate_host(nbytes: int) -> HostMapping:
    fd = os.memfd_create("grader-host-input", os.MFD_CLOEXEC)
    size = max(1, nbytes)
    os.ftruncate(fd, size)
    return HostMapping(mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE), fd)


def import_host(fd: int, size: int) -> HostMapping:
    """Map a host buffer another process shared as ``fd`` (closed here)."""
    try:
        if os.fstat(fd).st_size < max(1, size):
            raise SharingError("a shared host buffer is smaller than its task says")
        return HostMapping(mmap.mmap(fd, max(1, size), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE))
    finally:
        os.close(fd)


def send_fds(sock: socket.socket, tag: str, fds: list[int]) -> None:
    """Send ``fds`` with the message ``tag`` (one sendmsg: they arrive together or not at all)."""
    socket.send_fds(sock, [tag.encode()], fds)


def receive_fds(sock: socket.socket, tag: str, count: int) -> list[int]:
    """The ``count`` descriptors sent with ``tag``; anything else is refused (and closed)."""
    data, fds, _flags, _addr = socket.recv_fds(sock, 256, MAX_FDS)
    if data != tag.encode() or len(fds) != count or not 0 < count <= MAX_FDS:
        for fd in fds:
            os.close(fd)
        raise SharingError(f"expected {count} shared buffers tagged {tag!r}, got {len(fds)} tagged {data[:40]!r}")
    return list(fds)
