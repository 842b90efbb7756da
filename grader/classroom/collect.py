"""``cuda-grader collect``: the trusted record of what each student had handed in at their deadline.

From a roster of ``student,repository[,extension]`` (a URL or a path; an extension is the
student's own deadline, an ISO 8601 time, or a number of days added to the course's), each run
fetches every repository whose deadline has passed into ``DIR/repos/<student>`` and records the
commit it found and when, in ``DIR/collected.json``. Run it at the deadline (cron, a SLURM job, a
scheduled workflow) and again at each extension's deadline, and during the late days if the
course allows them: a student's later runs add a collection only when their work changed. It then
writes ``DIR/roster.csv`` for ``grade-class``: per student the commit graded (the last one
collected before their cut-off), when it was first collected, the late days and penalty the late
policy gives that, and flags.

What a commit says about itself is never trusted, only flagged: a commit dated after the deadline
yet collected before it, a commit dated before the deadline that was first collected after it,
and a history rewritten between two collections (a force push). A repository that is gone,
private or empty is that student's row, not the run's end.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..engine.identity import utc_stamp
from ..errors import GraderError
from ..gradebook.late import DAY, LatePolicy
from ..host.hostdirs import output_dir
from ..host.safeio import write_whole
from ..textutil import sheet_cell
from .roster import RosterError, id_problem, read_text

STATE = "collected.json"
ROSTER = "roster.csv"
REPOS = "repos"
STATE_VERSION = 1
#: The columns of the roster ``collect`` writes (``grade-class`` reads every one of them).
COLUMNS = ("student", "path", "commit", "collected_at", "deadline", "late_days", "penalty", "flags", "problem")
FETCH_TIMEOUT_S = 300.0
FETCHES_AT_ONCE = 8
_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class Entry:
    """A student of the collect roster."""

    student: str
    source: str  # a URL, or an absolute path
    deadline: datetime.datetime
    line: int = 0


@dataclass
class Record:
    """What the runs so far found for one student (kept in ``collected.json``)."""

    source: str
    deadline: str
    collections: list[dict[str, str]] = field(default_factory=list)  # commit, at (ISO), dated (ISO, the commit's own claim)
    flags: list[str] = field(default_factory=list)
    problem: str = ""  # why nothing could be collected (the last run's reason)


@dataclass(frozen=True)
class Row:
    student: str
    path: str
    commit: str
    collected_at: str
    deadline: str
    late_days: str
    penalty: str
    flags: str
    problem: str
    note: str  # what this run did, for the terminal


def parse_time(text: str, what: str) -> datetime.datetime:
    """An ISO 8601 time with its offset (``2026-12-01T23:59:00-05:00`` or ``...Z``)."""
    try:
        t = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise GraderError(f"{what}: expected an ISO 8601 time such as 2026-12-01T23:59:00-05:00, got {text!r}") from None
    if t.tzinfo is None:
        raise GraderError(f"{what}: {text!r} has no time zone: add its offset (-05:00) or Z for UTC")
    return t


def load_entries(path: Path, deadline: datetime.datetime) -> list[Entry]:
    """The collect roster: ``student,repository[,extension]`` (a header line is optional)."""
    text = read_text(path)
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            row = [c.strip() for c in next(csv.reader(io.StringIO(raw), strict=True))]
        except csv.Error as exc:
            raise RosterError(f"not a CSV line ({exc})", path=where) from None
        if not entries and not seen and row and row[0].lower() == "student":  # a header line
            continue
        if len(row) not in (2, 3):
            raise RosterError(f"expected student,repository[,extension], found {len(row)} fields", path=where)
        sid, source = row[0], row[1]
        problem = id_problem(sid) or ("" if source else "the repository is empty")
        if problem:
            raise RosterError(problem, path=where)
        if sid in seen:
            raise RosterError(f"student {sid!r} is listed twice (first on line {seen[sid]})", path=where)
        seen[sid] = number
        if "://" not in source and not re.match(r"^[\w.-]+@[\w.-]+:", source):  # a path, relative to the roster
            source = str((path.parent / source).absolute())
        own = deadline
        if len(row) == 3 and row[2]:
            own = _extension(row[2], deadline, where)
        entries.append(Entry(sid, source, own, number))
    if not entries:
        raise RosterError("no students in it", path=path)
    return entries


def _extension(text: str, deadline: datetime.datetime, where: str) -> datetime.datetime:
    """A student's own deadline: an ISO time, or days (``2``, ``+1.5``) after the course's."""
    if re.fullmatch(r"\+?\d+(\.\d+)?", text):
        return deadline + float(text) * DAY
    try:
        return parse_time(text, "extension")
    except GraderError as exc:
        raise RosterError(f"{exc} (or a number of days)", path=where) from None


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """git with the TA's own configuration (credentials, SSH), but no hook, prompt or helper program
    a repository could name, and a time limit."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false", "SSH_ASKPASS": "/bin/false",
           "GIT_NO_REPLACE_OBJECTS": "1", "LC_ALL": "C"}
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never", "-c", "core.fsmonitor=false",
           "-c", "safe.directory=*", *args]
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"no answer within {FETCH_TIMEOUT_S:.0f} s")
    except OSError as exc:
        return subprocess.CompletedProcess(cmd, 127, "", f"git cannot run: {exc}")


