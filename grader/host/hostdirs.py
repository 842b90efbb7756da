"""Folders and files the grader keeps on a host (caches, locks): its user's own, or refused.

A cache that another user can write is a way to run their code as the grader's user (often root):
the build cache holds the shared objects of the course's baselines, which the trusted worker
loads. So every folder of host state is checked before use: a real folder (not a symbolic link),
owned by the grader's user, writable by nobody else, below folders that nobody else can rename it
in (each owned by root or this user, and sticky where others may write it: the owner of a folder
can rename anything in it, sticky or not). Files in it are opened with ``O_NOFOLLOW`` and must be
regular files of the same owner. A folder that fails is refused with a message that names it and
the fix, never used.

The folders a grading writes its results into (``--out``, ``--keep-work``, ``collect``'s folder:
:func:`output_dir`) are checked the same way: another user who can write one, or rename it, can
plant links where the grader writes (``report.xml`` to a root-owned file), or read what it writes
there (the inputs of the secret-seeded cases).
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from pathlib import Path

from ..errors import GraderError

__all__ = ["HostStateError", "check_file", "check_private_dir", "open_private", "output_dir", "private_dir",
           "read_private", "user_name", "write_private"]

_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
#: What another user could do with a folder of host state they can write.
_TRUSTED_FILES = "put files in it that the grader would trust"
_WRITTEN_THROUGH = "plant links in it that the grader would write through, or read what it writes there"


class HostStateError(GraderError):
    """A folder or file of the grader's host state that another user could have written."""


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def private_dir(path: Path, what: str, risk: str = _TRUSTED_FILES) -> Path:
    """``path`` made if missing (mode 0700, its missing parents too) and checked as
    :func:`check_private_dir` does (its parents before anything is made); returns it."""
    if not os.path.lexists(path):
        _check_parents(path, what, risk)
        for parent in reversed((path, *path.parents)):
            if not os.path.lexists(parent):
                try:
                    os.mkdir(parent, 0o700)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise HostStateError(f"cannot create {what} here ({exc.strerror}): choose a folder of your own",
                                         path=path) from None
    check_private_dir(path, what, risk)
    return path


def output_dir(path: Path, what: str) -> Path:
    """A folder the grader writes results into, made private (mode 0700) if missing, else checked
    as host state is: the grader's user's own, writable by nobody else, below folders nobody else
    can rename it in, not a link. Returns it."""
    return private_dir(path, what, _WRITTEN_THROUGH)


def check_private_dir(path: Path, what: str, risk: str = _TRUSTED_FILES) -> None:
    """Refuse ``path`` unless it is a folder of this user that only this user can write, whose
    parents nobody else can replace it in (owned by root or this user, and sticky like ``/tmp``
    where others may write them). ``risk``: what another user could do with it, for the message."""
    me = os.geteuid()
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise HostStateError(f"{what} cannot be read ({exc.strerror})", path=path) from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
        raise HostStateError(f"{what} is {kind}: remove it, or point the grader at a folder of your own", path=path)
    if info.st_uid != me:
        raise HostStateError(
            f"{what} belongs to {user_name(info.st_uid)}, not to {user_name(me)} who runs the grader: another user "
            f"could {risk}; use a folder of your own, or have it owned by you "
            f"(chown -R {user_name(me)} '{path}' && chmod 700 '{path}')", path=path)
    if info.st_mode & _WRITABLE_BY_OTHERS:
        raise HostStateError(
            f"{what} can be written by other users (mode {stat.S_IMODE(info.st_mode):04o}): they could {risk}; "
            f"make it yours alone (chmod 700 '{path}')", path=path)
    _check_parents(path, what, risk)


def _check_parents(path: Path, what: str, risk: str) -> None:
    """Refuse ``path`` if someone else could rename it or replace it in a folder above it."""
    me = os.geteuid()
    for parent in _parents(path):
        try:
            up = os.stat(parent)
        except OSError:
            continue
        if up.st_uid not in (0, me):
            raise HostStateError(
                f"{what} is inside {parent}, which belongs to {user_name(up.st_uid)}: they could replace the folder "
                f"(the owner of a folder can rename anything in it) and {risk}; keep it in a folder of your own", path=path)
        if up.st_mode & _WRITABLE_BY_OTHERS and not up.st_mode & stat.S_ISVTX:
            raise HostStateError(
                f"{what} is inside {parent}, which other users can write (mode {stat.S_IMODE(up.st_mode):04o}, not "
                f"sticky): they could replace the folder; keep it somewhere only you can write, or "
                f"chmod o-w,g-w '{parent}'", path=path)


def _parents(path: Path) -> list[Path]:
    """Every folder above ``path``, as written and as it resolves (a linked folder above it is the
    user's choice, but the folders it leads to must be as safe as those written)."""
    written = Path(os.path.abspath(path)).parents
    real = Path(os.path.realpath(Path(os.path.abspath(path)).parent))
    return list(dict.fromkeys([*written, real, *real.parents]))


def check_file(fd: int, path: Path, what: str) -> None:
    """Refuse the open file ``fd`` unless it is a regular file of this user with one name."""
    info = os.fstat(fd)
    me = os.geteuid()
    if not stat.S_ISREG(info.st_mode) or info.st_uid != me or info.st_nlink > 1:
        problem = ("is not a regular file" if not stat.S_ISREG(info.st_mode)
                   else f"belongs to {user_name(info.st_uid)}" if info.st_uid != me
                   else "has another name (a hard link)")
        raise HostStateError(f"{what} {problem}, so it is not the grader's own: someone else put it there; "
                             f"remove it (rm -rf '{path}') and check who can write its folder", path=path)


def open_private(path: Path, what: str, remove: Path | None = None) -> int | None:
    """``path`` opened read-only without following a symbolic link and checked by
    :func:`check_file` (None if there is none); the caller closes it. ``remove``: what a refusal
    tells the user to remove (default: ``path``)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HostStateError(f"{what} cannot be opened ({exc.strerror}): it may be a symbolic link someone put "
                             f"there; remove it (rm -rf '{remove or path}')", path=path) from None
    try:
        check_file(fd, remove or path, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private(path: Path, limit: int, what: str) -> bytes | None:
    """The bytes of ``path`` (None if there is none), opened by :func:`open_private`; at most ``limit`` bytes."""
    fd = open_private(path, what)
    if fd is None:
        return None
    try:
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes) -> None:
    """Publish ``data`` at ``path`` whole or not at all, as a new file of this user's (mode 0600)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
