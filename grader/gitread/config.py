"""A repository's ``.git/config``, read by the grader itself and never by git.

Some keys make git act on a repository's behalf: with a promisor remote (``remote.<name>.promisor``,
``extensions.partialClone``) any command that misses an object fetches it, running the remote's
``uploadpack`` through the shell, or copying a classmate's commit from a local path; ``gitProxy``,
``sshCommand`` and ``fsmonitor`` name programs; an ``[include]`` or ``[includeIf]`` reads another
file, which may be a FIFO in the work tree (a 60 s stall per git command). The grader never lets git
read a student's config (``grader.gitread.own``), and still refuses, by name, a repository whose
config holds any of them: the TA sees what the repository tried, and no later change lets it through.

The parser follows git's own (``config.c``), so that a key is found however it is spelled: section
and key names are case-insensitive (a quoted subsection keeps its case, ``[section.sub]`` does
not), a key may follow its section header on the same line, values may be quoted, escaped and
continued on the next line, and a UTF-8 byte-order mark may start the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import GraderError
from ..host.safeio import read_file
from ..textutil import one_line
from .refs import HEX_DIGITS

#: The most a repository's config may hold (a lab repository's is a few hundred bytes).
CONFIG_LIMIT_BYTES = 1 << 20
#: Keys, in any section, that make git fetch or run a program.
FETCH_OR_RUN = frozenset({"promisor", "partialclone", "partialclonefilter", "uploadpack", "gitproxy", "sshcommand",
                          "fsmonitor"})
#: Sections that make git read another file.
INCLUDES = frozenset({"include", "includeif"})
WHY = "the grader does not read the history of a repository whose config can make git fetch or run a program"

_SPACE = b" \t\n\r"  # git's isspace
_NL, _BACKSLASH, _QUOTE = 10, 92, 34
_ESCAPES = {ord("t"): 9, ord("b"): 8, ord("n"): 10, _BACKSLASH: _BACKSLASH, _QUOTE: _QUOTE}
Entry = tuple[str, "str | None"]  # (section[.subsection].key, value; None for a bare key)


class ConfigSyntax(ValueError):
    """Text git itself would refuse to read; ``line`` is where the bad entry starts."""

    def __init__(self, line: int):
        super().__init__(f"line {line}")
        self.line = line


def _isalpha(c: int) -> bool:
    return 65 <= c <= 90 or 97 <= c <= 122


def _iskeychar(c: int) -> bool:
    return _isalpha(c) or 48 <= c <= 57 or c == 45


def _lower(c: int) -> int:
    return c + 32 if 65 <= c <= 90 else c


class _Text:
    """git's ``get_next_char``: CR LF read as LF, and LF again at the end of the text."""

    def __init__(self, data: bytes):
        self.data, self.pos, self.line, self.eof = data, 0, 1, False

    def next(self) -> int:
        if self.pos >= len(self.data):
            self.eof = True
            return _NL
        c = self.data[self.pos]
        self.pos += 1
        if c == 13 and self.data[self.pos:self.pos + 1] == b"\n":
            c, self.pos = _NL, self.pos + 1
        if c == _NL:
            self.line += 1
        return c


def _section(text: _Text, start: int) -> bytes:
    """The name inside ``[...]`` (git's ``get_base_var``), the ``[`` already read."""
    name = bytearray()
    while True:
        c = text.next()
        if text.eof:
            raise ConfigSyntax(start)
        if c == ord("]"):
            break
        if c in _SPACE:
            name += _subsection(text, c, start)
            break
        if not (_iskeychar(c) or c == ord(".")):
            raise ConfigSyntax(start)
        name.append(_lower(c))
    if not name:
        raise ConfigSyntax(start)
    return bytes(name)


def _subsection(text: _Text, c: int, start: int) -> bytes:
    """``"sub"]`` after a section's name (git's ``get_extended_base_var``): ``.sub``, its case kept."""
    while c in _SPACE:
        if c == _NL:
            raise ConfigSyntax(start)
        c = text.next()
    if c != _QUOTE:
        raise ConfigSyntax(start)
    name = bytearray(b".")
    while True:
        c = text.next()
        if c == _NL:
            raise ConfigSyntax(start)
        if c == _QUOTE:
            break
        if c == _BACKSLASH:
            c = text.next()
            if c == _NL:
                raise ConfigSyntax(start)
        name.append(c)
    if text.next() != ord("]"):
        raise ConfigSyntax(start)
    return bytes(name)


