"""Readying a GPU before its first student: each lab's baselines' timing session is opened in
the process's baselines worker and every baseline called once, untimed.

CuPy compiles the kernels that generate, flush and compare timed inputs the first time they
run, into the trusted kernel cache that every sandboxed worker starts from a copy of. On an empty
cache each of the first student's workers compiled the same kernels for itself (37 s of that
student's 57 s on an H100, cold). Rehearsed once, ahead, the workers start from a full cache and
the first timing finds the baselines' sessions open. With a full cache it takes about 2 s.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

from ..checks.timing import SampleFailed, baselines_of, inputs_only, rehearse
from ..context import carried
from ..errors import internal_error_message
from ..isolation.build import baseline_library
from ..isolation.options import GradeOptions, Progress, archs_for, no_progress, probe_for, secret_of
from ..isolation.trusted import trusted_worker
from ..labspec.spec import LabSpec
from .plan import runnable


def rehearse_timings(specs: list[LabSpec], options: GradeOptions, progress: Progress = no_progress) -> list[str]:
    """Rehearse the timing of every lab of ``specs`` that is timed (see the module); the problems,
    one line per lab that could not be rehearsed. Never raises: its students meet the same
    problem and report it."""
    timed = [(spec, spec.benchmark) for spec in map(runnable, specs) if spec.benchmark is not None and spec.benchmark.checks]
    if not options.gpu or not options.timing or not timed:
        return []
    probe = probe_for(options)
    if probe.gpu is None:
        return []
    started = time.monotonic()
    archs = archs_for(options, probe)
    progress(f"readying the timing of {len(timed)} labs: their baselines, and the GPU kernels of their inputs")
    worker = trusted_worker(options, probe.gpu)
    secret = secret_of(options)
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="rehearsal-build") as pool:  # all at once, ahead
        for spec, bench in timed:
            for name in baselines_of(bench):
                pool.submit(carried(baseline_library), spec, name, archs, options.cache_dir)
        for spec, bench in timed:  # meanwhile the kernels that make each lab's inputs, which need no library
            with contextlib.suppress(Exception):  # the rehearsal proper below says what went wrong
                worker.run(inputs_only(spec, secret), bench.time_limit_s)
    problems = []
    for spec, _ in timed:
        try:
            rehearse(spec, archs, options.cache_dir, secret, worker)
        except SampleFailed as failed:
            problems.append(f"{spec.id}: {failed.result.reason or failed.result.status}")
        except Exception as exc:
            problems.append(f"{spec.id}: {internal_error_message(exc)}")
    progress(f"timing readied in {time.monotonic() - started:.1f} s" + (f"; not for {'; '.join(problems)}" if problems else ""))
    return problems
