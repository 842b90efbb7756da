"""A repository of the grader's own, through which git reads a student's objects.

Git run in a student's repository reads that repository's config, and the config can make it fetch
(a promisor remote, with ``uploadpack`` run through the shell, or a classmate's repository as the
remote), run a program or read a FIFO. So git is never run there: the grader makes a bare
repository in a private temporary folder, writes its config, HEAD and refs itself (refs that
``grader.gitread.refs`` read and checked), and reaches the student's objects only as its alternate
object directory. Git then runs with ``GIT_DIR`` set to this repository: it never looks for, and
never reads, the student's config, hooks or refs.

Each call also turns off what could still reach out or read more than the objects:
``GIT_NO_LAZY_FETCH=1`` and ``protocol.allow=never`` (no fetch of a missing object whatever a
config says: on git 2.39 each alone stops a partial clone's lazy fetch), no system or user config,
no replace refs, no hooks or fsmonitor, and the student's commit-graph and multi-pack-index left
unread (summaries of the objects, which a student can write to say anything: the objects are the
history). Its output is capped, and it is killed at the time limit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..host.procgroup import kill_group, pump
from ..textutil import CappedOutput
from .refs import HEX_DIGITS, Refs

#: ``-c`` settings of every call.
SETTINGS = ("protocol.allow=never", "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.commitGraph=false",
            "core.multiPackIndex=false")


def _env(git_dir: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C", "LC_ALL": "C", "HOME": "/nonexistent",
        "GIT_DIR": str(git_dir), "GIT_CEILING_DIRECTORIES": str(git_dir.parent),
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_NO_LAZY_FETCH": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat", "GIT_ATTR_NOSYSTEM": "1", "GIT_PROTOCOL_FROM_USER": "0",
    }


class _Over:
    """Set once more than ``limit`` bytes came (a :class:`grader.host.procgroup.Stop`)."""

    def __init__(self, sink: CappedOutput, limit: int):
        self.sink, self.limit = sink, limit

    def is_set(self) -> bool:
        return self.sink.total > self.limit


def _c_quoted(path: bytes) -> bytes:
    """``path`` as git reads a quoted line of ``alternates`` (a folder's name may hold a line break)."""
    escaped = b"".join(b"\\" + bytes([c]) if c in b'"\\' else b"\\%03o" % c if c < 32 or c == 127 else bytes([c])
                       for c in path)
    return b'"' + escaped + b'"'


def _write(path: Path, text: bytes) -> None:
    """Put ``text`` in ``path`` whole (git may read the file while it is replaced)."""
    part = path.with_name(path.name + ".new")
    part.write_bytes(text)
    os.replace(part, path)


class OwnRepository:
    """The grader's bare repository whose only objects are ``objects`` (a student's object folder).

    Made in a private temporary folder; :meth:`close` removes it."""

    def __init__(self, objects: Path, object_format: str, timeout_s: float):
        self.digits = HEX_DIGITS[object_format]  # a name git knows, never text of the student's config
        self.exe = shutil.which("git")
        self.timeout_s = timeout_s
        self.folder = Path(tempfile.mkdtemp(prefix="grader-git-"))  # mode 0700: the grader's alone
        self.git_dir = self.folder / "repository.git"
        for sub in ("objects/info", "refs"):
            (self.git_dir / sub).mkdir(parents=True)
        config = "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
        if object_format == "sha256":
            config = "[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectformat = sha256\n"
        (self.git_dir / "config").write_text(config)
        (self.git_dir / "objects" / "info" / "alternates").write_bytes(_c_quoted(os.fsencode(os.path.abspath(objects))) + b"\n")
        self.set_refs(Refs(True, ""))

    def set_refs(self, refs: Refs) -> None:
        """Make HEAD and the refs those of ``refs`` (an unborn HEAD names no object at all)."""
        named = sorted((name.encode(errors="surrogateescape"), oid) for name, oid in refs.refs.items())  # git's order
        lines = b"".join(oid.encode() + b" " + name + b"\n" for name, oid in named)
        _write(self.git_dir / "packed-refs", b"# pack-refs with: sorted \n" + lines)
        _write(self.git_dir / "HEAD", f"{refs.head or '0' * self.digits}\n".encode())

    def run(self, *args: str, limit: int = 1 << 20) -> bytes | None:
        """The output of ``git args`` here; None where git failed, is not installed, wrote more than
        ``limit`` bytes or did not finish in time."""
        if self.exe is None:
            return None
        cmd = [self.exe, *(part for s in SETTINGS for part in ("-c", s)), "--no-pager", *args]
        try:
            proc = subprocess.Popen(cmd, cwd=self.folder, env=_env(self.git_dir), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            return None
        assert proc.stdout is not None
        sink = CappedOutput(limit + 1, 0)
        try:
            code = pump({proc.stdout.fileno(): sink}, proc, time.monotonic() + self.timeout_s, _Over(sink, limit))
        finally:
            if proc.poll() is None:  # an error of the grader's own: leave no git behind
                kill_group(proc.pid)
                proc.wait()
            proc.stdout.close()
        return bytes(sink.head) if code == 0 and sink.total <= limit else None

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
