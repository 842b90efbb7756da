"""Buffers the trusted worker owns and the student's worker only maps (see ``shared``).

The trusted side (:class:`Owned`) allocates a call's arrays, fills them, exports them and, after
the student's call, reads the outputs, the guard words and the inputs from its own mapping. The
student's side (:class:`Mapped`) maps what it is sent and hands the addresses to the launcher;
it reports nothing about them.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import Any, BinaryIO, Callable

import numpy as np

from . import shared
from .buffers import Buffers, Slot, address, layout
from .protocol import LauncherSpec, SharedBuffer

#: The Unix socket the grader passes shared buffers over (``GRADER_SHARE_FD``).
_SOCKET: list[socket.socket] = []


def share_socket() -> socket.socket:
    if not _SOCKET:
        fd = os.environ.get("GRADER_SHARE_FD", "")
        if not fd.isdigit():
            raise shared.SharingError("this worker was started without a socket for shared buffers")
        _SOCKET.append(socket.socket(fileno=int(fd)))
    return _SOCKET[0]


def write_new(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> None:
    """A file the parent reads (outputs, a result), written under a fresh name created exclusively
    and renamed into place: a link planted at its name is replaced, never written through (as the
    grader's ``safeio.replacing``: the worker imports nothing else of the grader)."""
    tmp = f"{os.fspath(path)}.{secrets.token_hex(6)}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def save_array(path: str | os.PathLike[str], value: np.ndarray) -> None:
    """``np.save`` through :func:`write_new`."""
    write_new(path, lambda fh: np.save(fh, value))


class Owned:
    """The memory of one call's buffers, allocated to be shared; an ``allocate`` for Buffers."""

    def __init__(self, cp: Any):
        self.cp = cp
        self.device = int(cp.cuda.Device().id)
        self.mappings: list[shared.DeviceMapping | shared.HostMapping] = []
        self.described: list[SharedBuffer] = []

    def allocate(self, slot: Slot) -> Any:
        cp = self.cp
        if slot.host:
            hm = shared.allocate_host(slot.total_bytes)
            raw: Any = np.frombuffer(hm.view, dtype=np.uint8, count=slot.total_bytes)
            mapping: shared.DeviceMapping | shared.HostMapping = hm
            size = len(hm.view)
        else:
            # a mapping of its own, zeroed: what lies past a buffer (and its guard words) is the
            # same on every run: stray reads find zeros and stray writes land there, never in a
            # neighbour, as they could in a memory pool
            dm = shared.allocate(max(1, slot.total_bytes), self.device)
            cp.cuda.runtime.memset(dm.ptr, 0, dm.size)
            memory = cp.cuda.UnownedMemory(dm.ptr, dm.size, dm)
            raw = cp.ndarray((slot.total_bytes,), cp.uint8, cp.cuda.MemoryPointer(memory, 0))
            mapping, size = dm, dm.size
        self.mappings.append(mapping)
        self.described.append(SharedBuffer(name=slot.name, size=size, host=slot.host))
        return raw

    def fds(self) -> list[int]:
        return [m.fd for m in self.mappings]

    def release(self) -> None:
        for m in self.mappings:
            m.release()
        self.mappings = []


class OwnedCall:
    """A call's buffers owned here, shared with a student's worker, read back after its calls."""

    def __init__(self, cp: Any, launcher: LauncherSpec, params: dict[str, Any], inputs: dict[str, np.ndarray], guard: int):
        self.owned = Owned(cp)
        try:
            self.bufs = Buffers(cp, launcher, params, inputs, guard, allocate=self.owned.allocate)
            cp.cuda.Device().synchronize()
        except BaseException:
            self.owned.release()
            raise
        self.id = secrets.token_hex(8)

    def read(self, out_dir: str) -> dict[str, Any]:
        """The outputs saved to ``out_dir`` and what the call did outside them: the reply's fields."""
        self.bufs.cp.cuda.Device().synchronize()
        outputs = {}
        for name, value in self.bufs.outputs.items():
            outputs[name] = f"{name}.npy"
            save_array(os.path.join(out_dir, outputs[name]), value.get())
        return {"outputs": outputs, "guard_violations": self.bufs.guard_violations(), "inputs_modified": self.bufs.modified_inputs()}

    def release(self) -> None:
        self.bufs.cp.cuda.Device().synchronize()
        del self.bufs
        self.owned.release()


class Mapped:
    """The student's side: the buffers another process shared, mapped here."""

    def __init__(self, tag: str, buffers: list[SharedBuffer], device: int):
        fds = shared.receive_fds(share_socket(), tag, len(buffers))
        self.mappings: list[shared.DeviceMapping | shared.HostMapping] = []
        try:
            for i, b in enumerate(buffers):
                fd, fds[i] = fds[i], -1
                self.mappings.append(shared.import_host(fd, b["size"]) if b["host"] else shared.import_device(fd, b["size"], device))
        except BaseException:
            for fd in fds:
                if fd >= 0:
                    os.close(fd)
            self.release()
            raise
        self.names = [b["name"] for b in buffers]

    def args(self, launcher: LauncherSpec, params: dict[str, Any], guard: int) -> list[Any]:
        """The launcher's arguments: its scalars, and the mapped buffers' addresses."""
        bases = dict(zip(self.names, (m.address if isinstance(m, shared.HostMapping) else m.ptr for m in self.mappings)))
        return [address(item, bases[item.name]) if isinstance(item, Slot) else item for item in layout(launcher, params, guard)]

    def release(self) -> None:
        for m in self.mappings:
            m.release()
        self.mappings = []


#: The calls this (trusted) worker shares, by id; the oldest are released past ``MAX_OWNED``.
_OWNED: dict[str, OwnedCall] = {}
MAX_OWNED = 32


def keep(call: OwnedCall) -> None:
    while len(_OWNED) >= MAX_OWNED:
        _OWNED.pop(next(iter(_OWNED))).release()
    _OWNED[call.id] = call


def find(share: str) -> OwnedCall:
    call = _OWNED.get(share)
    if call is None:
        raise KeyError(f"no shared buffers {share!r}")
    return call


def drop(share: str) -> None:
    call = _OWNED.pop(share, None)
    if call is not None:
        call.release()
