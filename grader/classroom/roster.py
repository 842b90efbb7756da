"""Who is in the class and where their work is: a folder of repositories or a roster CSV.

A folder: every sub-folder is one student's repository, the folder's name their id. A roster:
CSV with a ``student,path`` header and an optional ``commit`` column (the commit to grade: a hash,
a tag or a branch); paths are relative to the roster's folder. The roster ``cuda-grader collect``
writes has the ``COLLECTED`` columns too: a student's late days and penalty go into their results,
a ``problem`` (nothing collected) is their row's error, and ``ontime_commit`` with
``graded_commit`` say which commit counts (see ``grader.gradebook.late``): with ``best`` both are
graded, with ``latest`` the row's flags say that an on-time commit exists. Blank lines and lines starting
with ``#`` are ignored. A bad line is an input error naming the file, the line and the problem.

A student's folder must be the folder itself: one that is a symbolic link (in a folder of
repositories, or as the last part of a roster's path) is refused in that student's row, as is a
``.git`` that is not the folder's own (see ``grader.isolation.gitinfo.repository_problem``). Links further
up a roster's path are the TA's own layout and are followed.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import GraderError
from ..gradebook.late import GRADED_COMMIT
from ..isolation.gitinfo import REV_PATTERN

#: A student id names the student's output folder and CSV row: letters, digits and ``._@+-``.
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$")
#: What ``cuda-grader collect`` adds: when the commit was first collected, the student's deadline,
#: the late days and penalty of the late policy, flags, why nothing was collected, the last commit
#: collected by the deadline where a later one is in ``commit``, and which of them counts.
COLLECTED = ("collected_at", "deadline", "late_days", "penalty", "flags", "problem", "ontime_commit", "graded_commit")
COLUMNS = ("student", "path", "commit", *COLLECTED)
REQUIRED = ("student", "path")
#: The columns of a roster without a header.
PLAIN = ("student", "path", "commit")


class RosterError(GraderError):
    """A roster that cannot be read: the message names the file, the line and the problem."""


@dataclass(frozen=True)
class Student:
    id: str
    path: Path  # the student's repository
    commit: str | None = None  # grade this commit instead of the work tree
    line: int = 0  # where the roster names them (0: found as a folder)
    late: Mapping[str, Any] | None = None  # from a collected roster: deadline, collected_at, late_days, penalty, flags
    problem: str = ""  # from a collected roster: why there is nothing to grade


def id_problem(student_id: str) -> str:
    """Why ``student_id`` cannot be an id ("" if it can)."""
    if not student_id:
        return "the student id is empty"
    if not ID_PATTERN.match(student_id):
        return (f"student id {student_id!r} may hold only letters, digits and . _ @ + - "
                "(at most 100, starting with a letter or digit)")
    return ""


def from_folder(folder: Path) -> list[Student]:
    """One student per sub-folder of ``folder`` (hidden ones skipped), sorted by id."""
    if not folder.is_dir():
        raise RosterError("expected a folder of student repositories" if folder.exists() else "folder not found",
                          path=folder)
    students = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        problem = id_problem(entry.name)
        if problem:
            raise RosterError(f"folder {entry.name!r}: {problem}; rename it or list the class in a roster CSV", path=folder)
        students.append(Student(entry.name, entry))
    if not students:
        raise RosterError("no student repositories in it (expected one folder per student)", path=folder)
    return students


#: Words a spreadsheet's header uses for the roster's columns: a first line made of them is a
#: header under other names, refused, never graded as a student.
HEADER_WORDS = {
    "student": ("name", "id", "sid", "student_id", "studentid", "login", "user", "username", "email", "github", "handle"),
    "path": ("repo", "repository", "folder", "dir", "directory", "url", "clone", "location"),
    "commit": ("sha", "hash", "ref", "rev", "revision", "tag", "branch"),
}


def _foreign_header(names: list[str]) -> str:
    """What to say of a first line that is a header under other names ("" if it is not one)."""
    renamed = [next((col for col, words in HEADER_WORDS.items() if n in words), "") for n in names]
    if not any(renamed) or any(not n.replace("_", "").isalpha() for n in names):
        return ""
    wanted = ",".join(r or n for r, n in zip(renamed, names))
    return (f"the first line looks like a header ({','.join(names)}) but a roster's header is "
            f"student,path[,commit]: write {wanted!r} (or leave the header out)")


def _header(row: list[str], where: str) -> list[str] | None:
    """The column names if ``row`` is a header (its first cell is ``student``), else None; a header
    under other names is an error."""
    names = [c.strip().lower() for c in row]
    if not names or names[0] != "student":
        foreign = _foreign_header(names)
        if foreign:
            raise RosterError(foreign, path=where)
        return None
    for name in names:
        if name not in COLUMNS:
            near = difflib.get_close_matches(name, COLUMNS, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise RosterError(f"unknown column {name!r} (columns: {', '.join(PLAIN)}){hint}; a roster written by "
                              f"`cuda-grader collect` has {', '.join(COLLECTED)} too", path=where)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise RosterError(f"the header has no {' or '.join(repr(m) for m in missing)} column", path=where)
    if len(set(names)) != len(names):
        raise RosterError("a column is named twice in the header", path=where)
    return names


def parse(text: str, source: Path) -> list[Student]:
    """Students from roster text (``source`` names the file in messages and anchors relative paths)."""
    base = source.parent
    columns: list[str] | None = None
    seen: dict[str, int] = {}
    students = []
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            row = next(csv.reader(io.StringIO(raw), strict=True))
        except csv.Error as exc:
            raise RosterError(f"not a CSV line ({exc})", path=where) from None
        if columns is None:
            header = _header(row, where)
            columns = header or list(PLAIN)
            if header is not None:
                continue
        if len(row) > len(columns) or len(row) < len(REQUIRED):
            raise RosterError(f"expected {len(columns)} fields ({', '.join(columns)}), found {len(row)}", path=where)
        fields = dict(zip(columns, (cell.strip() for cell in row)))
        sid, path, commit = fields["student"], fields["path"], fields.get("commit") or None
        problem = id_problem(sid)
        if problem:
            raise RosterError(problem, path=where)
        if sid in seen:
            raise RosterError(f"student {sid!r} is listed twice (first on line {seen[sid]})", path=where)
        if not path:
            raise RosterError(f"no repository path for student {sid!r}", path=where)
        if commit is not None and not REV_PATTERN.match(commit):
            raise RosterError(f"commit {commit!r} is not a commit hash, tag or branch name", path=where)
        seen[sid] = number
        students.append(Student(sid, (base / path) if not Path(path).is_absolute() else Path(path), commit, number,
                                _late(fields, where), fields.get("problem", "")))
    if not students:
        raise RosterError("no students in the roster", path=source)
    return students


def _late(fields: Mapping[str, str], where: str) -> Mapping[str, Any] | None:
    """The late columns of a collected roster (None where there are none)."""
    if not fields.get("collected_at"):
        return None
    try:
        days = int(fields.get("late_days") or 0)
        penalty = float(fields.get("penalty") or 0)
    except ValueError:
        raise RosterError(f"late_days {fields.get('late_days')!r} and penalty {fields.get('penalty')!r} must be numbers",
                          path=where) from None
    if days < 0 or not 0 <= penalty <= 1:
        raise RosterError(f"late_days must be 0 or more and penalty a fraction from 0 to 1, got {days} and {penalty}",
                          path=where)
    flags = [f.strip() for f in (fields.get("flags") or "").split(" | ") if f.strip()]
    which = _which_commit(fields, where)
    if which.get("graded_commit") == "latest":
        flags.append(f"an on-time commit {which['ontime_commit'][:12]} was collected by the deadline; the later one is "
                     "graded (graded_commit: latest)")
    return {"deadline": fields.get("deadline", ""), "collected_at": fields["collected_at"], "late_days": days,
            "penalty": penalty, "flags": flags, **which}


_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _which_commit(fields: Mapping[str, str], where: str) -> dict[str, str]:
    """``ontime_commit`` and ``graded_commit`` of a collected roster's row (nothing where it has no
    on-time commit besides the graded one)."""
    ontime, rule = fields.get("ontime_commit") or "", fields.get("graded_commit") or "latest"
    if rule not in GRADED_COMMIT:
        raise RosterError(f"graded_commit {rule!r} must be {' or '.join(GRADED_COMMIT)}", path=where)
    if ontime and not _HASH.fullmatch(ontime):
        raise RosterError(f"ontime_commit {ontime!r} is not a full commit hash", path=where)
    if not ontime or ontime == fields.get("commit"):
        return {}
    return {"ontime_commit": ontime, "graded_commit": rule}


def read_text(roster: Path) -> str:
    """A roster CSV file's text (UTF-8, a byte-order mark from a spreadsheet is fine)."""
    try:
        data = roster.read_bytes()
    except FileNotFoundError:
        raise RosterError("roster not found", path=roster) from None
    except OSError as exc:
        raise RosterError(f"cannot read the roster ({exc.strerror})", path=roster) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise RosterError(f"not UTF-8 text (first bad byte on line {line})", path=roster) from None


def load(roster: Path) -> list[Student]:
    """Students from a roster CSV file (see :func:`read_text`)."""
    return parse(read_text(roster), roster)
