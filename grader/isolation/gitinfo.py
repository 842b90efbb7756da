"""What git says about a student's repository, asked without letting git read the repository.

A student's ``.git`` is the student's: its config can make git fetch (a promisor remote whose
``uploadpack`` the shell runs, or a classmate's repository as the remote) or read a FIFO through an
include. So git never runs there. Before anything is read, the repository must be its own: ``.git``
a real folder (not a ``gitdir:`` file or a link to a classmate's), borrowing no other repository's
objects, holding only regular files and folders (a FIFO would stall a reader), and with a config
that names nothing that could make git fetch or run a program (``grader.gitread.config``: refused
by name, so the TA sees what it tried). Then the grader reads HEAD and the refs itself
(``grader.gitread.refs``) and asks git through a repository of its own that reaches the student's
objects only as an alternate (``grader.gitread.own``): a commit graded comes from the student's own
objects. :class:`StudentRepository` keeps that repository for one student's questions (the commit,
its tree, its files), and removes it when done.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..gitread import config, refs
from ..gitread.own import OwnRepository
from ..host.safeio import SOURCE_LIMIT_BYTES, kind_of

GIT_TIMEOUT_S = 60.0
#: What a roster's ``commit`` may be: a hash, a tag or a branch name (never an option).
REV_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@{}^~-]{0,199}$")
OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")

#: Folders of ``.git`` checked whole: refs and objects, which are read, and reflogs and ``info/``.
WALKED = ("refs", "logs", "objects", "info")
#: Files that make a repository read another repository's history.
BORROWING = ("commondir", "objects/info/alternates", "objects/info/http-alternates")
#: The most entries of ``.git`` checked; a larger one is refused (a lab repository is far smaller).
MAX_ENTRIES = 200_000


def repository_problem(repo: Path) -> str:
    """Why the grader must not read ``repo``'s history ("" if it may, or if it has no ``.git`` at all)."""
    return _inspect(repo)[0]


def _inspect(repo: Path) -> tuple[str, config.Settings | None]:
    """(why ``repo`` is not read, "" if it may be; its config's settings, None where it has no
    ``.git`` or is not read)."""
    dot_git = repo / ".git"
    if not os.path.lexists(dot_git):
        return "", None
    problem = _files_problem(dot_git)
    if problem:
        return problem, None
    settings, problem = config.read(dot_git)
    return problem, settings


def _files_problem(dot_git: Path) -> str:
    """Why ``dot_git``'s files must not be read. Only lstat is used: nothing is opened, so a FIFO costs nothing."""
    try:
        mode = os.lstat(dot_git).st_mode
    except OSError as exc:
        return f"{dot_git}: cannot be read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return (f"{dot_git} is a file (a 'gitdir:' pointer to a repository elsewhere): a student's history must be "
                "their own .git folder")
    if not stat.S_ISDIR(mode):
        return f"{dot_git} is {kind_of(mode)}, not a folder: a student's history must be their own .git folder"
    for name in BORROWING:
        if os.path.lexists(dot_git / name):
            return f"{dot_git / name} exists: the repository borrows another repository's history"
    seen = 0
    stack = [dot_git]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            return f"{folder}: cannot be read ({exc.strerror})"
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return f"{dot_git} holds more than {MAX_ENTRIES:,} files: too many to check"
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                return f"{entry.path}: cannot be read ({exc.strerror})"
            if stat.S_ISDIR(mode):
                if folder != dot_git or entry.name in WALKED:
                    stack.append(Path(entry.path))
            elif not stat.S_ISREG(mode):
                return f"{entry.path} is {kind_of(mode)}: git's files must be regular files"
    return ""


@dataclass(frozen=True)
class TreeEntry:
    path: str
    mode: str  # 100644, 100755, 120000 (link), 040000 (tree), 160000 (submodule)
    kind: str  # blob, tree, commit
    oid: str
    size: int  # -1 where git gives none (trees, submodules)

    @property
    def is_file(self) -> bool:
        return self.kind == "blob" and self.mode in ("100644", "100755")

    @property
    def is_link(self) -> bool:
        return self.mode == "120000"




