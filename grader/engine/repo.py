"""Grading a whole student repository (the ``student_template/`` layout): every lab, one report.

Labs are started together (compile, static checks, correctness, with sanitizer and counter
runs in the background), and timed one by one once no profiler or sanitizer is left running and
every other lab's student worker is stopped, so the timed calls have the GPU to themselves. A
lab that is missing or breaks the grader gets a report that says so; the others are graded as
usual.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from ..checks.families.registry import FAMILIES
from ..context import carried, current
from ..errors import GraderError, internal_error_message
from ..host import gputurns
from ..host.gpu import key_of
from ..host.procgroup import TEARDOWNS
from ..host.safeio import UnsafeFile, submission_file
from ..isolation.build import lab_build
from ..isolation.options import GradeOptions, Progress, archs_for, kernel_cache, no_progress, probe_for, sandbox_for, usable_cpus
from ..isolation.sandbox import Sandbox
from ..isolation.trusted import trusted_worker
from ..labspec.labs import find_lab, lab_ids
from ..labspec.spec import LabSpec
from ..outcome import CheckResult, LabReport, Outcome, Stage
from ..worker import expr
from .grade import LabGrading
from .phases import Together
from .plan import course_only_results, fill_checks, in_plan_order, runnable
from .rehearsal import rehearse_timings

#: The stage seconds of the wait for the GPU to be fit before a lab's timing (in a class run),
#: shown from GATE_SHOWN_S on.
HEALTH_GATE, GATE_SHOWN_S = "health_gate", 0.05
#: Where each lab's file lives in a student repository.
SUBMISSION_PATH = "labs/{lab}/student.cu"
#: The longest the timing waits for a cold grade's rehearsal (it only speeds the timing up).
REHEARSAL_WAIT_S = 120.0


#: Called before a lab is timed; returns "" when the GPU is fit for timing, else why it is not
#: (the timing then goes ahead and the report says it was taken on a disturbed GPU).
TimingGate = Callable[[LabSpec], str]


def submission_rel(lab_id: str) -> str:
    return SUBMISSION_PATH.format(lab=lab_id)


def submission_path(repo: Path, lab_id: str) -> Path:
    return repo / submission_rel(lab_id)


def _missing(spec: LabSpec, path: Path, display: str, why: str = "") -> LabReport:
    what = why or ("is a directory, not a file" if path.is_dir() and not path.is_symlink() else "not found")
    compile_check = CheckResult("compile", Stage.COMPILE, Outcome.ERROR, 0, 0,
                                f"{display} {what}: the lab's file must be at {SUBMISSION_PATH.format(lab=spec.id)}")
    checks = [compile_check, *fill_checks(runnable(spec), [compile_check], set(Stage), Outcome.FAIL, "not graded: no submission")]
    return LabReport(spec.id, spec.title, display, tuple(in_plan_order(spec, [*checks, *course_only_results(spec)])))


def _unsafe(path: Path, root: Path | None, display: str) -> str:
    """Why ``path`` cannot be graded ("" if it can): it must be a regular file, reached through
    no symbolic link (inside ``root`` when given), so that a link cannot hand in the reference."""
    try:
        if root is not None:
            submission_file(root, display)
        else:
            submission_file(path.parent, path.name)
    except UnsafeFile as exc:
        return str(exc).removeprefix(f"{display}: ")
    except (GraderError, OSError):
        return "not found"
    return ""


def _crashed(spec: LabSpec, display: str, exc: BaseException) -> LabReport:
    # a user-input problem (say, an unreadable file) is shown as it is, not logged as our bug
    message = str(exc) if isinstance(exc, GraderError) else internal_error_message(exc)
    return failed_report(spec, display, message)


def failed_report(spec: LabSpec, display: str, message: str, rest: str = "not graded: the grader failed on this lab",
                  rest_outcome: Outcome = Outcome.ERROR) -> LabReport:
    """A lab that could not be graded at all: an error on its first check, the others not graded."""
    first = CheckResult("compile", Stage.COMPILE, Outcome.ERROR, 0, 0, message)
    checks = [first, *fill_checks(runnable(spec), [first], set(Stage), rest_outcome, rest)]
    return LabReport(spec.id, spec.title, display, tuple(in_plan_order(spec, [*checks, *course_only_results(spec)])))


def prebuild(items: list[tuple[LabSpec, Path, str]], options: GradeOptions, jobs: int | None = None) -> None:
    """Compile many submissions, their labs' baselines and the families' helper programs in
    parallel, into the build cache.

    Only an optimisation for batches: grading then finds every build cached. Failures are left
    for grading to report.
    """
    archs = archs_for(options, probe_for(options))
    sandbox = sandbox_for(options)
    builds: dict[tuple[str, Path, str | None], tuple[LabSpec, Sandbox | None]] = {
        (spec.id, path, display): (spec, sandbox) for spec, path, display in items if path.is_file()}
    with_gpu = options.gpu and probe_for(options).gpu is not None  # baselines run on a GPU alone: no build without one
    for spec, _, _ in items:
        if with_gpu:
            for name in spec.baseline_names:
                builds[(spec.id, spec.baseline_source(name), None)] = (spec, None)
    with ThreadPoolExecutor(max_workers=jobs or usable_cpus()) as pool:  # every core: a cold start compiles 15 sources
        futures: list[Future[object]] = [pool.submit(carried(helper)) for family in FAMILIES for helper in family.helpers(options)]
        futures += [pool.submit(carried(lab_build), spec, path, archs, options.cache_dir, display, box)
                    for (_, path, display), (spec, box) in builds.items()]
        for future in futures:
            try:
                future.result()
            except Exception:
                pass


def grade_many(
    items: list[tuple[LabSpec, Path, str]],
    options: GradeOptions = GradeOptions(),
    progress: Progress = no_progress,
    window: int = 5,
    root: Path | None = None,
    before_timing: TimingGate | None = None,
) -> list[LabReport]:
    """Grade (spec, source, display name) items, ``window`` at a time, reports in item order.

    Within a window every item is started (all at once, in threads); once all background runs
    are over every timing opens at once (nothing timed), then each is timed in turn and scored
    beside the next one's timing: a profiler or sanitizer never runs beside a timed call, only
    the grader's own checks on the CPU.
    With ``root`` (a student's repository), display names are paths inside it, a submission
    reached through a link is refused, and the labs share one profiler session for their counter
    cases and one compute-sanitizer process per tool.
    ``before_timing`` is asked before each lab that is timed.
    """
    reports: list[LabReport | None] = [None] * len(items)
    refused = [_unsafe(path, root, display) for _, path, display in items]
    rehearsal: threading.Thread | None = None
    if len(items) > 1:
        progress(f"compiling {len(items)} submissions and their baselines")
        cold = _kernels_cold(options)  # (before the trusted worker starts: it compiles into the cache as it starts)
        _trusted_ahead(options)
        graded = [item for item, why in zip(items, refused) if not why]
        prebuild(graded, options)
        labs = [runnable(spec) for spec in {spec.id: spec for spec, _, _ in graded}.values()]
        for family in FAMILIES:
            family.ahead(labs, options, progress)
        rehearsal = _rehearsed_if_cold(labs, options, progress, cold)

    def begin(i: int, together: Together) -> LabGrading | LabReport:
        spec, path, display = items[i]
        grading = None
        try:
            grading = LabGrading(spec, path, options, progress, display_name=display, together=together)
            return grading.start()
        except Exception as exc:  # one submission's failure must not take down the others
            if grading is not None:
                grading.close()
            for batch in together.shared.values():
                batch.send(spec.id, [])
            return _crashed(spec, display, exc)

    for first in range(0, len(items), window):
        todo = []
        for i in range(first, min(first + window, len(items))):
            spec, path, display = items[i]
            why = refused[i]
            if why:
                progress(f"[{spec.id}] {display} {why}: the lab scores 0")
                reports[i] = _missing(spec, path, display, "" if why == "not found" else why)
            else:
                todo.append(i)
        # the window's labs start together: their correctness cases, sanitizer and counter runs
        # overlap one another (none of them is timed), and the timing below waits for all of them
        # a student's labs share one profiler session and one sanitizer run per tool (never two students')
        specs = [runnable(items[i][0]) for i in todo]
        shared = {family.name: batch for family in FAMILIES if root is not None
                  and (batch := family.shared(specs, options)) is not None}
        together = Together(shared, ends_workers=True)
        started: list[tuple[int, LabGrading]] = []
        try:
            with ThreadPoolExecutor(max_workers=max(1, len(todo)), thread_name_prefix="start") as pool:
                for i, begun in zip(todo, pool.map(carried(begin), todo, [together] * len(todo))):
                    if isinstance(begun, LabReport):
                        reports[i] = begun
                    else:
                        started.append((i, begun))
            if rehearsal is not None:
                rehearsal.join(REHEARSAL_WAIT_S)
                rehearsal = None
            _time_in_turn(started, reports, options, before_timing)
        finally:
            for batch in shared.values():
                batch.close(keep=options.keep_work is not None)
    return [r for r in reports if r is not None]


def _trusted_ahead(options: GradeOptions) -> None:
    """Start the GPU's trusted worker now, while the labs' builds are looked up: every lab's first
    case waits for it (it owns the case's buffers), and a grade in a process of its own found it
    started only by that first case, its CUDA context made after the labs' workers'."""
    if options.gpu and (gpu := probe_for(options).gpu) is not None:
        trusted_worker(options, gpu).spawn_ahead()


def _kernels_cold(options: GradeOptions) -> bool:
    """Whether the labs' timing on a GPU finds the trusted kernel cache empty."""
    return bool(options.gpu and options.timing) and probe_for(options).gpu is not None and not any(kernel_cache(options).iterdir())


def _rehearsed_if_cold(specs: list[LabSpec], options: GradeOptions, progress: Progress, cold: bool) -> threading.Thread | None:
    """On a ``cold`` kernel cache (``_kernels_cold``), the labs' timing rehearsed
    (``engine.rehearsal``) in the background, beside their correctness cases: the first timing
    then finds the kernels that make and check its inputs compiled and the baselines' sessions
    open (a cold repository's timing took 10 s of its 43 on an H100, against 4 s warm). None
    where the cache was full already."""
    if not cold:
        return None
    rehearsal = threading.Thread(target=carried(rehearse_timings), args=(specs, options, progress), name="rehearsal", daemon=True)
    rehearsal.start()
    return rehearsal


def _open(grading: LabGrading) -> BaseException | None:
    try:
        grading.open_timing()
    except Exception as exc:
        return exc
    return None


def _time_in_turn(started: list[tuple[int, LabGrading]], reports: list[LabReport | None], options: GradeOptions,
                  before_timing: TimingGate | None) -> None:
    """Open the started labs' timings together once their background runs are over (inputs
    generated, libraries loaded: nothing timed), then time each alone, in turn; its timed output
    is checked on the CPU beside the next lab's timing (the memory_types oracle alone takes
    1.5-2.5 s). The labs' workers end together after the last, in the background: no exit
    releases a CUDA context beside a timed call.

    Where students share the GPU (a class lane's turns), only the timed calls have it alone: the
    opening is GPU work beside theirs, and the last check runs once the GPU is theirs again."""
    sessions = [(key_of(g.sub.gpu), s) for _, g in started if g.sub is not None for s in g.sessions()]
    for _, grading in started:
        with contextlib.suppress(Exception):  # (opening the timing meets the same failure and reports it)
            grading.wait_tools()  # this student's tool runs end before the timing has the GPU alone
    try:
        opened = _opened(started, reports)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="score") as scorer:
            with gputurns.timing():  # other students' GPU work on this GPU waits (a class lane's turns)
                scoring = _timed(opened, reports, options, before_timing, scorer)
            _scored(scoring, reports)
    finally:
        for gpu in {gpu for gpu, _ in sessions}:
            TEARDOWNS.start(gpu, *(s for g, s in sessions if g == gpu))


def _opened(started: list[tuple[int, LabGrading]], reports: list[LabReport | None]) -> list[tuple[int, LabGrading]]:
    """The labs whose timings opened, together, in the order they are timed (``scoring_first``);
    a lab whose opening failed has its report."""
    with ThreadPoolExecutor(max_workers=max(1, len(started)), thread_name_prefix="open") as pool:
        failed = list(pool.map(carried(_open), [grading for _, grading in started]))
    for (i, grading), exc in zip(started, failed):
        if exc is not None:
            reports[i] = _crashed(grading.whole, grading.name, exc)
    return scoring_first([(i, grading) for (i, grading), exc in zip(started, failed) if exc is None])


Scoring = tuple[int, LabGrading, str, float, Future[LabReport]]


def _timed(opened: list[tuple[int, LabGrading]], reports: list[LabReport | None], options: GradeOptions,
           before_timing: TimingGate | None, scorer: ThreadPoolExecutor) -> list[Scoring]:
    """Time each opened lab in turn; each is scored by ``scorer`` beside the next one's timing."""
    scoring: list[Scoring] = []
    for i, grading in opened:
        try:
            note, asked = "", time.monotonic()
            if before_timing is not None and grading.sub is not None and grading.spec.benchmark and options.timing:
                note = before_timing(grading.spec)
            gate_s = time.monotonic() - asked
            scoring.append((i, grading, note, gate_s, scorer.submit(carried(grading.timed().report))))
        except Exception as exc:
            grading.close()
            reports[i] = _crashed(grading.whole, grading.name, exc)
    return scoring


def _scored(scoring: list[Scoring], reports: list[LabReport | None]) -> None:
    for i, grading, note, gate_s, future in scoring:
        try:
            report = reports[i] = after_gate(future.result(), note, gate_s)
            if SPEED_CHECK in report.stage_seconds:  # (a lab not timed says nothing of its check)
                current().scoring_s[report.lab] = report.stage_seconds[SPEED_CHECK]
        except Exception as exc:
            grading.close()
            reports[i] = _crashed(grading.whole, grading.name, exc)


SPEED_CHECK = f"{Stage.SPEED.value}.check"


def scoring_first(started: list[tuple[int, LabGrading]]) -> list[tuple[int, LabGrading]]:
    """The labs in the order they are timed: those whose timed output takes longest to check
    first, so that check runs beside the others' timings rather than after the last
    (memory_types' oracle takes 1.5-2.5 s). The seconds an earlier student of this run took
    (``RunContext.scoring_s``) where every lab has them; else the bytes a timed call moves (the
    lab's ``benchmark.bytes``: the oracle reads them all), as a new process's first grade has
    nothing else to go by. Equal ones as given."""
    scoring_s = current().scoring_s
    if all(grading.spec.id in scoring_s for _, grading in started):
        return sorted(started, key=lambda item: -scoring_s[item[1].spec.id])
    return sorted(started, key=lambda item: -timed_bytes(item[1].spec))


def timed_bytes(spec: LabSpec) -> float:
    """The bytes one timed call of ``spec`` moves (its ``benchmark.bytes``); 0 where none is said."""
    bench = spec.benchmark
    return float(expr.evaluate(bench.bytes, bench.params)) if bench is not None else 0.0


def after_gate(report: LabReport, note: str, waited_s: float) -> LabReport:
    """``report`` with the wait at the timing gate in its stage seconds (``HEALTH_GATE``, where
    it held the timing back), its speed checks marked where the GPU stayed disturbed (``note``)."""
    if waited_s >= GATE_SHOWN_S:
        report = dataclasses.replace(report, stage_seconds={**report.stage_seconds, HEALTH_GATE: round(waited_s, 3)})
    return timed_on_disturbed_gpu(report, note) if note else report


def timed_on_disturbed_gpu(report: LabReport, note: str) -> LabReport:
    """``report`` whose speed checks say the GPU was disturbed while they were timed."""
    checks = tuple(dataclasses.replace(c, message=f"{c.message} [timed on a disturbed GPU: {note}]")
                   if c.stage is Stage.SPEED and c.outcome is not Outcome.SKIPPED else c for c in report.checks)
    return dataclasses.replace(report, checks=checks, environment={**report.environment, "timing_noisy": note})


def repo_labs(repo: Path, labs: list[str] | None = None) -> list[LabSpec]:
    """The labs to grade in ``repo``, once it is known to be a student repository (else a GraderError)."""
    if not repo.exists():
        raise GraderError("student repository not found", path=repo)
    if not repo.is_dir():
        raise GraderError("expected the folder of a student repository, got a file", path=repo)
    if not (repo / "labs").is_dir() and not (repo / "labs").is_symlink():
        example = submission_rel((labs or lab_ids() or ["LAB"])[0])
        raise GraderError(f"not a student repository: it has no labs/ folder (expected labs/<lab>/student.cu, "
                          f"for example {example})", path=repo)
    return [find_lab(lab_id) for lab_id in (labs or lab_ids())]


def grade_repo(
    repo: Path,
    options: GradeOptions = GradeOptions(),
    progress: Progress = no_progress,
    labs: list[str] | None = None,
    before_timing: TimingGate | None = None,
) -> list[LabReport]:
    """Grade ``labs/<lab>/student.cu`` of every lab (or those named) in ``repo``: one report each."""
    specs = repo_labs(repo, labs)
    items = [(spec, submission_path(repo, spec.id), submission_rel(spec.id)) for spec in specs]
    return grade_many(items, options, progress, window=len(items) or 1, root=repo, before_timing=before_timing)
