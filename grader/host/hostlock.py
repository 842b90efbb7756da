"""Locks between grader processes on one host: one grading per GPU, one profiler per GPU.

Where the locks live:

- by default in a folder of the grader's user (``$XDG_CACHE_HOME/cuda-lab-grader/locks``,
  mode 0700), checked like every folder of host state (:mod:`grader.host.hostdirs`). Another user
  cannot plant a symbolic link there, nor hold the lock: graders of *different* users on one GPU
  therefore do not take turns through it;
- or, where several users grade on one machine and their timings must not overlap, in a folder an
  administrator made for them (``GRADER_LOCK_DIR``): owned by root or by the grader's user, and if
  others may write it, owned by root and sticky (like ``/tmp``). A lock file in it may be another
  user's (whoever's grader made it first): it is opened read-only with ``O_NOFOLLOW``, must be a
  regular file with one name, and is never written to or chmod-ed.

Locks in the user's own folder are taken with ``filelock`` (``O_NOFOLLOW``), each wait is bounded,
and the holder writes who it is beside the lock (``<lock>.<uid>.holder``: pid, user, what, since)
so that a waiter can say whom it waits for.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import filelock

from ..cachedirs import user_cache_dir
from ..errors import GraderError
from .hostdirs import HostStateError, check_private_dir, private_dir, user_name
from .safeio import kind_of

__all__ = ["LOCK_DIR_ENV", "Holder", "LockPlace", "LockTimeout", "hold", "holder_of", "lock_place", "open_lock_file"]

LOCK_DIR_ENV = "GRADER_LOCK_DIR"
#: How often a waiter says again whom it waits for.
NOTE_EVERY_S = 60.0
HOLDER_LIMIT_BYTES = 4096


class LockTimeout(GraderError, TimeoutError):
    """A lock another grader held for longer than the wait allowed."""


@dataclass(frozen=True)
class LockPlace:
    """The folder a GPU's locks live in, and the GPU's key that names them."""

    folder: Path
    key: str = ""
    shared: bool = False  # an administrator's folder that every user's graders use

    def path(self, name: str) -> Path:
        return self.folder / (f"{self.key}.{name}" if self.key else name)


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as its holder wrote it down."""

    pid: int
    user: str
    what: str
    since: str

    def describe(self) -> str:
        return f"pid {self.pid} ({self.user}, since {self.since}{': ' + self.what if self.what else ''})"


def default_lock_dir() -> Path:
    return user_cache_dir() / "locks"


def lock_place(key: str, base: Path | None = None) -> LockPlace:
    """Where the locks of the GPU ``key`` live: ``base`` (a folder of this user), else the
    administrator's ``GRADER_LOCK_DIR``, else this user's own lock folder. A folder that another
    user could have prepared is refused (:class:`~grader.host.hostdirs.HostStateError`)."""
    shared = os.environ.get("GRADER_LOCK_DIR", "")  # LOCK_DIR_ENV
    if base is None and shared:
        check_shared_dir(Path(shared))
        return LockPlace(Path(shared), key, shared=True)
    return LockPlace(private_dir(base or default_lock_dir(), "the grader's lock folder"), key)


def check_shared_dir(path: Path) -> None:
    """Refuse a ``GRADER_LOCK_DIR`` that another user could have prepared."""
    me = os.geteuid()
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise HostStateError(f"{LOCK_DIR_ENV} cannot be read ({exc.strerror}): an administrator creates it "
                             f"(install -d -o root -m 1777 '{path}')", path=path) from None
    if not stat.S_ISDIR(info.st_mode):
        raise HostStateError(f"{LOCK_DIR_ENV} is not a folder (a symbolic link?): point it at a real one", path=path)
    if info.st_uid not in (0, me):
        raise HostStateError(f"{LOCK_DIR_ENV} belongs to {user_name(info.st_uid)}: a shared lock folder must belong "
                             f"to root (chown root '{path}') or to the user who runs the grader", path=path)
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (info.st_uid == 0 and info.st_mode & stat.S_ISVTX):
        raise HostStateError(f"{LOCK_DIR_ENV} can be written by other users but is not a sticky folder of root's "
                             f"(mode {stat.S_IMODE(info.st_mode):04o}): make it so (chown root '{path}' && "
                             f"chmod 1777 '{path}'), or unset {LOCK_DIR_ENV}", path=path)
    if info.st_uid == me and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        check_private_dir(path, LOCK_DIR_ENV)  # its parents too


def _check_lock_file(path: Path) -> None:
    """Refuse an existing lock file in the user's own folder that is not a plain file of this
    user's: a link to another file, a FIFO, another user's file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
        raise HostStateError(f"this lock file is {_kind(info)}, not one the grader made: someone may be trying to "
                             f"make the grader write to another file; remove it (rm -f '{path}')", path=path)


def _kind(info: os.stat_result) -> str:
    return (kind_of(info.st_mode) if not stat.S_ISREG(info.st_mode)
            else "a file with another name (a hard link)" if info.st_nlink != 1
            else f"a file of {user_name(info.st_uid)}'s")


def _open_shared(path: Path) -> int:
    """The lock file of a shared folder, opened read-only (all ``flock`` needs): whoever made it
    first owns it, and this grader never writes to it, changes its mode or follows a link there."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise HostStateError(f"this lock file cannot be opened ({exc.strerror}; a symbolic link?): remove it "
                                 f"(rm -f '{path}')", path=path) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise HostStateError(f"this lock file is {_kind(info)}: remove it (rm -f '{path}')", path=path)
    return fd