#: The user and password (a token) of a clone URL, never repeated in a message or a file.
_USERINFO = re.compile(r"(\w[\w+.-]*://)[^/@\s]+@")


def redact(text: str) -> str:
    """``text`` without the credentials of any URL in it."""
    return _USERINFO.sub(r"\1***@", text)


def _why(stderr: str) -> str:
    stderr = redact(stderr)
    text = stderr.lower()
    if "couldn't find remote ref head" in text or "remote ref head" in text:
        return "the repository is empty (no commit on its default branch)"
    if any(s in text for s in ("not found", "does not appear to be a git repository", "does not exist", "no such file")):
        return "repository not found (gone, renamed, or private to this account)"
    if any(s in text for s in ("authentication", "permission denied", "could not read username", "access denied")):
        return "access denied (private: give this account read access)"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"git fetch failed: {lines[-1][:200] if lines else 'no message'}"


def fetch(source: str, clone: Path) -> tuple[str, str, str]:
    """(commit, its own committer date as ISO, problem) for the head of ``source``'s default branch,
    fetched into ``clone`` (made on the first run; every collected commit stays referenced)."""
    if not (clone / ".git").is_dir():
        clone.mkdir(parents=True, exist_ok=True)
        done = _git("init", "--quiet", str(clone))
        if done.returncode != 0:
            return "", "", f"cannot make {clone}: {redact(done.stderr.strip())[:200]}"
    done = _git("fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--force", "--end-of-options", source, "HEAD",
                cwd=clone)
    if done.returncode != 0:
        return "", "", _why(done.stderr)
    head = _git("rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}", cwd=clone).stdout.strip()
    if not _HASH.fullmatch(head):
        return "", "", "the repository's default branch names no commit"
    _git("update-ref", f"refs/collected/{head}", head, cwd=clone)  # kept: a later force push cannot make it vanish
    stamp = _git("show", "-s", "--format=%ct", head, cwd=clone).stdout.strip()
    dated = utc_stamp(datetime.datetime.fromtimestamp(int(stamp), datetime.timezone.utc)) if stamp.isdigit() else ""
    return head, dated, ""


def _rewritten(clone: Path, old: str, new: str) -> bool:
    """Whether ``old`` is no longer in the history of ``new`` (exit 1 of --is-ancestor: not an ancestor)."""
    return _git("merge-base", "--is-ancestor", old, new, cwd=clone).returncode == 1


