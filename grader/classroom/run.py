"""``grade_class``: a whole class (or one shard of it) into one results folder.

    OUT/students/<id>/   report.xml, report.json, report.md, results.json (Gradescope)
    OUT/grades.csv       one row per student
    OUT/summary.md       class statistics, pictures in OUT/plots/, students whose grading hit an error
    OUT/class.json       what the folder holds (labs, roster, shard, grader, options)
    OUT/lanes.log        every lane's steps, with the seconds since the run began (appended at each run)

A class runs student code only inside the sandbox: where bubblewrap cannot start, it refuses
before anything is graded (an input error naming bubblewrap's own message and what the host
needs), and every lane, in a process of its own, refuses in turn for each student. Only a TA's
choice (``--no-sandbox``, ``GRADER_SANDBOX=off``) grades without it, and then every output says so.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..engine.identity import grader_source_hash, options_key
from ..errors import GraderError
from ..gradebook import grades as gradebook
from ..gradebook.grades import Manifest
from ..gradebook.records import STUDENTS_DIR, StudentRecord
from ..host import gpus
from ..host.hostdirs import output_dir
from ..isolation import sandbox as sandboxing
from ..isolation.options import GradeOptions, default_archs, probe_for, sandbox_for
from ..labspec import paths
from ..labspec.labs import find_lab, lab_ids
from ..labspec.spec import LabSpec
from ..labspec.version import lab_version
from . import plan
from .progress import LANES_LOG, Display
from .roster import Student
from .scheduler import Scheduler
from .shard import Shard
from .student import StudentResult

#: The most students graded at once on one GPU (each holds a CUDA context per lab and tool there).
MAX_PER_GPU = 8


@dataclass(frozen=True)
class ClassOptions:
    out: Path
    labs: tuple[str, ...] = ()  # default: every lab
    force: bool = False  # regrade students whose results are current
    shard: Shard | None = None
    gpus: str | None = None  # --gpus: all, none, or positions among the visible GPUs
    jobs: int | None = None  # CPU pool size (and CPU lanes without a GPU); default: the CPU count
    visibility: str = "visible"  # of the Gradescope tests
    health_wait_s: float = 60.0  # the longest a timing waits for a disturbed GPU
    per_gpu: int = 1  # students graded at once on each GPU (their timings one at a time)
    final_only: bool = False  # refuse, before grading, a run whose grades cannot be final (an LMS export asked)


@dataclass(frozen=True)
class ClassRun:
    graded: tuple[StudentResult, ...]
    skipped: tuple[str, ...]  # current results kept
    rows: tuple[StudentRecord, ...] = field(default=())


def gpu_slots(options: GradeOptions, wanted: str | None) -> list[gpus.GpuSlot]:
    """The GPUs to grade on (none with --no-gpu, or where there is no GPU or no CuPy)."""
    if not options.gpu or os.environ.get("GRADER_NO_GPU"):
        return []
    from ..host import gpu  # CuPy and a driver, as the engine needs them

    devices = gpus.nvml_devices()
    if not devices:  # no NVML (nvidia-ml-py): the GPU the engine finds through nvidia-smi, alone
        found = gpu.probe().gpu if wanted is None or wanted.strip().lower() != "none" else None
        return [gpus.GpuSlot(found.index, "", found.name, found.compute_capability)] if found else []
    chosen = gpus.select(gpus.visible(devices, os.environ.get("CUDA_VISIBLE_DEVICES")), wanted)
    if chosen and gpu.probe().gpu is None:
        return []
    return chosen


def not_final(options: GradeOptions, slots: list[gpus.GpuSlot], wanted: str | None) -> str:
    """Why no grade of a run with ``options`` on ``slots`` can be final ("" when they can)."""
    if not slots:
        why = "--gpus none" if options.gpu and (wanted or "").strip().lower() == "none" else probe_for(options).reason
        return f"the GPU checks (correctness, sanitizers, counters, speed) will not run: {why or 'no GPU'}"
    off = [f"--no-{f}" for f in ("timing", "counters", "sanitizers") if not getattr(options, f)]
    return f"checks turned off ({', '.join(off)})" if off else ""


def manifest_for(specs: list[LabSpec], roster: list[Student], graded: list[str], shard: Shard | None, options: GradeOptions) -> Manifest:
    labs = tuple({"id": s.id, "title": s.title, "max_points": s.max_points, "version": lab_version(s)} for s in specs)
    return Manifest(labs, tuple(s.id for s in roster), tuple(graded), str(shard) if shard else None,
                    {"version": __version__, "source": grader_source_hash()}, options_key(options))


def class_sandbox(options: GradeOptions) -> tuple[GradeOptions, str]:
    """The options a class grades with (the sandbox required, in its lanes too: the options travel
    with each student), and "" or why its student code runs unsandboxed (turned off by the TA). A
    sandbox that cannot start is a GraderError (:func:`grader.isolation.sandbox.refusal`)."""
    if options.sandbox:
        options = dataclasses.replace(options, sandbox_required=True)
    found = sandbox_for(options)
    return options, "" if found.active else found.reason


def grade_class(roster: list[Student], options: GradeOptions, cls: ClassOptions, display: Display) -> ClassRun:
    """Grade the class with the course's labs (an input error when the only labs found are a
    repository's own bundle: see ``paths.course_labs``) in the sandbox (an input error where it
    cannot start, unless turned off: :func:`class_sandbox`)."""
    labs = paths.course_labs("grade-class")
    options, unsandboxed = class_sandbox(options)
    specs = [find_lab(lab_id) for lab_id in (cls.labs or tuple(lab_ids()))]
    chosen = cls.shard.select([s.id for s in roster]) if cls.shard else {s.id for s in roster}
    students = [s for s in roster if s.id in chosen]
    slots = gpu_slots(options, cls.gpus)
    partial = not_final(options, slots, cls.gpus)
    if partial and cls.final_only:
        raise GraderError(f"--export: {partial}, so no grade of this run would be final, and an LMS takes final grades only: "
                          "nothing was graded; grade where the checks run, or pass --allow-partial to export partial grades "
                          "(canvas.partial.csv, moodle.partial.csv)")
    if partial:
        display.say(f"not a final grade: {partial}")
    if not slots and options.gpu and (cls.gpus or "").strip().lower() == "none":
        options = dataclasses.replace(options, gpu=False)  # --gpus none: CPU lanes, even on a machine with a GPU
    where = ", ".join(sorted({s.name for s in slots})) or "no GPU"
    output_dir(cls.out, "the --out folder")
    output_dir(cls.out / STUDENTS_DIR, "the students' results folder")
    plan.recover(cls.out)
    scratch = Path(tempfile.mkdtemp(prefix="grade-class-"))
    display.keep_log(cls.out / LANES_LOG)
    if unsandboxed:
        display.warn(f"NOT SANDBOXED: student code runs without bubblewrap in this run ({unsandboxed}): it can read and "
                     "change whatever the grader's user can; grades.csv, summary.md and dashboard.html say so")
    try:
        outputs = {"gradescope_visibility": cls.visibility}
        jobs = [plan.plan_student(s, specs, options, cls.out, scratch, where, labs, outputs) for s in students]
        current = {j.student.id for j in jobs if not cls.force and plan.is_done(j)}
        todo = [j for j in jobs if j.student.id not in current]
        skipped = tuple(j.student.id for j in jobs if j.student.id in current)
        archs: list[tuple[str, ...]] = [options.archs] if options.archs else sorted({(s.arch,) for s in slots})
        archs = archs or [default_archs()]
        scheduler = Scheduler(options, slots, archs, display, cls.jobs, cls.visibility, cls.health_wait_s, cls.per_gpu)
        # every student's folder, and the commits' files, out of sight of every student's sandbox
        with sandboxing.kept_out([*(s.path for s in roster), scratch]):
            graded = scheduler.run(todo, skipped=len(skipped))
    finally:
        display.end_log()
        shutil.rmtree(scratch, ignore_errors=True)
    manifest = manifest_for(specs, roster, [s.id for s in students], cls.shard, options)
    rows = gradebook.write(cls.out, manifest)
    return ClassRun(tuple(graded), skipped, tuple(rows))
