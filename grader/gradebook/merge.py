"""``cuda-grader merge SHARD_DIR... --out DIR``: the shards of one class, as one results folder.

Every shard of the roster must be there exactly once, graded with the same labs, grader and
options; each student's folder is copied as it is, and the class-wide files are written from
them exactly as a single run writes them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import GraderError
from ..host.hostdirs import output_dir
from . import grades as gradebook
from .grades import Manifest
from .records import STUDENTS_DIR, StudentRecord, student_folder


def _check(shards: list[tuple[Path, Manifest]]) -> int:
    """The shard count, once the shards are known to make up one class."""
    first_dir, first = shards[0]
    seen: dict[int, Path] = {}
    count = 0
    for folder, m in shards:
        if m.shard is None:
            raise GraderError("not a shard: it was graded without --shard (nothing to merge)", path=folder)
        index, _, n = m.shard.partition("/")
        count = int(n)
        for what, mine, theirs in (("roster", m.roster, first.roster), ("labs", m.labs, first.labs),
                                   ("grader", m.grader, first.grader), ("options", m.options, first.options)):
            if mine != theirs:
                raise GraderError(f"its {what} differs from that of {first_dir} (shards of one class are graded alike)",
                                  path=folder)
        if first.shard is not None and int(first.shard.partition("/")[2]) != count:
            raise GraderError(f"shard {m.shard} is from a split into {count}, {first_dir} from {first.shard}", path=folder)
        if int(index) in seen:
            raise GraderError(f"shard {m.shard} is given twice (also {seen[int(index)]})", path=folder)
        seen[int(index)] = folder
    missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in seen]
    if missing:
        raise GraderError(f"missing shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} of this class")
    return count


def merge(folders: list[Path], out: Path) -> list[StudentRecord]:
    if not folders:
        raise GraderError("merge: give the shards' results folders")
    for folder in folders:
        if folder.resolve() == out.resolve():
            raise GraderError("--out must be a new folder, not one of the shards", path=out)
    output_dir(out, "the --out folder")
    shards = [(folder, gradebook.read_manifest(folder)) for folder in folders]
    _check(shards)
    owner: dict[str, Path] = {}
    for folder, m in shards:
        for sid in m.students:
            if not (student_folder(folder, sid) / "report.json").is_file():
                raise GraderError(f"student {sid!r} has no results in this shard (did its run finish?)", path=folder)
            owner[sid] = folder
    first = shards[0][1]
    absent = [sid for sid in first.roster if sid not in owner]
    if absent:
        raise GraderError(f"no shard holds the results of {', '.join(absent[:5])}" + (" ..." if len(absent) > 5 else ""))
    output_dir(out / STUDENTS_DIR, "the students' results folder")
    for sid in first.roster:
        target = student_folder(out, sid)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(student_folder(owner[sid], sid), target)
    merged = Manifest(first.labs, first.roster, first.roster, None, first.grader, first.options)
    return gradebook.write(out, merged)
