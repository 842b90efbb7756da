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
a history rewritten between two collections (a force push), and a commit date no calendar holds
(past the year 9999: git accepts it). Each collection is stamped with the time its own fetch began
(what the server's branch held then), not the run's start; whether a student is due yet is decided
at the run's start.

One student never ends the run: a repository that is gone, private, empty, too large or refused,
a fetch that fails, and any error of the grader's own on one student is that student's row (or a
flag, where an earlier collection stands), and ``roster.csv`` is written. How each repository is
fetched, bounded and kept from running anything here: :mod:`grader.host.gitfetch`. A repository
given as a folder of this machine or a ``file://`` URL is refused unless the TA passes
``--allow-local``, and flagged in ``roster.csv`` when it is allowed.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..context import carried
from ..engine.identity import utc_stamp
from ..errors import INTERNAL_ERROR, GraderError, internal_error_message
from ..gradebook.late import DAY, LatePolicy
from ..host import gitfetch
from ..host.gitfetch import fetch, redact
from ..host.hostdirs import output_dir
from ..host.safeio import SOURCE_LIMIT_BYTES, write_whole
from ..textutil import sheet_cell
from .roster import REPOSITORY_WORDS, STUDENT_WORDS, Layout, RosterError, read_text, records

STATE = "collected.json"
ROSTER = "roster.csv"
REPOS = "repos"
STATE_VERSION = 1
#: The columns of the roster ``collect`` writes (``grade-class`` reads every one of them).
COLUMNS = ("student", "path", "commit", "collected_at", "deadline", "late_days", "penalty", "flags", "problem", "ontime_commit",
           "graded_commit")
FETCHES_AT_ONCE = 8
#: The collect roster, read by the same parser and header rules as ``grade-class``'s.
LAYOUT = Layout("a collect roster", ("student", "repository", "extension"), ("student", "repository", "extension"),
                ("student", "repository"),
                {"student": STUDENT_WORDS, "repository": (*REPOSITORY_WORDS, "path"),
                 "extension": ("deadline", "due", "extra", "days", "until")}, repository="repository")


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
    # commit, at (ISO: when its fetch began), dated (the commit's own claim: ISO, or @seconds past
    # the year 9999), left_out (files under labs/ left on the server, over the size filter)
    collections: list[dict[str, str]] = field(default_factory=list)
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
    ontime_commit: str = ""  # the last commit collected on time, where a later one is graded (graded_commit: best)
    graded_commit: str = ""  # the policy's choice: latest or best


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
    """The collect roster: ``student,repository[,extension]`` (a header line is optional; see
    :func:`grader.classroom.roster.records`). A path is relative to the roster."""
    entries = []
    for number, fields in records(read_text(path), path, LAYOUT):
        source = fields["repository"]
        if gitfetch.is_path(source):
            source = str((path.parent / source).absolute())
        own = _extension(fields["extension"], deadline, f"{path}:{number}") if fields.get("extension") else deadline
        entries.append(Entry(fields["student"], source, own, number))
    return entries


def _extension(text: str, deadline: datetime.datetime, where: str) -> datetime.datetime:
    """A student's own deadline: an ISO time, or days (``2``, ``+1.5``) after the course's."""
    if re.fullmatch(r"\+?\d+(\.\d+)?", text):
        try:
            return deadline + float(text) * DAY
        except OverflowError:
            raise RosterError(f"extension {text!r}: more days than a calendar holds", path=where) from None
    try:
        return parse_time(text, "extension")
    except GraderError as exc:
        raise RosterError(f"{exc} (or a number of days)", path=where) from None


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


def _copy(record: Record) -> Record:
    return Record(record.source, record.deadline, list(record.collections), list(record.flags), record.problem)


def _failed(record: Record, problem: str, at: datetime.datetime) -> tuple[str, Record]:
    """Nothing collected this time: the student's problem, or a flag where an earlier collection stands."""
    if record.collections:
        record.flags.append(f"at {utc_stamp(at)}: {problem}; the earlier collection stands")
        return f"kept the earlier collection: {problem}", record
    record.problem = problem
    return problem, record


def _grader_error(exc: Exception) -> str:
    """A grader error on one student, as their row says it (its trace logged where the log can be
    written), short."""
    try:
        message = internal_error_message(exc)
    except OSError:  # no log to write to: the message alone
        message = f"{INTERNAL_ERROR} ({type(exc).__name__}: {exc})"
    return message if len(message) <= 400 else message[:397] + "..."


def dated(seconds: str) -> str:
    """A commit's own date (git's seconds since 1970) as ISO, or ``@seconds`` where no calendar date
    holds it (past the year 9999, which git accepts); "" where git gave none."""
    if not seconds.isdigit():
        return ""
    if len(seconds) <= 12:  # 253402300799 is the last second of the year 9999
        try:
            return utc_stamp(datetime.datetime.fromtimestamp(int(seconds), datetime.timezone.utc))
        except (ValueError, OverflowError, OSError):
            pass
    return f"@{seconds[:24]}" + ("..." if len(seconds) > 24 else "")


def _fetch_into(entry: Entry, record: Record, clone: Path, at: datetime.datetime, allow_local: bool) -> tuple[str, Record]:
    got = fetch(entry.source, clone, allow_local)
    if got.problem:
        return _failed(record, redact(got.problem), at)
    record.problem = ""
    last = record.collections[-1] if record.collections else None
    if last is not None and last["commit"] == got.commit:
        return f"unchanged since {last['at']}", record
    if last is not None and gitfetch.rewritten(clone, last["commit"], got.commit):
        record.flags.append(f"history rewritten between {last['at']} and {utc_stamp(at)} (force push): "
                            f"{last['commit'][:12]} is not in the new history")
    collection = {"commit": got.commit, "at": utc_stamp(at), "dated": dated(got.committed)}
    if got.left_out:
        collection["left_out"] = ", ".join(got.left_out)
    record.collections.append(collection)
    return f"collected {got.commit[:12]}", record


def _collect_one(entry: Entry, before: Record, clone: Path, now: datetime.datetime, clock: Callable[[], datetime.datetime],
                 allow_local: bool) -> tuple[str, Record]:
    """One student's part of a run: fetch if their deadline has passed (at the run's start ``now``),
    stamped with ``clock``'s time as the fetch begins. Returns what happened and their record as it
    now stands (a new one: the run saves each student's as soon as it is done). Never raises for
    the student's repository: a grader error on it is their problem, and the class goes on."""
    if now < entry.deadline:
        return f"not yet due (deadline {utc_stamp(entry.deadline)})", _copy(before)
    at = clock()
    try:
        return _fetch_into(entry, _copy(before), clone, at, allow_local)
    except Exception as exc:  # a bug of the grader's on this student: recorded with an id, the run goes on
        return _failed(_copy(before), _grader_error(exc), at)


def first_run_late(state: dict[str, Record], deadline: datetime.datetime, policy: LatePolicy,
                   now: datetime.datetime | None = None) -> str:
    """Why this run makes everyone late ("" if it does not): nothing has been collected for the
    deadline yet, and the run starts after it (and its grace), so every student it collects is
    late by when their work is first collected."""
    now = now or _now()
    if any(rec.collections for rec in state.values()) or now <= deadline + policy.grace:
        return ""
    return (f"this is the first collection for the deadline {utc_stamp(deadline)} and it starts at {utc_stamp(now)}, "
            "after it: every student it collects is late by when their work is collected now. Run collect at the "
            "deadline (cron, a scheduled job); for a deadline already past, set grace_minutes in the late policy to "
            "cover the delay, or treat this run's late days with care")


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
    if chosen["dated"].startswith("@"):
        return [f"commit dated {chosen['dated']} (seconds since 1970), past the year 9999: its date is wrong"]
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
    if chosen.get("left_out"):
        flags.append(f"left on the server, over the {gitfetch.FILTER_BYTES >> 20} MiB a fetched file may hold (a graded file "
                     f"may hold {SOURCE_LIMIT_BYTES >> 20} MiB): {chosen['left_out']}; graded as too large")
    if gitfetch.is_local(entry.source):
        flags.append(f"collected from a folder of this machine, not a hosted repository (--allow-local): {redact(entry.source)}")
    which = policy.roster_columns(record.collections, entry.deadline, chosen["commit"])
    return Row(entry.student, path, chosen["commit"], utc_stamp(first), utc_stamp(entry.deadline), str(days),
               f"{policy.penalty(days):.4g}", " | ".join(flags), "", note, which["ontime_commit"], which["graded_commit"])


def roster_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow([r.student, r.path, r.commit, r.collected_at, r.deadline, r.late_days, r.penalty,
                         sheet_cell(r.flags), sheet_cell(r.problem), r.ontime_commit, r.graded_commit])
    return buf.getvalue()


def _row(entry: Entry, record: Record | None, policy: LatePolicy, note: str) -> Row:
    """:func:`row_for`, or the student's problem row where the grader fails on it."""
    try:
        return row_for(entry, record, policy, note)
    except Exception as exc:  # a bug of the grader's on this student: their row says so, the roster is written
        return Row(entry.student, f"{REPOS}/{entry.student}", "", "", utc_stamp(entry.deadline), "", "", "",
                   f"collect: {_grader_error(exc)}", note)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _fixed(t: datetime.datetime) -> Callable[[], datetime.datetime]:
    return lambda: t


def collect(entries: list[Entry], folder: Path, policy: LatePolicy, now: datetime.datetime | None = None,
            progress: Callable[[str], None] = lambda _: None, *, clock: Callable[[], datetime.datetime] | None = None,
            allow_local: bool = False) -> list[Row]:
    """One run over the class: fetch what is due, save the record, write ``roster.csv``.

    ``now`` is the run's start (who is due); ``clock`` stamps each fetch (by default the real time,
    or ``now`` itself where only ``now`` is given: a test's fixed clock). ``allow_local`` lets a
    student's repository be a folder of this machine or a ``file://`` URL (flagged)."""
    clock = clock or (_fixed(now) if now is not None else _now)
    start = now or clock()
    output_dir(folder, "the collect folder")
    state = load_state(folder)
    for e in entries:
        state.setdefault(e.student, Record(redact(e.source), utc_stamp(e.deadline)))
        state[e.student].source, state[e.student].deadline = redact(e.source), utc_stamp(e.deadline)
    notes: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=FETCHES_AT_ONCE) as pool:
        futures = {e.student: pool.submit(carried(_collect_one), e, state[e.student], folder / REPOS / e.student, start, clock, allow_local)
                   for e in entries}
        for k, e in enumerate(entries, start=1):
            notes[e.student], state[e.student] = futures[e.student].result()
            _save(folder, state)  # a run stopped part-way keeps what it collected, with the time it did
            progress(f"[{k}/{len(entries)}] {e.student}: {notes[e.student]}")
    rows = [_row(e, state[e.student], policy, notes[e.student]) for e in entries]
    write_whole(folder / ROSTER, roster_csv(rows))
    return rows