def open_lock_file(place: LockPlace, name: str) -> int:
    """The lock file ``name`` of ``place`` opened for ``flock`` (made where missing): read-only in
    a shared folder (:func:`_open_shared`), else a plain file of this user's, never through a link."""
    path = place.path(name)
    if place.shared:
        return _open_shared(path)
    _check_lock_file(path)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise HostStateError(f"this lock file cannot be opened ({exc.strerror}): remove it (rm -f '{path}')",
                             path=path) from None


class _SharedLock:
    """``flock`` on a shared folder's lock file, with filelock's ``acquire``/``release``."""

    def __init__(self, path: Path) -> None:
        self.fd = _open_shared(path)

    def acquire(self, timeout: float) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise filelock.Timeout(str(timeout)) from None

    def release(self) -> None:
        os.close(self.fd)


def _holder_file(path: Path, uid: int) -> Path:
    return path.with_name(f"{path.name}.{uid}.holder")


def _write_holder(path: Path, what: str) -> Path | None:
    """Write down that this process holds the lock at ``path``: a file of this user's beside it."""
    record = {"pid": os.getpid(), "user": user_name(os.geteuid()), "what": what,
              "since": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %z")}
    final = _holder_file(path, os.geteuid())
    tmp = final.with_name(f"{final.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        with os.fdopen(fd, "w") as out:
            json.dump(record, out)
        os.replace(tmp, final)
        return final
    except OSError:  # who holds it is only for messages
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None


def _printable(value: object, limit: int = 80) -> str:
    return "".join(c for c in str(value) if c.isprintable())[:limit]


def holder_of(path: Path) -> Holder | None:
    """Who holds the lock at ``path``, as the latest holder still running wrote it (None if no
    such record)."""
    found: list[Holder] = []
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(f"{path.name}.") and n.endswith(".holder")]
    except OSError:
        return None
    for name in names:
        try:
            fd = os.open(path.parent / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            data = json.loads(os.read(fd, HOLDER_LIMIT_BYTES))
            holder = Holder(int(data["pid"]), _printable(data["user"]), _printable(data["what"]),
                            _printable(data["since"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        finally:
            os.close(fd)
        if _running(holder.pid):
            found.append(holder)
    return max(found, key=lambda h: h.since) if found else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return pid > 0


@contextlib.contextmanager
def hold(place: LockPlace, name: str, title: str, what: str, wait_s: float, poll_s: float = 0.2,
         notify: Callable[[str], None] | None = None) -> Iterator[float]:
    """Hold the lock ``name`` of ``place`` (``title`` names it in messages, ``what`` says what this
    process does under it); yields the seconds waited. While another grader holds it, ``notify``
    hears whom this one waits for; past ``wait_s`` seconds, :class:`LockTimeout` names the holder."""
    path = place.path(name)
    lock: filelock.FileLock | _SharedLock
    if place.shared:
        lock = _SharedLock(path)
    else:
        _check_lock_file(path)
        lock = filelock.FileLock(str(path), mode=0o600, thread_local=False)
    try:
        waited = _wait(lock, path, title, wait_s, poll_s, notify)
    except BaseException:
        if isinstance(lock, _SharedLock):
            lock.release()
        raise
    record = _write_holder(path, what)
    try:
        yield waited
    finally:
        if record is not None:
            with contextlib.suppress(OSError):
                os.unlink(record)
        lock.release()


def _wait(lock: filelock.FileLock | _SharedLock, path: Path, title: str, wait_s: float, poll_s: float,
          notify: Callable[[str], None] | None) -> float:
    """Take ``lock``, polling; the seconds waited. Past ``wait_s``, :class:`LockTimeout`."""
    started = time.monotonic()
    noted = -NOTE_EVERY_S
    while True:
        try:
            lock.acquire(timeout=0)
            return time.monotonic() - started
        except filelock.Timeout:
            pass
        except OSError as exc:
            raise HostStateError(f"{title} cannot be taken ({exc.strerror or exc}): remove the lock file "
                                 f"(rm -f '{path}') if another user made it", path=path) from None
        waited = time.monotonic() - started
        if waited >= wait_s:
            raise LockTimeout(f"waited {waited:.0f} s for {title} {_held_by(path)} and gave up: if that grader is "
                              f"stuck, stop it; grade again when it is done", path=path)
        if notify is not None and waited - noted >= NOTE_EVERY_S:
            noted = waited
            notify(f"waiting for {title} {_held_by(path)}")
        time.sleep(min(poll_s, max(wait_s - waited, 0.0)))


def _held_by(path: Path) -> str:
    holder = holder_of(path)
    return f"held by {holder.describe()}" if holder else "held by another grader"