class StudentRepository:
    """One student's repository, checked once and then asked through a repository of the grader's
    own (made at the first question, removed by :meth:`close` or at the end of a ``with``), so that
    the commit, its tree and its files of one student cost one check and one repository. Inside
    ``with StudentRepository(repo)``, this module's functions asked about ``repo`` use it too."""

    def __init__(self, repo: Path):
        self.repo = repo
        self.problem, self._settings = _inspect(repo)
        self._own: OwnRepository | None = None

    @property
    def is_repository(self) -> bool:
        """``repo`` is the top folder of a git work tree whose ``.git`` is its own (see
        :func:`repository_problem`), with a HEAD git would take."""
        return self._refs() is not None

    def _refs(self) -> refs.Refs | None:
        """HEAD and the refs, read now (None where ``repo`` is not a work tree's repository)."""
        found, dot_git = self._settings, self.repo / ".git"
        if found is None or found.bare or found.worktree_elsewhere:
            return None
        if not (dot_git / "objects").is_dir() or not (dot_git / "refs").is_dir():
            return None
        read = refs.read(dot_git, found.object_format)
        return read if read.head_valid else None

    def _git(self) -> OwnRepository | None:
        if self._own is None and self._settings is not None and not self.problem:
            self._own = OwnRepository(self.repo / ".git" / "objects", self._settings.object_format, GIT_TIMEOUT_S)
        return self._own

    def resolve(self, rev: str = "HEAD") -> str | None:
        """The full hash of the commit ``rev`` names (None: not a repository, or no such commit)."""
        found = self._refs() if REV_PATTERN.match(rev) else None  # read at each question: a branch may move
        own = self._git() if found is not None else None
        if found is None or own is None:
            return None
        own.set_refs(found)
        out = own.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        commit = out.decode(errors="replace").strip() if out is not None else ""
        return commit if OBJECT_ID.fullmatch(commit) else None

    def tree_entries(self, commit: str, paths: list[str]) -> dict[str, TreeEntry]:
        """What the commit holds at each of ``paths`` (absent paths are left out)."""
        own = self._git() if OBJECT_ID.fullmatch(commit) else None
        out = own.run("ls-tree", "-z", "--long", "--full-tree", commit, "--", *paths) if own is not None else None
        found = {}
        for record in (out or b"").split(b"\0"):
            meta, _, name = record.partition(b"\t")
            parts = meta.decode(errors="replace").split()
            if len(parts) != 4:
                continue
            mode, kind, oid, size = parts
            path = name.decode(errors="surrogateescape")
            found[path] = TreeEntry(path, mode, kind, oid, int(size) if size.isdigit() else -1)
        return found

    def blob(self, oid: str, limit: int = SOURCE_LIMIT_BYTES) -> bytes | None:
        """The bytes of one blob; None where there is none, or it holds more than ``limit`` bytes."""
        own = self._git() if OBJECT_ID.fullmatch(oid) else None
        return own.run("cat-file", "blob", oid, limit=limit) if own is not None else None

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None

    def __enter__(self) -> StudentRepository:
        with _OPEN_LOCK:
            _OPEN[_key(self.repo)] = self
        return self

    def __exit__(self, *exc: object) -> None:
        with _OPEN_LOCK:
            if _OPEN.get(_key(self.repo)) is self:
                del _OPEN[_key(self.repo)]
        self.close()


#: The repositories open in a ``with`` block, by absolute path.
_OPEN: dict[str, StudentRepository] = {}
_OPEN_LOCK = threading.Lock()


def _key(repo: Path) -> str:
    return os.path.abspath(repo)


@contextmanager
def _opened(repo: Path) -> Iterator[StudentRepository]:
    """The repository open for ``repo`` in a ``with`` block, else one for this question alone."""
    with _OPEN_LOCK:
        found = _OPEN.get(_key(repo))
    if found is not None:
        yield found
        return
    with StudentRepository(repo) as student:
        yield student


def is_repository(repo: Path) -> bool:
    """``repo`` is the top folder of a git work tree (not merely inside one) whose ``.git`` is its
    own (see :func:`repository_problem`)."""
    return StudentRepository(repo).is_repository


def resolve(repo: Path, rev: str = "HEAD") -> str | None:
    """The full hash of the commit ``rev`` names in ``repo`` (None: not a repository, or no such commit)."""
    with _opened(repo) as student:
        return student.resolve(rev)


def tree_entries(repo: Path, commit: str, paths: list[str]) -> dict[str, TreeEntry]:
    """What the commit holds at each of ``paths`` (absent paths are left out)."""
    with _opened(repo) as student:
        return student.tree_entries(commit, paths)


def blob(repo: Path, oid: str) -> bytes | None:
    """The bytes of one blob (the caller checks its size first, from :func:`tree_entries`)."""
    with _opened(repo) as student:
        return student.blob(oid)
