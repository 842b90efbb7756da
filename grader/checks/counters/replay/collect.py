"""A lab's counter cases measured by the replayer instead of Nsight Compute (``--counters replay``).

For the student's cases of a lab (the same cases, with the same metrics, that the profiler would
run): the worker that ran the lab's correctness cases, once they are over (``handoff``), or else a
sandboxed worker of their own, calls the launcher on each case's inputs with the support file
recording; each record is parsed (``record``), held against the compiled device code (``cubin``)
and planned onto the grader's buffers (``plan``); the replayer profiles every case of the lab in
one task; each case's replayed outputs are compared with the oracle, and only a replay that
computed the right answer gives the case its counters. Every case that cannot be replayed, for
whatever reason, is left to the profiler, and the reason is said (``note``): the verdict code is
the profiler path's, and a case's figures are the same counts either way.

The record is the student's claim (their library runs in the worker that writes it). What a
replay establishes is that these kernels of the student's own device code, launched as recorded,
compute the case's answer with these counts.

The baselines' cases of the lab (the naive kernel a counter check compares with, the kernels
whose DRAM traffic the roofline shows) are replayed alike, recorded by a trusted worker, where
no run of them is kept yet: Nsight Compute's kept runs first, then the replayer's, kept apart
(``--counters ncu`` never takes a replayed run), so that a cold grade needs no profiler session
for them. A baseline case the replayer cannot measure is profiled as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ....cachedirs import default_cache_dir
from ....context import carried
from ....errors import GraderError
from ....host.safeio import read_file
from ....isolation.build import baseline_library
from ....isolation.compilerlog import demangle
from ....isolation.options import GradeOptions, archs_for, probe_for, sandbox_for, secret_of, work_folder
from ....isolation.replies import Reply
from ....isolation.submission import Submission
from ....isolation.toolrun import run_under_tool
from ....isolation.trusted import trusted_isolation
from ....labspec.labs import load_problem
from ....labspec.spec import CounterCheck, LabSpec
from ....worker.buffers import Slot, filled_inputs, layout
from ....worker.protocol import Status, marked_tasks, record_task
from ... import compare as oracle
from ...correctness import launcher_spec, tool_task
from .. import launched
from ..ncu import CaseKey, CounterRun, Profiles, baseline_key, cache_path, cached, store
from . import cubin, service
from .handoff import Recorder
from .plan import ArraySlot, ReplayPlan, Unreplayable, plan_call
from .record import CallRecord, MalformedRecord, parse
from .task import CaseTask, task_text

Note = Callable[[str], None]
#: The longest a lab's counters wait for the baselines' cases replayed ahead (then the lab replays
#: what is left itself): a dozen take about 5 s on an H100, cold.
AHEAD_WAIT_S = 60.0
#: Numbers each recording run of this process (a lab graded again gets folders of its own).
_RECORDINGS = itertools.count(1)


@dataclass(frozen=True)
class _Case:
    key: CaseKey
    check: CounterCheck
    metrics: tuple[str, ...]
    slots: tuple[Slot, ...]


def replay_by(options: GradeOptions, note: Note, recorder: Recorder | None = None, spent: service.Spent = service.spent_nowhere
              ) -> Callable[[Submission, Profiles], dict[tuple[str, CaseKey], CounterRun]] | None:
    """What measures a lab's cases before the profiler under ``options`` (None: the profiler alone);
    ``recorder``: the lab's correctness worker records the student's cases; ``spent`` is told the
    seconds of each phase of the replay (``replayed``)."""
    return functools.partial(replayed, note=note, recorder=recorder, spent=spent) if options.counter_source == "replay" else None


def array_slots(slots: tuple[Slot, ...]) -> tuple[ArraySlot, ...]:
    """The launcher's arrays as the replay lays them out: outputs hold the worker's fill."""
    return tuple(ArraySlot(s.name, s.body_bytes, s.role, s.host,
                           np.array([s.fill], dtype=s.dtype).tobytes() if s.role == "output" else b"")
                 for s in slots)


def replayed(sub: Submission, profiles: Profiles, note: Note, recorder: Recorder | None = None,
             spent: service.Spent = service.spent_nowhere) -> dict[tuple[str, CaseKey], CounterRun]:
    """The cases in ``profiles`` not settled yet, measured by the replayer: a run for each case it
    measured, by whose it is (``student``, ``baseline NAME``) and case; ``note`` is told why each
    other student's case goes to the profiler. A baseline's run is kept for later grades.

    ``spent`` is told the seconds of each phase, summed over the student's and the baselines'
    replays (which run side by side): ``counters.ahead`` (the wait for the baselines replayed
    ahead), ``counters.cases`` (the wait for the lab's correctness cases to be over, where their
    worker records), ``counters.record``, ``counters.extract`` (the device code), ``counters.plan``
    (with the inputs and the task's files), the replayer's own (``Replayer.run``) and
    ``counters.check`` (the outputs against the oracle)."""
    cases = []
    for key, metrics in profiles.metrics.items():
        if ("student", key) not in profiles.runs:
            check = next(c for c in profiles.checks if c.id == profiles.first[key])
            cases.append(_Case(key, check, metrics, _slots(sub, check)))
    runs: dict[tuple[str, CaseKey], CounterRun] = {}
    why: dict[str, str] = {}
    if recorder is not None and not cases:
        recorder.decline()  # (every case kept: nothing to record)
    try:
        replayer = service.replayer_for(sub.gpu, sub.archs, sub.isolation.sandbox, sub.cache_dir)
        folder = replayer.task_folder()
    except (service.ServiceError, GraderError, OSError) as exc:
        if recorder is not None:
            recorder.decline()
        why = {case.check.id: str(exc) for case in cases}
        _baseline_cases(sub, profiles, runs)  # (those kept from an earlier grade still count)
    else:
        # each in a thread of its own (records, device code, inputs and the oracle's answers made side
        # by side on the CPU: a timed case's are large), the replays in turn (the replayer's lock)
        try:
            with ThreadPoolExecutor(max_workers=1 + len(sub.spec.baseline_names), thread_name_prefix="replay") as pool:
                mine = pool.submit(carried(_replayed_student), sub, cases, replayer, folder / "student", why, recorder,
                                   spent) if cases else None
                phase = service.Phases(spent)
                replayer.ahead_done(sub.time_left(AHEAD_WAIT_S))  # (the baselines' cases replayed ahead are kept by now)
                phase("ahead")
                theirs = [pool.submit(carried(_replayed_baseline), base, base_cases, replayer, folder / f"baseline-{name}", note, spent)
                          for name, (base, base_cases) in _baseline_cases(sub, profiles, runs).items()]
                runs.update(mine.result() if mine is not None else {})
                for future in theirs:
                    runs.update(future.result())
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    for case in cases:
        if case.check.id in why:
            profiles.refused[case.key] = why[case.check.id][:500]
            note(f"[{sub.spec.id}] {sub.name}: counters of {case.check.id} by Nsight Compute instead of the replayer, "
                 f"if every correctness case passes ({why[case.check.id]})")  # (else they are not graded: ``batch.counted``)
    return runs


def _replayed_student(sub: Submission, cases: list[_Case], replayer: service.Replayer, folder: Path,
                      why: dict[str, str], recorder: Recorder | None, spent: service.Spent) -> dict[tuple[str, CaseKey], CounterRun]:
    """The student's cases replayed; ``why`` is told why the others are not."""
    try:
        return {("student", key): run for key, run in _replay(sub, cases, replayer, folder, why, recorder=recorder, spent=spent).items()}
    except (service.ServiceError, GraderError, OSError, ValueError) as exc:  # (the grader's side failed: say so)
        why.update({case.check.id: f"{type(exc).__name__}: {exc}" for case in cases})
        return {}
    finally:
        if recorder is not None:
            recorder.decline()  # (where it failed before asking)


def _replayed_baseline(base: Submission, cases: list[_Case], replayer: service.Replayer, folder: Path,
                       note: Note, spent: service.Spent = service.spent_nowhere) -> dict[tuple[str, CaseKey], CounterRun]:
    """A baseline's cases replayed and kept; ``note`` is told why the others are profiled."""
    why: dict[str, str] = {}
    try:
        got = _replay(base, cases, replayer, folder, why, trusted=True, spent=spent)
    except Exception as exc:  # (only a way to spare the profiler: whatever failed, the profiler counts the case)
        got, why = {}, {case.check.id: f"{type(exc).__name__}: {exc}" for case in cases}
    for case in cases:
        if case.key in got:
            with contextlib.suppress(OSError):  # (kept only to spare the next grade the replay)
                store(kept_baseline_file(base, case), got[case.key], case.metrics)
        else:
            note(f"[{base.spec.id}] {base.name}: its case of {case.check.id} by Nsight Compute instead of the replayer, "
                 f"if the student's correctness cases all pass ({why.get(case.check.id, 'not replayed')})")
    return {(f"baseline {case.check.baseline}", case.key): got[case.key] for case in cases if case.key in got}


def replay_baselines_ahead(specs: list[LabSpec], options: GradeOptions, note: Note) -> bool:
    """Start the replayer and replay the baselines' cases of ``specs`` that no earlier grade kept,
    in a thread of its own, before the labs reach their counters (a cold grade: the replayer's
    start, a dozen trusted recordings and replays, beside the labs' compiling and correctness
    cases instead of after them). The labs' counters wait for it (``Replayer.ahead_done``) and
    find the runs kept; what it could not replay each lab tries again, then leaves to the profiler.
    False where there is no GPU or the replayer cannot be built here (the profiler's path then)."""
    probe = probe_for(options)
    archs = archs_for(options, probe)
    if probe.gpu is None or service.built(archs, options.cache_dir) is None:
        return False
    gpu, cache_dir = probe.gpu, options.cache_dir or default_cache_dir()
    try:
        replayer = service.replayer_for(gpu, archs, sandbox_for(options), cache_dir)
    except (service.ServiceError, GraderError, OSError):
        return True  # (each lab says why)

    def ahead() -> None:
        work = work_folder(options, "replay-baselines-")
        folder: Path | None = None
        try:
            replayer.warm()
            isolation = trusted_isolation(options)
            todo = {}
            for spec in specs:
                lab = Submission(spec, "ahead", Path(), (), archs, load_problem(spec), isolation, cache_dir, work,
                                 time.monotonic() + options.submission_limit_s, options.submission_limit_s, secret_of(options), gpu)
                todo.update({(spec.id, name): found for name, found in _baseline_cases(lab, launched.profiles_for(spec, options.timing), {}).items()})
            if not todo:
                return
            note(f"replaying the baselines' {sum(len(cases) for _, cases in todo.values())} cases for the counter checks and "
                 "rooflines, beside the labs (once per GPU and driver; kept for later grades)")
            folder = replayer.task_folder()
            with ThreadPoolExecutor(max_workers=min(8, len(todo)), thread_name_prefix="replay-ahead") as pool:
                for future in [pool.submit(carried(_replayed_baseline), base, cases, replayer, folder / f"{lab}-{name}", note)
                               for (lab, name), (base, cases) in todo.items()]:
                    future.result()
        except Exception:  # (only a head start: each lab replays what is not kept, and says what went wrong)
            pass
        finally:
            for made in (folder, work):
                if made is not None:
                    shutil.rmtree(made, ignore_errors=True)

    replayer.ahead = threading.Thread(target=carried(ahead), name="replay-ahead", daemon=True)
    replayer.ahead.start()
    return True


def _slots(sub: Submission, check: CounterCheck) -> tuple[Slot, ...]:
    return tuple(s for s in layout(launcher_spec(sub.spec), dict(check.params), 0) if isinstance(s, Slot))


def _baseline_cases(sub: Submission, profiles: Profiles, runs: dict[tuple[str, CaseKey], CounterRun]
                    ) -> dict[str, tuple[Submission, list[_Case]]]:
    """The baselines' cases to replay (by baseline: the baseline as a trusted submission, and its
    cases); those kept from an earlier grade go into ``runs``. A case Nsight Compute's run of is
    kept, or whose baseline does not build here, is left to ``ncu.baseline_run``."""
    out: dict[str, tuple[Submission, list[_Case]]] = {}
    for check in profiles.checks:
        key, whose = profiles.case(check), f"baseline {check.baseline}"
        if not check.baseline or (whose, key) in profiles.runs or (whose, key) in runs or \
                any(c.key == key for c in out.get(check.baseline, (sub, []))[1]):
            continue
        try:
            library = baseline_library(sub.spec, check.baseline, sub.archs, sub.cache_dir)
        except Exception:  # (not here, or not compiling: the lab's baseline run reports it)
            continue
        base = dataclasses.replace(sub, name=f"the {check.baseline} baseline", library=library,
                                   isolation=sub.isolation.for_baselines())
        metrics = profiles.metrics[key]
        if cached(cache_path(baseline_key(sub.gpu, metrics, check, sub.spec), sub.cache_dir, library)) is not None:
            continue  # (Nsight Compute's: its baseline run reads it)
        case = _Case(key, check, metrics, _slots(sub, check))
        if (kept := cached(kept_baseline_file(base, case))) is not None:
            runs[(whose, key)] = kept
            continue
        out.setdefault(check.baseline, (base, []))[1].append(case)
    return out


def kept_baseline_file(base: Submission, case: _Case) -> Path:
    """Where a baseline's replayed case is kept: apart from Nsight Compute's runs of it."""
    return cache_path("replayed|" + baseline_key(base.gpu, case.metrics, case.check, base.spec), base.cache_dir, base.library)


def _replay(sub: Submission, cases: list[_Case], replayer: service.Replayer, folder: Path, why: dict[str, str],
            trusted: bool = False, recorder: Recorder | None = None, spent: service.Spent = service.spent_nowhere
            ) -> dict[CaseKey, CounterRun]:
    folder.mkdir()
    phase = service.Phases(spent)
    records = recorded(sub, cases, trusted, recorder)
    if recorder is not None and recorder.served_since is not None:
        phase.until("cases", recorder.served_since)  # (the lab's correctness cases were not over yet)
    phase("record")
    try:
        modules = cubin.extract(sub.library, folder / "cubins", sub.gpu.arch)
    except cubin.CubinError as exc:
        why.update({case.check.id: str(exc) for case in cases})
        return {}
    finally:
        phase("extract")
    planned: list[tuple[_Case, CaseTask, dict[str, np.ndarray]]] = []
    kernels = {launch.kernel for r in records.values() if isinstance(r, CallRecord) for launch in r.launches}
    module = cubin.module_of(modules, kernels)
    for i, case in enumerate(cases):
        record = records[case.check.id]
        try:
            if isinstance(record, str):
                raise Unreplayable(record)
            if isinstance(module, str):
                raise Unreplayable(module)
            plan = plan_call(record, array_slots(case.slots), module)
            inputs = case_inputs(sub, case.check)
            planned.append((case, _case_task(f"c{i}", case, plan, inputs, folder), inputs))
        except Unreplayable as exc:
            why[case.check.id] = str(exc)
    if not planned or isinstance(module, str):
        phase("plan")
        return {}
    cubin_path = folder / "module.cubin"
    cubin_path.write_bytes(cubin.read_cubin(module))
    text = task_text("t", cubin_path, module, [task for _, task, _ in planned])
    limit = sub.time_left(max(case.check.time_limit_s for case, _, _ in planned))
    phase("plan")
    results = replayer.run(text, {task.id: task.metrics for _, task, _ in planned}, limit, spent)
    phase.skip()
    runs = {}
    for case, task, inputs in planned:
        result = results[task.id]
        wrong = result.reason or wrong_output(sub, case, task, inputs)
        if wrong:
            why[case.check.id] = wrong
            continue
        runs[case.key] = CounterRun(values=dict(result.values), kernels=tuple(demangle(k) for k in task.plan.kernels),
                                    seconds=result.seconds, replayed=True)
    phase("check")
    return runs


def recorded(sub: Submission, cases: list[_Case], trusted: bool = False,
             recorder: Recorder | None = None) -> dict[str, CallRecord | str]:
    """Each case's call recorded (check id -> record, or why there is none): by the lab's
    correctness worker once its cases are over, where ``recorder`` takes them; the rest by one
    worker of their own, sandboxed, in the folders of the student's runs; or ``trusted`` (a
    baseline), in the trusted runs' own."""
    name = f"replay-record{next(_RECORDINGS)}"
    dirs = sub.trusted_dirs().sub(name) if trusted else sub.tool_dirs(name)
    tasks = [record_task(tool_task(sub, case.check, dirs.sub(f"case{i}"))) for i, case in enumerate(cases)]
    replies: dict[int, Reply | str] = {}
    if recorder is not None and recorder.ask([(task, case.check.time_limit_s) for task, case in zip(tasks, cases)]):
        for i, served in enumerate(recorder.answer(sub.time_left())):
            if served.status == Status.OK.value and served.reply is not None:
                replies[i] = served.reply
            elif served.status == Status.TIMEOUT.value:  # (it would time out again in a worker of its own)
                replies[i] = served.reason
    rest = [i for i in range(len(cases)) if i not in replies]
    if rest:
        limit = sub.time_left(max(cases[i].check.time_limit_s for i in rest))
        run = run_under_tool([], marked_tasks([tasks[i] for i in rest], [1] * len(rest)), dirs, limit, sub.isolation)
        failure = run.failure("the recording run ended early", trusted)
        results = run.result.results if run.result is not None else None
        for k, i in enumerate(rest):
            result = results[k] if results is not None and k < len(results) else None
            replies[i] = (result if result is not None and result.status == Status.OK else
                          (result.error if result is not None else None) or failure or "no reply")
    out: dict[str, CallRecord | str] = {}
    for i, case in enumerate(cases):
        reply = replies[i]
        if isinstance(reply, str):
            out[case.check.id] = f"the recording run failed: {reply}"[:500]
            continue
        try:
            out[case.check.id] = parse(reply.record, [s.name for s in case.slots])
        except MalformedRecord as exc:
            out[case.check.id] = f"a malformed record ({exc})"
    return out


def case_inputs(sub: Submission, check: CounterCheck) -> dict[str, np.ndarray]:
    """The case's inputs, as the profiler's run of it gets them."""
    if check.inputs == "filled":
        return filled_inputs(launcher_spec(sub.spec), dict(check.params), check.seed)
    return oracle.generated(sub.spec, sub.problem, check.params, check.seed, sub.cache_dir)


def _case_task(case_id: str, case: _Case, plan: ReplayPlan, inputs: dict[str, np.ndarray], folder: Path) -> CaseTask:
    files, outputs = {}, {}
    for buf in plan.buffers:
        if buf.kind == "input":
            files[buf.index] = folder / f"{case_id}-in{buf.index}.bin"
            with open(files[buf.index], "wb") as out:  # from the array's own memory: no copy, and the write lets go of the GIL
                out.write(np.ascontiguousarray(inputs[buf.name]).reshape(-1).view(np.uint8).data)
        elif buf.kind == "output":
            outputs[buf.index] = folder / f"{case_id}-out{buf.index}.bin"
    return CaseTask(case_id, case.metrics, plan, files, outputs)


def wrong_output(sub: Submission, case: _Case, task: CaseTask, inputs: dict[str, np.ndarray]) -> str:
    """Why the replay's outputs are not the oracle's answer ("" where they are)."""
    expected = oracle.expected(sub.spec, sub.problem, inputs, case.check.params, sub.cache_dir)
    slots = {s.name: s for s in case.slots}
    for buf in task.plan.buffers:
        if buf.index not in task.outputs or buf.name not in expected:
            continue
        slot = slots[buf.name]
        try:
            data = read_file(task.outputs[buf.index], slot.body_bytes, "a replayed output")
        except GraderError as exc:
            return f"the replay's {buf.name} could not be read ({exc})"
        if len(data) != slot.body_bytes:
            return f"the replay's {buf.name} is {len(data)} bytes, not {slot.body_bytes}"
        got = np.frombuffer(data, dtype=slot.dtype).reshape(slot.shape)
        cmp = oracle.compare(buf.name, got, expected[buf.name], sub.spec.tolerance, case.check.params,
                             sub.spec.correctness.max_mismatches_shown)
        if not cmp.ok:
            return f"the replay computed a wrong {buf.name}: {cmp.summary}"
    return ""
