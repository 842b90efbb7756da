"""Who is in the class and where their work is: a folder of repositories or a roster CSV.

A folder: every sub-folder is one student's repository, the folder's name their id. A roster:
CSV with a ``student,path`` header and an optional ``commit`` column (the commit to grade: a hash,
a tag or a branch); paths are relative to the roster's folder. The roster ``cuda-grader collect``
writes has the ``COLLECTED`` columns too: a student's late days and penalty go into their results,
a ``problem`` (nothing collected) is their row's error, and ``ontime_commit`` with
``graded_commit`` say which commit counts (see ``grader.gradebook.late``): with ``best`` both are
graded, with ``latest`` the row's flags say that an on-time commit exists. Blank lines and lines starting
with ``#`` are ignored. A bad line is an input error naming the file, the line and the problem.

Both rosters (this one and ``collect``'s ``student,repository[,extension]``) are read by one
parser, :func:`records`: Python's CSV reader over the whole file (a quoted cell may hold a comma or
a line break, and a line number is where the student's record starts), and one rule for the
header: a first line whose first cell is ``student`` names the columns; a first line made of
header words under other names (``name,repo``) is refused, never read as a student called "name".

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

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


#: Words a spreadsheet's header uses for a student's id and their repository: a first line made of
#: header words is a header under other names, refused, never read as a student.
STUDENT_WORDS = ("name", "id", "sid", "student_id", "studentid", "login", "user", "username", "email", "github", "handle")
REPOSITORY_WORDS = ("repo", "repository", "folder", "dir", "directory", "url", "clone", "location")


@dataclass(frozen=True)
class Layout:
    """The columns of one kind of roster, for :func:`records`."""

    name: str  # "a roster", in messages
    columns: tuple[str, ...]  # every column a header may name
    plain: tuple[str, ...]  # the columns of a file without a header, in order
    required: tuple[str, ...]  # the first is the student's id, the second where their work is
    words: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # other names of each column
    more: str = ""  # said after an unknown column
    repository: str = "repository path"  # what the second required column holds, in messages

    @property
    def shape(self) -> str:
        """``student,path[,commit]``: the header written out."""
        optional = [c for c in self.plain if c not in self.required]
        return ",".join(self.required) + "".join(f"[,{c}]" for c in optional)


#: The roster ``grade-class --roster`` reads.
GRADE = Layout("a roster", COLUMNS, PLAIN, REQUIRED,
               {"student": STUDENT_WORDS, "path": REPOSITORY_WORDS, "commit": ("sha", "hash", "ref", "rev", "revision", "tag", "branch")},
               f"; a roster written by `cuda-grader collect` has {', '.join(COLLECTED)} too")


def _foreign_header(names: list[str], layout: Layout) -> str:
    """What to say of a first line that is a header under other names ("" if it is not one)."""
    renamed = [next((col for col, words in layout.words.items() if n in words), "") for n in names]
    if not any(renamed) or any(not n.replace("_", "").isalpha() for n in names):
        return ""
    wanted = ",".join(r or n for r, n in zip(renamed, names))
    return (f"the first line looks like a header ({','.join(names)}) but {layout.name}'s header is "
            f"{layout.shape}: write {wanted!r} (or leave the header out)")


def _header(row: list[str], layout: Layout, where: str) -> list[str] | None:
    """The column names if ``row`` is a header (its first cell is ``student``), else None; a header
    under other names is an error."""
    names = [c.strip().lower() for c in row]
    if not names or names[0] != layout.required[0]:
        foreign = _foreign_header(names, layout)
        if foreign:
            raise RosterError(foreign, path=where)
        return None
    for name in names:
        if name not in layout.columns:
            near = [c for c, words in layout.words.items() if name in words] or difflib.get_close_matches(name, layout.columns, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise RosterError(f"unknown column {name!r} (columns: {', '.join(layout.plain)}){hint}{layout.more}", path=where)
    missing = [c for c in layout.required if c not in names]
    if missing:
        raise RosterError(f"the header has no {' or '.join(repr(m) for m in missing)} column", path=where)
    if len(set(names)) != len(names):
        raise RosterError("a column is named twice in the header", path=where)
    return names


def _csv_records(text: str, source: Path) -> Iterator[tuple[int, list[str]]]:
    """(the line it starts on, its cells) for each record of ``text``, by Python's CSV reader over
    the whole text: a quoted cell may span lines. A line starting with ``#`` between records is a
    comment, never given to the reader (a quote in a comment opens nothing)."""
    state = {"between": True, "start": 0}

    def lines() -> Iterator[str]:
        for number, line in enumerate(io.StringIO(text, newline=""), start=1):
            if state["between"]:
                if line.lstrip().startswith("#"):
                    continue
                state["between"], state["start"] = False, number
            yield line

    reader = csv.reader(lines(), strict=True)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise RosterError(f"not a CSV line ({exc})", path=f"{source}:{state['start']}") from None
        state["between"] = True
        if any(cell.strip() for cell in row):
            yield int(state["start"]), row


def records(text: str, source: Path, layout: Layout) -> list[tuple[int, dict[str, str]]]:
    """(line, cells by column) for each student of roster text, checked as every roster is: the
    header, the number of fields, the student's id (valid, listed once) and a repository given.
    ``source`` names the file in messages."""
    columns: list[str] | None = None
    seen: dict[str, int] = {}
    out = []
    for number, row in _csv_records(text, source):
        where = f"{source}:{number}"
        if columns is None:
            header = _header(row, layout, where)
            columns = header or list(layout.plain)
            if header is not None:
                continue
        if len(row) > len(columns) or len(row) < len(layout.required):
            shown = ",".join(row)
            raise RosterError(f"expected {len(columns)} fields ({', '.join(columns)}), found {len(row)}: "
                              f"{shown[:200]!r}", path=where)
        fields = dict(zip(columns, (cell.strip() for cell in row)))
        sid, repository = fields[layout.required[0]], fields[layout.required[1]]
        problem = id_problem(sid)
        if problem:
            raise RosterError(problem, path=where)
        if sid in seen:
            raise RosterError(f"student {sid!r} is listed twice (first on line {seen[sid]})", path=where)
        if not repository:
            raise RosterError(f"no {layout.repository} for student {sid!r}", path=where)
        seen[sid] = number
        out.append((number, fields))
    if not out:
        raise RosterError("no students in the roster", path=source)
    return out


def parse(text: str, source: Path) -> list[Student]:
    """Students from roster text (``source`` names the file in messages and anchors relative paths)."""
    students = []
    for number, fields in records(text, source, GRADE):
        where = f"{source}:{number}"
        sid, path, commit = fields["student"], fields["path"], fields.get("commit") or None
        if commit is not None and not REV_PATTERN.match(commit):
            raise RosterError(f"commit {commit!r} is not a commit hash, tag or branch name", path=where)
        students.append(Student(sid, (source.parent / path) if not Path(path).is_absolute() else Path(path), commit, number,
                                _late(fields, where), fields.get("problem", "")))
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
