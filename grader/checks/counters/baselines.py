"""The baselines' profiled cases of many labs, made ahead in few trusted profiler sessions.

A counter check, or a timed case's DRAM traffic, profiles the lab's baseline kernel on the same
case as the student's: trusted, and cached per GPU, driver, metrics and case
(``counters.baseline_run``). On an empty cache each was a profiler run of its own when its lab
came to it, and each run pays for the profiler's and a CUDA context's start (about 3 s), one
after another on the GPU's profiler lock: a dozen runs for the five labs. Here every baseline
case of the labs about to be graded that is not cached yet is profiled ahead, in one session
per kind of case (the worker runs them in turn between markers, as a student's session does),
into that same cache. Cases whose metrics need SASS instrumentation (``smsp__sass_*``), which
slows every kernel of its session, are kept apart from those that need none (the timed case's
DRAM bytes, on the largest inputs). A case a session does not settle is left to its lab, which
profiles it alone as before. The GPU's lanes (``grade-class --per-gpu``) start their first
students together: one makes the profiles under the GPU's baselines lock, and the others, waiting
for it, find them made.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ...cachedirs import default_cache_dir
from ...host import toolchain
from ...host.gpu import GpuInfo
from ...host.gpulock import BASELINES_LOCK, lock_folder
from ...host.hostlock import hold
from ...isolation.build import baseline_library
from ...isolation.launch import Isolation, RunDirs
from ...isolation.options import GradeOptions, Progress, archs_for, no_progress, probe_for
from ...isolation.trusted import trusted_isolation
from ...labspec.labs import load_problem
from ...labspec.spec import LabSpec
from ..correctness import case_tool_task
from . import launched
from . import ncu as counters
from .batch import Request, profile_together

#: Metrics counted by instrumenting the kernel's code rather than by the hardware's counters.
INSTRUMENTED = "smsp__sass_"
#: The longest a grading waits for another to profile the baselines (then its labs profile what they
#: need): a dozen cases take 5-10 s on an H100, and a stuck holder must not hold up every student for long.
LOCK_WAIT_S = 120.0


@dataclass(frozen=True)
class Pending:
    """One baseline case to profile, and where its counters are kept."""

    request: Request
    cache_file: Path


def profile_baselines(specs: list[LabSpec], options: GradeOptions, progress: Progress = no_progress) -> int:
    """Profile ahead every baseline case of ``specs`` (each as this copy of the course grades it:
    ``engine.plan.runnable``) that is not cached (see the module); the number of cases profiled.
    Never raises: a lab profiles alone what this leaves."""
    probe = probe_for(options)
    if not options.counters or probe.gpu is None or toolchain.find("ncu") is None:
        return 0
    cache_dir = options.cache_dir or default_cache_dir()
    isolation = trusted_isolation(options)
    root = Path(tempfile.mkdtemp(prefix="grade-baselines-"))
    try:
        # (what another grading profiled while this one waited is cached by now: only the rest is pending)
        with hold(lock_folder(probe.gpu), BASELINES_LOCK, "the baselines' lock", "profiling the baselines ahead", LOCK_WAIT_S):
            todo = pending(specs, options, archs_for(options, probe), probe.gpu, cache_dir, isolation, root)
            if todo:
                progress(f"profiling the baselines' {len(todo)} cases for the counter checks and rooflines "
                         "(once per GPU and driver; kept for later grades)")
            for group in kinds(todo):
                settled = profile_together([p.request for p in group])
                for p in group:
                    run = settled.get((p.request.lab, p.request.key))
                    if run is not None:
                        counters.store(p.cache_file, run, p.request.metrics)
            return len(todo)
    except Exception:  # an optimisation only: each lab meets the same problem and reports it
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def pending(specs: list[LabSpec], options: GradeOptions, archs: tuple[str, ...], gpu: GpuInfo, cache_dir: Path,
            isolation: Isolation, root: Path) -> list[Pending]:
    """The baseline cases of ``specs`` not cached yet, each once, with its inputs written under ``root``."""
    out: dict[tuple[str, str, counters.CaseKey], Pending] = {}
    for spec in specs:
        profiles = launched.profiles_for(spec, options.timing)
        for check in profiles.checks:
            key = profiles.case(check)
            if not check.baseline or (spec.id, check.baseline, key) in out:
                continue
            metrics = profiles.metrics[key]
            try:
                library = baseline_library(spec, check.baseline, archs, cache_dir)
            except Exception:  # (not here, or not compiling: its lab reports it)
                continue
            cache_file = counters.cache_path(counters.baseline_key(gpu, metrics, check, spec), cache_dir, library)
            if counters.cached(cache_file) is not None:
                continue
            label = f"{spec.id} {check.baseline} {len(out)}"  # (a session tells its runs apart by label and case)
            dirs = RunDirs(root / str(len(out)) / "in", root / str(len(out)) / "out")
            task = case_tool_task(spec, load_problem(spec), check, dirs, library, cache_dir)
            request = Request(label, key, metrics, task, isolation, check.time_limit_s, dirs, gpu, threading.Event())
            out[(spec.id, check.baseline, key)] = Pending(request, cache_file)
    return list(out.values())


def kinds(todo: list[Pending]) -> list[list[Pending]]:
    """``todo`` in sessions: the cases that need instrumented metrics apart from the others."""
    groups: dict[bool, list[Pending]] = {}
    for p in todo:
        groups.setdefault(any(m.startswith(INSTRUMENTED) for m in p.request.metrics), []).append(p)
    return list(groups.values())
