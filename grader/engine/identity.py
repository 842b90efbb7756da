"""Whose work a report graded, with what: the identity block of every JSON report.

Student, repository, commit, the sha256 of every graded file, when, the grader's version and a
hash of its sources, each lab's version (a hash of the lab's files), where the labs came from
(``--labs``, ``GRADER_LABS_DIR``, the course checkout, or the graded repository's own bundle: then
the grade is feedback) with a hash of that folder, the GPU, its driver and the sandbox.
``content_hash`` covers what decides a grade (the submitted files, the lab files, the grader and
the options that change which checks run): a class run that finds a report with the same hash
skips that student. ``schemas/report.schema.json`` describes the JSON.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .. import __version__
from ..context import LAB_PATH, REPOSITORY_BUNDLE, LabsLocation
from ..errors import GraderError
from ..host.safeio import SOURCE_LIMIT_BYTES, read_beneath, read_file
from ..isolation.options import GradeOptions, probe_for, sandbox_for
from ..isolation.sandbox import detect as detect_sandbox
from ..labspec import paths
from ..labspec.spec import LabSpec
from ..labspec.version import lab_version, sha256, tree_hash
from ..outcome import LabReport

GRADER_PACKAGE = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def grader_source_hash() -> str:
    """A hash of the grader's own sources: two checkouts with one version number may differ."""
    files = sorted(p for p in GRADER_PACKAGE.rglob("*") if p.suffix in (".py", ".cu") and "__pycache__" not in p.parts)
    return tree_hash((p.relative_to(GRADER_PACKAGE).as_posix(), p.read_bytes()) for p in files)


#: The most of one file a labs folder's hash reads (lab files are small; a larger one is hashed by its start and size).
LAB_FILE_LIMIT = 16 << 20


@functools.lru_cache(maxsize=None)
def labs_folder_hash(folder: str) -> str:
    """A hash over every file below a labs folder, links named (never followed), Python's
    byte-code caches left out (importing a lab's problem.py writes them)."""
    named: list[tuple[str, bytes]] = []
    for top, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in names:
            path = Path(top) / name
            rel = path.relative_to(folder).as_posix()
            try:
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    named.append((rel, b"link -> " + os.fsencode(os.readlink(path))))
                elif stat.S_ISREG(info.st_mode):
                    named.append((rel, read_file(path, LAB_FILE_LIMIT, "a lab file") if info.st_size <= LAB_FILE_LIMIT
                                  else f"{info.st_size} bytes".encode()))
            except (GraderError, OSError) as exc:
                named.append((rel, f"unreadable: {exc}".encode()))
    return tree_hash(named)


@dataclass(frozen=True)
class LabsUsed:
    """Where the labs of a grading came from (see ``grader.labspec.paths``)."""

    origin: str  # --labs, GRADER_LABS_DIR, course checkout, repository bundle, lab path given
    folder: str  # the labs folder, absolute
    hash: str  # labs_folder_hash of it

    @property
    def feedback_only(self) -> bool:
        return self.origin == REPOSITORY_BUNDLE


def labs_used(specs: list[LabSpec], location: LabsLocation | None = None) -> LabsUsed:
    """Where ``specs`` came from: the labs folder found (``location``, default: as this process
    finds it), or, for a lab named by its path, that lab's folder."""
    found = location or paths.locate_labs()
    folder = found.path.resolve() if found.path is not None else None
    origin: str = found.origin or ""
    if folder is None or any(not spec.root.is_relative_to(folder) for spec in specs):
        outside = [spec.root for spec in specs if folder is None or not spec.root.is_relative_to(folder)]
        folder, origin = (outside[0] if len(outside) == 1 else Path(os.path.commonpath(outside))), LAB_PATH
    return LabsUsed(origin, str(folder), labs_folder_hash(str(folder)))


def file_hashes(root: Path, rels: Iterable[str]) -> dict[str, str | None]:
    """sha256 of each file below ``root`` (None where it is missing or cannot be graded: a link,
    a folder, too large). Read as the grader reads submissions: no link followed, capped."""
    out: dict[str, str | None] = {}
    for rel in rels:
        try:
            out[rel] = sha256(read_beneath(root, rel, SOURCE_LIMIT_BYTES))
        except (GraderError, OSError):
            out[rel] = None
    return out


def single_file_hash(path: Path) -> str | None:
    try:
        return sha256(read_file(path, SOURCE_LIMIT_BYTES))
    except (GraderError, OSError):
        return None


