"""What git says about a student's repository, asked without trusting the repository.

The repository may belong to another user (git then refuses it unless told it is safe) and its
``.git/config`` is the student's: only plumbing commands that run no hook, filter, pager or
fsmonitor are used, with the system and user configuration left out, replace refs ignored, and
discovery stopped at the repository itself (a student folder inside the TA's own git checkout
is not that checkout). Before git runs, the repository must be its own: ``.git`` a real folder
(not a ``gitdir:`` file or a link to a classmate's), borrowing no other repository's objects, and
holding only regular files and folders (a FIFO would stall git until its time-out).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..host.safeio import kind_of

GIT_TIMEOUT_S = 60.0
#: What a roster's ``commit`` may be: a hash, a tag or a branch name (never an option).
REV_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@{}^~-]{0,199}$")


#: Folders of ``.git`` git reads from (refs, reflogs for ``@{n}``, objects, grafts): checked whole.
WALKED = ("refs", "logs", "objects", "info")
#: Files that make a repository read another repository's history.
BORROWING = ("commondir", "objects/info/alternates", "objects/info/http-alternates")
#: The most entries of ``.git`` checked; a larger one is refused (a lab repository is far smaller).
MAX_ENTRIES = 200_000


def repository_problem(repo: Path) -> str:
    """Why git must not be asked about ``repo`` ("" if it may, or if it has no ``.git`` at all).

    Only lstat is used: nothing is opened, so a FIFO costs nothing."""
    dot_git = repo / ".git"
    try:
        mode = os.lstat(dot_git).st_mode
    except FileNotFoundError:
        return ""
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


def _env(repo: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C", "LC_ALL": "C", "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_OPTIONAL_LOCKS": "0",
        "GIT_PAGER": "cat", "GIT_CEILING_DIRECTORIES": str(repo.resolve().parent),
    }


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    """``git args`` in ``repo``; None where git is not installed or did not answer in time."""
    exe = shutil.which("git")
    if exe is None:
        return None
    # safe.directory: a repository owned by another user (a TA grading copies made by a script
    # running as someone else) is read, not refused; nothing run here executes its configuration.
    cmd = [exe, "-c", "safe.directory=*", "-c", "core.fsmonitor=false", "--no-pager", "-C", str(repo), *args]
    try:
        return subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL, env=_env(repo), timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None


def is_repository(repo: Path) -> bool:
    """``repo`` is the top folder of a git work tree (not merely inside one) whose ``.git`` is its
    own (see :func:`repository_problem`)."""
    if repository_problem(repo):
        return False
    done = git(repo, "rev-parse", "--show-toplevel")
    if done is None or done.returncode != 0:
        return False
    top = done.stdout.decode(errors="replace").strip()
    return bool(top) and os.path.realpath(top) == os.path.realpath(repo)


def resolve(repo: Path, rev: str = "HEAD") -> str | None:
    """The full hash of the commit ``rev`` names in ``repo`` (None: not a repository, or no such commit)."""
    if not REV_PATTERN.match(rev) or not is_repository(repo):
        return None
    done = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    if done is None or done.returncode != 0:
        return None
    out = done.stdout.decode(errors="replace").strip()
    return out if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", out) else None


def tree_entries(repo: Path, commit: str, paths: list[str]) -> dict[str, TreeEntry]:
    """What the commit holds at each of ``paths`` (absent paths are left out)."""
    done = git(repo, "ls-tree", "-z", "--long", "--full-tree", commit, "--", *paths)
    if done is None or done.returncode != 0:
        return {}
    found = {}
    for record in done.stdout.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        parts = meta.decode(errors="replace").split()
        if len(parts) != 4:
            continue
        mode, kind, oid, size = parts
        path = name.decode(errors="surrogateescape")
        found[path] = TreeEntry(path, mode, kind, oid, int(size) if size.isdigit() else -1)
    return found


def blob(repo: Path, oid: str) -> bytes | None:
    """The bytes of one blob (the caller checks its size first, from :func:`tree_entries`)."""
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", oid):
        return None
    done = git(repo, "cat-file", "blob", oid)
    return done.stdout if done is not None and done.returncode == 0 else None