def load_state(folder: Path) -> dict[str, Record]:
    path = folder / STATE
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return {sid: Record(**rec) for sid, rec in doc["students"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GraderError(f"unreadable ({type(exc).__name__}: {exc}); it is the record of every collection: "
                          "restore it from a backup rather than deleting it", path=path) from None


def _save(folder: Path, state: dict[str, Record]) -> None:
    doc = {"version": STATE_VERSION, "students": {sid: rec.__dict__ for sid, rec in sorted(state.items())}}
    write_whole(folder / STATE, json.dumps(doc, indent=2) + "\n")


def _collect_one(entry: Entry, before: Record, clone: Path, now: datetime.datetime) -> tuple[str, Record]:
    """One student's part of a run: fetch if their deadline has passed. Returns what happened and
    their record as it now stands (a new one: the run saves each student's as soon as it is done)."""
    record = Record(before.source, before.deadline, list(before.collections), list(before.flags), before.problem)
    deadline = entry.deadline
    if now < deadline:
        return f"not yet due (deadline {utc_stamp(deadline)})", record
    commit, dated, problem = fetch(entry.source, clone)
    if problem:
        if record.collections:
            record.flags.append(f"at {utc_stamp(now)}: {problem}; the earlier collection stands")
            return f"kept the earlier collection: {problem}", record
        record.problem = problem
        return problem, record
    record.problem = ""
    last = record.collections[-1] if record.collections else None
    if last is not None and last["commit"] == commit:
        return f"unchanged since {last['at']}", record
    if last is not None and _rewritten(clone, last["commit"], commit):
        record.flags.append(f"history rewritten between {last['at']} and {utc_stamp(now)} (force push): "
                            f"{last['commit'][:12]} is not in the new history")
    record.collections.append({"commit": commit, "at": utc_stamp(now), "dated": dated})
    return f"collected {commit[:12]}", record


def graded(record: Record, deadline: datetime.datetime, policy: LatePolicy) -> tuple[dict[str, str] | None, datetime.datetime | None]:
    """The collection graded (the last one before the cut-off, else the first) and when its commit
    was first collected."""
    if not record.collections:
        return None, None
    times = [(parse_time(c["at"], "collected_at"), c) for c in record.collections]
    before = [c for t, c in times if t <= policy.cutoff(deadline)]
    chosen = before[-1] if before else record.collections[0]
    first = min(t for t, c in times if c["commit"] == chosen["commit"])
    return chosen, first


def date_flags(chosen: dict[str, str], first: datetime.datetime, deadline: datetime.datetime, policy: LatePolicy) -> list[str]:
    """What the commit's own date claims against when it was really collected."""
    if not chosen.get("dated"):
        return []
    dated = parse_time(chosen["dated"], "dated")
    on_time = deadline + policy.grace
    if dated > on_time and first <= on_time:
        return [f"commit dated {chosen['dated']}, after the deadline, yet collected at {utc_stamp(first)}: its date is wrong"]
    if dated <= deadline and first > on_time:
        return [f"commit dated {chosen['dated']}, before the deadline, but first collected at {utc_stamp(first)}: "
                "graded as late from when it was collected"]
    return []


def row_for(entry: Entry, record: Record | None, policy: LatePolicy, note: str) -> Row:
    path = f"{REPOS}/{entry.student}"
    if record is None or not record.collections:
        problem = (record.problem if record is not None and record.problem else
                   f"not collected yet (deadline {utc_stamp(entry.deadline)})")
        return Row(entry.student, path, "", "", utc_stamp(entry.deadline), "", "", "", f"collect: {problem}", note)
    chosen, first = graded(record, entry.deadline, policy)
    assert chosen is not None and first is not None
    days = policy.days_late(entry.deadline, first)
    flags = [*record.flags, *date_flags(chosen, first, entry.deadline, policy)]
    return Row(entry.student, path, chosen["commit"], utc_stamp(first), utc_stamp(entry.deadline), str(days),
               f"{policy.penalty(days):.4g}", " | ".join(flags), "", note)


def roster_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([r.student, r.path, r.commit, r.collected_at, r.deadline, r.late_days, r.penalty,
                         sheet_cell(r.flags), sheet_cell(r.problem)])
    return buf.getvalue()


def collect(entries: list[Entry], folder: Path, policy: LatePolicy, now: datetime.datetime | None = None,
            progress: Callable[[str], None] = lambda _: None) -> list[Row]:
    """One run over the class: fetch what is due, save the record, write ``roster.csv``."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    output_dir(folder, "the collect folder")
    state = load_state(folder)
    for e in entries:
        state.setdefault(e.student, Record(redact(e.source), utc_stamp(e.deadline)))
        state[e.student].source, state[e.student].deadline = redact(e.source), utc_stamp(e.deadline)
    notes: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=FETCHES_AT_ONCE) as pool:
        futures = {e.student: pool.submit(_collect_one, e, state[e.student], folder / REPOS / e.student, now) for e in entries}
        for k, e in enumerate(entries, start=1):
            notes[e.student], state[e.student] = futures[e.student].result()
            _save(folder, state)  # a run stopped part-way keeps what it collected, with the time it did
            progress(f"[{k}/{len(entries)}] {e.student}: {notes[e.student]}")
    rows = [row_for(e, state[e.student], policy, notes[e.student]) for e in entries]
    write_whole(folder / ROSTER, roster_csv(rows))
    return rows