def options_key(options: GradeOptions) -> dict[str, Any]:
    """The options that change a grade (what runs and where); not caches or progress."""
    return {"gpu": options.gpu, "timing": options.timing, "counters": options.counters, "sanitizers": options.sanitizers,
            "archs": list(options.archs) if options.archs else None, "sandbox": options.sandbox,
            "time_limit_s": options.submission_limit_s}


def content_hash(files: Mapping[str, str | None], labs: Mapping[str, str], options: GradeOptions, where: str = "",
                 outputs: Mapping[str, str] | None = None) -> str:
    """``where``: the kind of machine (the GPU model, or none): results from a machine without a
    GPU are not current for one with a GPU. ``outputs``: settings of what is written (a class's
    Gradescope visibility), which a result must match to be current too."""
    doc = {"files": dict(files), "labs": dict(labs), "grader": [__version__, grader_source_hash()],
           "options": options_key(options), "where": where, "outputs": dict(outputs or {})}
    return sha256(json.dumps(doc, sort_keys=True).encode())


@dataclass(frozen=True)
class Identity:
    student: str | None
    repository: str | None  # the folder graded, as given (absolute)
    commit: str | None  # the commit graded (git), None when not a git repository
    files: Mapping[str, str | None]  # path as the student knows it -> sha256 (None: missing or refused)
    labs: Mapping[str, str]  # lab id -> lab version
    content_hash: str
    labs_origin: str = ""  # where the labs came from (see LabsUsed); "repository bundle": the grade is feedback
    labs_folder: str = ""
    labs_hash: str = ""  # a hash of every file in labs_folder
    grader_version: str = __version__
    grader_source: str = field(default_factory=grader_source_hash)
    graded_at: str = ""  # ISO 8601, UTC
    host: str = ""
    gpu: str = ""  # the GPU's name, or "none: why"
    driver: str | None = None
    sandbox: str = ""
    late: Mapping[str, Any] | None = None  # from a collected roster: deadline, collected_at, late_days, penalty, flags

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["files"], d["labs"] = dict(self.files), dict(self.labs)
        d["late"] = dict(self.late) if self.late is not None else None
        return d


def identify(specs: list[LabSpec], files: Mapping[str, str | None], options: GradeOptions, *,
             student: str | None = None, repository: Path | None = None, commit: str | None = None,
             where: str = "", location: LabsLocation | None = None, outputs: Mapping[str, str] | None = None,
             late: Mapping[str, Any] | None = None) -> Identity:
    """The identity of a grading about to run (when and where are filled in by :func:`completed`);
    ``location``: where the labs were found (default: as this process finds them)."""
    labs = {spec.id: lab_version(spec) for spec in specs}
    used = labs_used(specs, location)
    return Identity(student, str(repository.absolute()) if repository is not None else None, commit, dict(files), labs,
                    content_hash(files, labs, options, where, {**(outputs or {}), **({"late": json.dumps(late, sort_keys=True)} if late else {})}),
                    used.origin, used.folder, used.hash, late=late)


def utc_stamp(t: datetime.datetime) -> str:
    """``t`` as reports write times: ISO 8601 in UTC to the second (``2026-12-01T23:59:00Z``)."""
    return t.astimezone(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _sandbox_said(options: GradeOptions) -> str:
    """The sandbox a grading would use, for a report none of whose labs got as far as saying it; where
    a class's sandbox could not start, that it was refused (no student code ran)."""
    try:
        return sandbox_for(options).describe()
    except GraderError:
        return f"refused: {detect_sandbox().reason}; no student code ran"


def completed(identity: Identity, reports: list[LabReport], options: GradeOptions) -> Identity:
    """``identity`` with the time, the host, the GPU and the sandbox that graded ``reports``."""
    env: Mapping[str, object] = reports[0].environment if reports and reports[0].environment else {}
    gpu, driver, sandbox = env.get("gpu"), env.get("driver"), env.get("sandbox")
    if gpu is None or sandbox is None:  # no lab got as far as describing its environment
        probe = probe_for(options)
        gpu = probe.gpu.name if probe.gpu else f"none: {probe.reason}"
        driver = probe.gpu.driver if probe.gpu else None
        sandbox = _sandbox_said(options)
    now = utc_stamp(datetime.datetime.now(datetime.timezone.utc))
    return dataclasses.replace(identity, graded_at=now, host=socket.gethostname(), gpu=str(gpu),
                               driver=str(driver) if driver is not None else None, sandbox=str(sandbox))
