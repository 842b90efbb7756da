"""Reading files that a student controls, without following their links or reading without end;
writing the grader's own files without following a link either.

A student controls every file in their repository and every file their code can write (the
scratch folders of their runs). Such a file may be a symbolic link to a course file or a secret,
a FIFO that never ends, a device, or a huge file. Everything the grader reads from those places
goes through here: no link is followed at any step of the path, only regular files are read, and
reads stop at a cap.

Every file the grader writes (reports, gradebooks, kept inputs) goes through :func:`replacing`:
a new file under a fresh name beside it, created exclusively, then renamed into place, so a link
someone planted at the name is replaced, never written through, and a reader never sees half a
file. The folders it writes into are checked first (``hostdirs.output_dir``).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import secrets
import stat
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Iterator, TextIO

from ..errors import GraderError

if TYPE_CHECKING:
    import numpy as np

#: The most a submitted source file may hold.
SOURCE_LIMIT_BYTES = 1 << 20


class UnsafeFile(GraderError):
    """A file the grader refuses to read: a link, not a regular file, or too large."""


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words, when it is not the regular file wanted."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refusal(path: Path | str, mode: int, what: str) -> UnsafeFile:
    kind = kind_of(mode)
    if stat.S_ISLNK(mode):
        return UnsafeFile(f"is a symbolic link: {what} must be the file itself (links are not followed)", path=path)
    if stat.S_ISDIR(mode):
        return UnsafeFile("is a directory, not a file", path=path)
    return UnsafeFile(f"is {kind}: {what} must be a regular file", path=path)


def _check(info: os.stat_result, limit: int, path: Path | str, what: str) -> None:
    """Refuse anything but a regular file of at most ``limit`` bytes."""
    if not stat.S_ISREG(info.st_mode):
        raise _refusal(path, info.st_mode, what)
    if info.st_size > limit:
        raise UnsafeFile(f"is {info.st_size:,} bytes; {what} may be at most {limit:,} bytes", path=path)


def _read_fd(fd: int, limit: int, path: Path | str, what: str) -> bytes:
    _check(os.fstat(fd), limit, path, what)
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:  # it grew while we read
            raise UnsafeFile(f"holds more than {limit:,} bytes; {what} may be at most {limit:,} bytes", path=path)


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


def regular_file(path: Path, what: str = "the file") -> None:
    """Refuse ``path`` unless it is a regular file itself (no link, FIFO, device or folder)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise GraderError("file not found", path=path) from None
    except OSError as exc:
        raise GraderError(f"cannot read it ({exc.strerror})", path=path) from None
    if not stat.S_ISREG(info.st_mode):
        raise _refusal(path, info.st_mode, what)


def read_file(path: Path, limit: int, what: str = "the file") -> bytes:
    """The bytes of ``path``, itself not a link (its folders may be: they are the user's choice)."""
    regular_file(path, what)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise GraderError(f"cannot read it ({exc.strerror})", path=path) from None
    try:
        return _read_fd(fd, limit, path, what)
    finally:
        os.close(fd)


def _open_beneath(base: Path, rel: str | Path, display: str, limit: int, what: str) -> int:
    """An fd of ``base/rel``, a regular file of at most ``limit`` bytes, opened one component at a
    time, following no link below ``base`` (``base`` itself is the caller's choice)."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise UnsafeFile(f"{rel!s} is not a path inside {base}", path=display)
    fd = os.open(base, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                raise GraderError("file not found", path=display) from None
            if last:
                _check(info, limit, display, what)
            elif not stat.S_ISDIR(info.st_mode):
                raise UnsafeFile(f"its folder {part!r} is {kind_of(info.st_mode)}, not a folder inside {base}", path=display)
            nxt = os.open(part, _OPEN_FLAGS if last else _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_beneath(base: Path, rel: str | Path, limit: int) -> bytes:
    """Read ``base/rel`` where a student can write below ``base``: no link followed, capped."""
    display, what = str(Path(base) / rel), "a file the grader reads"
    fd = _open_beneath(Path(base), rel, display, limit, what)
    try:
        return _read_fd(fd, limit, display, what)
    finally:
        os.close(fd)


def submission_file(root: Path, rel: str) -> Path:
    """``root/rel`` checked to be a regular file of at most ``SOURCE_LIMIT_BYTES`` reached through
    no link, inside ``root``.

    The path is what a repository holds for a lab; a link (even one committed to git) could
    point at the reference solution or a secret, so the submission must be the file itself.
    """
    fd = _open_beneath(Path(root), rel, rel, SOURCE_LIMIT_BYTES, "a submitted source file")
    os.close(fd)
    return Path(root) / rel


def load_npy(base: Path, rel: str | Path, limit: int) -> np.ndarray:
    """An array a worker wrote below ``base``, read safely: no link followed, never unpickled,
    its header's size checked against ``limit`` before anything is allocated, and its data read
    straight into the array (a timed 64M-element output is 256 MB)."""
    display = str(Path(base) / rel)
    fd = _open_beneath(Path(base), rel, display, limit, "a file the grader reads")
    with os.fdopen(fd, "rb") as fh:
        try:
            return _read_npy(fh, limit)
        except (ValueError, OSError, EOFError) as exc:
            raise UnsafeFile(f"is not a readable .npy array ({exc})", path=display) from None


def _read_npy(fh: io.BufferedReader, limit: int) -> np.ndarray:
    import numpy as np  # here, so that the sandbox's own helpers import without numpy

    fmt = np.lib.format
    version = fmt.read_magic(fh)
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    if version not in readers:
        raise ValueError(f"format version {version[0]}.{version[1]} is not read")
    shape, fortran, dtype = readers[version](fh)
    if dtype.hasobject:
        raise ValueError("it holds Python objects")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limit:
        raise ValueError(f"its header declares {nbytes:,} bytes, more than the {limit:,} allowed")
    array = np.empty(shape, dtype, order="F" if fortran else "C")
    if nbytes and fh.readinto(array.reshape(-1, order="A").view(np.uint8).data) != nbytes:
        raise EOFError(f"the data ends before the {nbytes:,} bytes its header declares")
    return array


def write_private(path: Path, data: bytes) -> None:
    """Create ``path`` anew (never through an existing link or file) and write ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def replacing(path: Path, mode: int = 0o666) -> Iterator[BinaryIO]:
    """A new file (``mode`` less the umask) that takes ``path``'s place when the block ends without
    an error: written under a fresh random name beside it, created exclusively (never through a link
    or into a file already there), then renamed over ``path`` (which replaces a link there)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name[:200]}.{secrets.token_hex(6)}.part")
    fd = os.open(tmp, _NEW_FLAGS, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_whole(path: Path, data: bytes | str) -> None:
    """``data`` (text as UTF-8) at ``path``, through :func:`replacing`."""
    with replacing(path) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def appending(path: Path) -> TextIO:
    """``path`` opened to append text (made if missing), never through a link and only if it is a
    regular file of this user's with one name; the caller closes it."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise UnsafeFile(f"cannot be opened to append ({exc.strerror}): a link or a FIFO in its place is not "
                         "written through; remove it", path=path) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
        os.close(fd)
        raise UnsafeFile("is not a regular file of the grader's own with one name: it is not written through; "
                         "remove it", path=path)
    os.set_blocking(fd, True)
    return open(fd, "a", encoding="utf-8")