def _value(text: _Text, start: int) -> bytes:
    """What follows ``=`` to the end of its line (git's ``parse_value``)."""
    out, quote, comment, space = bytearray(), False, False, 0
    while True:
        c = text.next()
        if c == _NL:
            if quote:
                raise ConfigSyntax(start)
            return bytes(out)
        if comment:
            continue
        if c in _SPACE and not quote:
            space += 1 if out else 0
            continue
        if not quote and c in b"#;":
            comment = True
            continue
        out += b" " * space
        space = 0
        if c == _BACKSLASH:
            c = text.next()
            if c == _NL:
                continue
            if c not in _ESCAPES:
                raise ConfigSyntax(start)
            out.append(_ESCAPES[c])
        elif c == _QUOTE:
            quote = not quote
        else:
            out.append(c)


def _entry(text: _Text, first: int, start: int) -> tuple[bytes, bytes | None]:
    """A key (its first letter already read) and its value (git's ``get_value``)."""
    name = bytearray([_lower(first)])
    while True:
        c = text.next()
        if text.eof or not _iskeychar(c):
            break
        name.append(_lower(c))
    while c in b" \t":
        c = text.next()
    if c == _NL:
        return bytes(name), None
    if c != ord("="):
        raise ConfigSyntax(start)
    return bytes(name), _value(text, start)


def entries(data: bytes) -> list[Entry]:
    """Every ``name = value`` of a config file's text, names as git spells them
    (``remote.origin.promisor``), in order; :class:`ConfigSyntax` where git would refuse the file."""
    text = _Text(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
    found: list[Entry] = []
    section, comment = b"", False
    while True:
        start = text.line
        c = text.next()
        if c == _NL:
            if text.eof:
                return found
            comment = False
        elif comment or c in _SPACE:
            continue
        elif c in b"#;":
            comment = True
        elif c == ord("["):
            section = _section(text, start) + b"."
        elif _isalpha(c):
            key, value = _entry(text, c, start)
            found.append(((section + key).decode(errors="surrogateescape"),
                          None if value is None else value.decode(errors="surrogateescape")))
        else:
            raise ConfigSyntax(start)


def refused_key(found: list[Entry]) -> str:
    """The first key of ``found`` that makes git fetch, run a program or read another file ("" if none)."""
    for name, _ in found:
        section, _, rest = name.partition(".")
        if section in INCLUDES or rest and rest.rpartition(".")[2] in FETCH_OR_RUN:
            return name
    return ""


@dataclass(frozen=True)
class Settings:
    """What the grader takes from a repository's config: its object format, and whether it is a
    work tree's repository at all (``core.bare``, ``core.worktree``)."""

    object_format: str = "sha1"
    bare: bool = False
    worktree_elsewhere: bool = False


def settings(found: list[Entry]) -> Settings:
    """The :class:`Settings` of a config's entries (the last of a key counts, as in git)."""
    values = dict(found)
    bare = values.get("core.bare", "false")
    return Settings((values.get("extensions.objectformat") or "sha1").lower(),
                    bare is None or bare.lower() in ("true", "yes", "on", "1"), "core.worktree" in values)


def read(dot_git: Path) -> tuple[Settings | None, str]:
    """(settings, "") for ``dot_git/config``; (None, why) where the grader does not read the
    repository: a config that is not a regular file, too large, that git would refuse, or that names
    a key of :data:`FETCH_OR_RUN` or an include. No config at all is git's defaults."""
    path = dot_git / "config"
    try:
        data = read_file(path, CONFIG_LIMIT_BYTES, "a repository's config")
    except GraderError as exc:
        if not path.exists() and not path.is_symlink():
            return Settings(), ""
        return None, str(exc)
    try:
        found = entries(data)
    except ConfigSyntax as exc:
        return None, f"{path}: line {exc.line} is not valid git config: the grader does not read the history of a repository git would refuse"
    key = refused_key(found)
    if key:
        return None, f"{path} sets {one_line(key)}: {WHY}"
    chosen = settings(found)
    if chosen.object_format not in HEX_DIGITS:
        return None, f"{path} sets extensions.objectformat = {one_line(chosen.object_format)}: not a hash git knows"
    return chosen, ""
