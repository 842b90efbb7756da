"""A repository's HEAD and refs, read by the grader itself from git's files.

Git keeps them in ``HEAD``, one file per ref under ``refs/`` and ``packed-refs``. Each is read
through a size cap without following a link (a FIFO or a huge file among them is refused, never
waited on); a ref whose name breaks git's rules (``git check-ref-format``) or whose value is not an
object id of the repository's hash is left out, as git leaves out a broken ref; a loose ref wins over
its packed copy; a symbolic ref is followed to its object id (at most 5 links, as git). What comes
out is written into the grader's own repository (``grader.gitread.own``), so the names and ids git
reads there are only ones that passed these checks. Pseudo-refs (``ORIG_HEAD``, ``FETCH_HEAD``),
reflogs and reftable repositories are not read: a roster names a commit, a tag or a branch.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GraderError
from ..host.safeio import read_file

#: The most one loose ref or HEAD may hold (a ref is a line of 41 or 65 bytes).
REF_LIMIT_BYTES = 4096
#: The most ``packed-refs`` may hold (a lab repository's holds a few lines).
PACKED_LIMIT_BYTES = 16 << 20
#: How many symbolic refs git follows before it gives up.
SYMREF_DEPTH = 5
#: Hex digits of an object id, by ``extensions.objectFormat``.
HEX_DIGITS = {"sha1": 40, "sha256": 64}

_BAD_IN_REFNAME = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock/")


def refname_ok(name: str) -> bool:
    """``name`` is a ref name by git's rules (``check_refname_format``) and lies under ``refs/``."""
    return (name.startswith("refs/") and not _BAD_IN_REFNAME.search(name)
            and not name.endswith((".", "/", ".lock")))


def _is_oid(value: str, digits: int) -> bool:
    return len(value) == digits and all(c in "0123456789abcdef" for c in value)


def _parse_loose(data: bytes, digits: int) -> tuple[str, str] | None:
    """("oid", id) or ("ref", target) of a loose ref's or HEAD's text; None if it is neither."""
    text = data.decode(errors="surrogateescape").rstrip()
    if text.startswith("ref:"):
        target = text[4:].lstrip()
        return ("ref", target) if refname_ok(target) else None
    oid, rest = text[:digits], text[digits:]
    return ("oid", oid) if _is_oid(oid, digits) and (not rest or rest[0].isspace()) else None


def _read(path: Path, limit: int) -> bytes | None:
    try:
        return read_file(path, limit, "a file of git's refs")
    except GraderError:
        return None


def _packed(dot_git: Path, digits: int) -> dict[str, tuple[str, str]]:
    data = _read(dot_git / "packed-refs", PACKED_LIMIT_BYTES) or b""
    found = {}
    for raw in data.decode(errors="surrogateescape").splitlines():
        oid, _, name = raw.rstrip().partition(" ")
        if _is_oid(oid, digits) and refname_ok(name):  # a '#' header and '^' peeled lines are neither
            found[name] = ("oid", oid)
    return found


def _loose(dot_git: Path, digits: int) -> dict[str, tuple[str, str]]:
    found = {}
    stack = [dot_git / "refs"]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
                continue
            name = Path(entry.path).relative_to(dot_git).as_posix()
            data = _read(Path(entry.path), REF_LIMIT_BYTES) if refname_ok(name) else None
            value = _parse_loose(data, digits) if data is not None else None
            if value is not None:
                found[name] = value
    return found


def _follow(raw: dict[str, tuple[str, str]], value: tuple[str, str]) -> str:
    """The object id ``value`` comes to ("" for a dangling or too deep symbolic ref)."""
    for _ in range(SYMREF_DEPTH + 1):
        kind, target = value
        if kind == "oid":
            return target
        if target not in raw:
            return ""
        value = raw[target]
    return ""


@dataclass(frozen=True)
class Refs:
    """HEAD and every ref, as object ids."""

    head_valid: bool  # HEAD is one git would take (a ref under refs/ or an id): the folder is a repository
    head: str  # the commit HEAD comes to ("" for an unborn or broken HEAD)
    refs: dict[str, str] = field(default_factory=dict)


def read(dot_git: Path, object_format: str) -> Refs:
    """The refs of the repository ``dot_git`` (its files already checked to be regular files)."""
    digits = HEX_DIGITS.get(object_format, 0)
    data = _read(dot_git / "HEAD", REF_LIMIT_BYTES)
    head = _parse_loose(data, digits) if data is not None and digits else None
    if head is None:
        return Refs(False, "")
    raw = {**_packed(dot_git, digits), **_loose(dot_git, digits)}
    refs = {name: oid for name, value in raw.items() if (oid := _follow(raw, value))}
    return Refs(True, _follow(raw, head), refs)
