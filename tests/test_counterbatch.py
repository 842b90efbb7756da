"""A student's counter cases of several labs in one profiler session: cutting ncu's kernel list at
the grader's markers, what is left to be profiled alone, and the labs' hand-over. Real sessions
on a GPU are in tests/test_gpu_labs.py."""

import threading
from pathlib import Path

import pytest
from worker_replies import tool_result

from grader.checks.counters import batch as counterbatch
from grader.checks.counters.batch import ProfileBatch, Request, profile_together, split_at_marks
from grader.checks.counters.ncu import CounterRun, kernel_rows
from grader.isolation.launch import Isolation, RunDirs
from grader.isolation.options import GradeOptions, sandbox_for
from grader.isolation.sandbox import Sandbox
from grader.isolation.toolrun import TOOL_LOG, ToolRun, run_under_tool
from grader.worker.protocol import MARK_KERNEL, marked_tasks, tool_case_task

HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
         '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'


def _csv(kernels: list[tuple[str, str, float]]) -> str:
    """ncu's long CSV for kernels (name, grid, value of one metric)."""
    lines = ["==PROF== Connected to process 7", HEADER]
    for i, (name, grid, value) in enumerate(kernels):
        lines.append(f'"{i}","7","python3","127.0.0.1","{name}","1","7","(32, 1, 1)","{grid}","0","9.0",'
                     f'"Command line profiler metrics","m.sum","inst","{value:,.0f}"')
    return "\n".join(lines)


def _mark(blocks: int) -> tuple[str, str, float]:
    return (MARK_KERNEL, f"({blocks}, 1, 1)", 0.0)


def test_kernel_rows_keep_launch_order_grid_and_values():
    rows = kernel_rows(_csv([_mark(1234), ("naive(float*)", "(64, 1, 1)", 1500.0)]))
    assert [(r.name, r.grid) for r in rows] == [(MARK_KERNEL, "(1234, 1, 1)"), ("naive(float*)", "(64, 1, 1)")]
    assert rows[1].values == {"m.sum": 1500.0}


def test_the_kernel_list_is_cut_at_the_markers():
    rows = kernel_rows(_csv([_mark(5000), ("a", "(8, 1, 1)", 10), ("a2", "(8, 1, 1)", 5), _mark(7000), _mark(6000),
                             ("c", "(1, 1, 1)", 3)]))
    parts = split_at_marks(rows, [5000, 7000, 6000])
    assert parts is not None
    assert [[r.name for r in part] for part in parts] == [["a", "a2"], [], ["c"]]


@pytest.mark.parametrize("kernels,marks", [
    ([("stray", "(1, 1, 1)", 1), _mark(5000), ("a", "(8, 1, 1)", 1)], [5000]),  # a kernel before the first marker
    ([_mark(5000), ("a", "(8, 1, 1)", 1)], [5000, 7000]),  # a marker missing
    ([_mark(7000), _mark(5000)], [5000, 7000]),  # out of order
    ([_mark(5000), (MARK_KERNEL, "(3, 1, 1)", 0)], [5000]),  # a kernel of the student's under the marker's name
    ([], [5000]),
])
def test_kernels_that_cannot_be_attributed_with_certainty_are_not(kernels, marks):
    assert split_at_marks(kernel_rows(_csv(kernels)), marks) is None


def test_markers_are_distinct_and_drawn_afresh():
    first, second = counterbatch.marks_for(6), counterbatch.marks_for(6)
    assert len(set(first)) == 6 and all(1000 <= m < 61000 for m in first)
    assert first != second


def _request(lab: str, tmp_path: Path, metrics=("m.sum",), key=((("n", 1),), 0)) -> Request:
    task = tool_case_task(f"/labs/{lab}.so", {"name": "launch", "args": []}, {}, {})
    dirs = RunDirs(tmp_path / lab / "in", tmp_path / lab / "out")
    return Request(lab, key, metrics, task, Isolation(Sandbox(None, reason="test")), 30.0, dirs, None, threading.Event())


def _session(monkeypatch, kernels, results, returncode=0):
    """profile_together on ncu's output ``kernels`` (markers as drawn) and the worker's ``results``."""
    drawn = [4001, 4002, 4003]
    monkeypatch.setattr(counterbatch, "marks_for", lambda n: drawn[:n])

    stops = []

    def fake_profiler(task, metrics, dirs, limit, isolation, gpu, stop):
        assert task["marks"] == drawn[:len(task["tasks"])]
        stops.append(stop)
        rows = [_mark(drawn[k]) if isinstance(k, int) else k for k in kernels]
        return ToolRun(returncode, _csv(rows), "", tool_result({"status": "ok", "results": results}), 2.5), CounterRun()

    monkeypatch.setattr(counterbatch, "run_profiler", fake_profiler)
    return stops


def test_each_lab_gets_the_kernels_between_its_marker_and_the_next(monkeypatch, tmp_path):
    _session(monkeypatch, [0, ("tiled", "(8, 1, 1)", 100), 1, ("naive", "(8, 1, 1)", 900)],
             [{"status": "ok", "kernels_launched": ["tiled"]}, {"status": "ok", "kernels_launched": ["naive"]}])
    a, b = _request("corner_turning", tmp_path), _request("tiled_matmul", tmp_path)
    runs = profile_together([a, b])
    assert runs[("corner_turning", a.key)].values == {"m.sum": 100.0}
    assert runs[("tiled_matmul", b.key)].values == {"m.sum": 900.0}
    assert runs[("tiled_matmul", b.key)].kernels == ("naive",) and runs[("tiled_matmul", b.key)].session == 2


def test_a_case_that_failed_is_that_labs_error_and_cases_left_unrun_are_profiled_alone(monkeypatch, tmp_path):
    _session(monkeypatch, [0, ("k", "(8, 1, 1)", 1), 1],
             [{"status": "ok", "kernels_launched": ["k"]}, {"status": "cuda_error", "error": "illegal address", "sticky": True}])
    a, b, c = (_request(lab, tmp_path) for lab in ("a", "b", "c"))
    runs = profile_together([a, b, c])
    assert runs[("a", a.key)].values == {"m.sum": 1.0}
    assert runs[("b", b.key)].error == "illegal address"
    assert ("c", c.key) not in runs  # never ran: profiled alone


def test_a_lab_whose_kernels_the_profiler_missed_is_caught_in_a_session_too(monkeypatch, tmp_path):
    _session(monkeypatch, [0, ("decoy", "(1, 1, 1)", 1), 1, ("k", "(8, 1, 1)", 1)],
             [{"status": "ok", "kernels_launched": ["decoy", "matmul"]}, {"status": "ok", "kernels_launched": ["k"]}])
    a, b = _request("a", tmp_path), _request("b", tmp_path)
    runs = profile_together([a, b])
    assert "profiler saw 1" in runs[("a", a.key)].hidden and not runs[("b", b.key)].hidden


@pytest.mark.parametrize("launched,hidden", [(["decoy", "matmul"], True), (["decoy"], False), (None, False)])
def test_a_case_profiled_alone_is_held_against_the_kernels_its_reply_says_ran(monkeypatch, tmp_path, launched, hidden):
    """The one-case run (not a session) reads its worker's typed reply the same way."""
    from grader.checks.counters import ncu

    def fake_profiler(task, metrics, dirs, limit, isolation, gpu):
        result = tool_result({"status": "ok", "seconds": 0.1, "kernels_launched": launched})
        return ToolRun(0, _csv([("decoy", "(1, 1, 1)", 7)]), "", result, 0.5), CounterRun()

    monkeypatch.setattr(ncu, "run_profiler", fake_profiler)
    run = ncu.profile(tmp_path / "lib.so", {"kind": "case"}, ("m.sum",), RunDirs(tmp_path / "i", tmp_path / "o"), 10.0, None)  # type: ignore[arg-type]
    assert bool(run.hidden) is hidden and run.values == ({} if hidden else {"m.sum": 7.0})


def test_nothing_is_attributed_from_a_session_whose_markers_do_not_match(monkeypatch, tmp_path):
    _session(monkeypatch, [0, (MARK_KERNEL, "(4002, 1, 1)", 0), ("k", "(8, 1, 1)", 1), 1],
             [{"status": "ok", "kernels_launched": ["k"]}, {"status": "ok", "kernels_launched": []}])
    assert profile_together([_request("a", tmp_path), _request("b", tmp_path)]) == {}


def test_a_session_the_worker_did_not_finish_settles_nothing(monkeypatch, tmp_path):
    _session(monkeypatch, [0, ("k", "(8, 1, 1)", 1)], [], returncode=-11)
    assert profile_together([_request("a", tmp_path), _request("b", tmp_path)]) == {}


def test_the_session_is_stopped_once_a_case_of_any_of_its_labs_hung(monkeypatch, tmp_path):
    stops = _session(monkeypatch, [0, ("k", "(8, 1, 1)", 1)], [{"status": "ok"}])
    a, b = _request("a", tmp_path), _request("b", tmp_path)
    profile_together([a, b])
    assert not stops[0].is_set()
    b.stop.set()
    assert stops[0].is_set()


@pytest.mark.parametrize("correct", [True, False])
def test_a_case_the_session_left_is_profiled_alone_only_for_a_lab_whose_cases_all_passed(monkeypatch, correct):
    """The session starts before the correctness cases end; profiling alone waits for them, and a
    lab that failed one (its counter checks gated) or hung is not profiled again."""
    from types import SimpleNamespace

    from grader.checks.counters import ncu as counters
    from grader.labspec.labs import find_lab

    spec = find_lab("tiled_matmul")
    graded: list[str] = []
    monkeypatch.setattr(counterbatch, "requests_of", lambda sub, profiles, staged: [])
    monkeypatch.setattr(counters, "grade", lambda sub, check, profiles: graded.append(check.id))
    batch = ProfileBatch([spec.id])  # one lab: the session leaves it to be profiled alone
    out = counterbatch.counted(SimpleNamespace(spec=spec, gpu=None), batch, lambda: correct)
    assert graded == ([c.id for c in spec.counters] if correct else [])
    assert len(out) == (len(spec.counters) if correct else 0)


def test_counters_unavailable_are_the_same_for_every_lab(monkeypatch, tmp_path):
    why = CounterRun(skipped="GPU performance counters are restricted to administrators")
    monkeypatch.setattr(counterbatch, "run_profiler", lambda *a: (None, why))
    a, b = _request("a", tmp_path), _request("b", tmp_path)
    assert profile_together([a, b]) == {("a", a.key): why, ("b", b.key): why}


def test_the_session_runs_once_every_lab_has_sent_its_cases(monkeypatch, tmp_path):
    seen: list[list[str]] = []

    def fake(requests):
        seen.append([r.lab for r in requests])
        return {(r.lab, r.key): CounterRun(values={"m.sum": 1.0}, session=len(requests)) for r in requests}

    monkeypatch.setattr(counterbatch, "profile_together", fake)
    batch = ProfileBatch(["tiled_matmul", "histogram", "memory_types"])
    got: dict[str, object] = {}
    waiter = threading.Thread(target=lambda: got.update(runs=batch.runs("tiled_matmul")))
    waiter.start()
    batch.send("tiled_matmul", [_request("tiled_matmul", tmp_path)])
    batch.send("memory_types", [])  # a lab with nothing to profile (it failed its cases, say)
    waiter.join(0.3)
    assert waiter.is_alive() and not seen  # histogram has not sent yet
    batch.send("histogram", [_request("histogram", tmp_path)])
    batch.send("histogram", [_request("histogram", tmp_path)])  # a second call does not count
    waiter.join(5)
    assert seen == [["histogram", "tiled_matmul"]]  # in lab order, whatever order they came in
    assert list(got["runs"]) == [((("n", 1),), 0)]


def test_one_lab_alone_is_profiled_as_it_would_be_outside_a_session(monkeypatch, tmp_path):
    monkeypatch.setattr(counterbatch, "profile_together", lambda requests: pytest.fail("a session for one lab"))
    batch = ProfileBatch(["tiled_matmul", "histogram"])
    batch.send("histogram", [])
    batch.send("tiled_matmul", [_request("tiled_matmul", tmp_path)])
    assert batch.runs("tiled_matmul") == {}


def test_a_grader_bug_in_the_session_reaches_every_lab(monkeypatch, tmp_path):
    def broken(requests):
        raise RuntimeError("simulated session bug")

    monkeypatch.setattr(counterbatch, "profile_together", broken)
    batch = ProfileBatch(["a", "b"])
    batch.send("a", [_request("a", tmp_path)])
    batch.send("b", [_request("b", tmp_path)])
    for lab in ("a", "b"):
        with pytest.raises(RuntimeError, match="simulated session bug"):
            batch.runs(lab)


def test_the_session_sees_the_inputs_of_every_lab(tmp_path):
    """The inputs of each lab's case live in that lab's folder: the sandboxed session must see
    them all (a tool that copies one to its log shows it does)."""
    sandbox = sandbox_for(GradeOptions())
    if not sandbox.active:
        pytest.skip(f"no sandbox here: {sandbox.reason}")
    inputs = []
    for lab in ("a", "b"):
        (tmp_path / lab).mkdir()
        path = tmp_path / lab / "x.npy"
        path.write_text(f"input of {lab}\n")
        inputs.append(path)
    tasks = [tool_case_task("/none.so", {"name": "launch", "args": []}, {}, {"x": str(p)}) for p in inputs]
    tool = ["/bin/sh", "-c", 'cat "$1" "$2" > "$3"', "sh", str(inputs[0]), str(inputs[1]), TOOL_LOG]
    run = run_under_tool(tool, marked_tasks(tasks, [1001, 1002]), RunDirs(tmp_path / "in", tmp_path / "out"), 30,
                         Isolation(sandbox))
    assert run.log.split() == ["input", "of", "a", "input", "of", "b"]



def test_a_lab_without_counter_checks_leaves_the_session_before_it_compiles(monkeypatch):
    """The session starts once every lab has sent its cases: a lab with nothing to profile must
    not keep it waiting through its own correctness cases."""
    import dataclasses

    from grader.checks.counters import launched, traffic
    from grader.engine import grade
    from grader.engine.phases import Together
    from grader.labspec.labs import find_lab

    batch = ProfileBatch(["memory_types", "tiled_matmul"])
    seen: list[set[str]] = []
    real = grade.lab_build

    def spy(*args, **kwargs):
        seen.append(batch.waiting_for())
        return real(*args, **kwargs)

    monkeypatch.setattr(grade, "lab_build", spy)
    # memory_types profiles its timed case for its DRAM traffic, and another case for the record of
    # which kernels ran; untimed and without compiled-code checks, nothing
    spec = dataclasses.replace(find_lab("memory_types"), static=(), benchmark=None)
    assert not spec.counters and launched.list_check(spec) is None and not traffic.checks(spec)
    assert launched.list_check(dataclasses.replace(find_lab("memory_types"), benchmark=None)) is not None
    grade.LabGrading(spec, spec.files.reference, GradeOptions(gpu=False), together=Together({"counters": batch})).start().close()
    assert seen == [{"tiled_matmul"}]
    counted = find_lab("tiled_matmul")
    grade.LabGrading(counted, counted.files.reference, GradeOptions(gpu=False), together=Together({"counters": batch})).start().close()
    assert batch.waiting_for() == set()  # without a GPU it never counts: it leaves when its start ends


# ------------------------------------------------------------ a session started before its cases


def test_an_early_run_gets_its_job_through_a_pipe_and_sees_what_was_staged_after_it_started(tmp_path):
    """The session starts before the labs write their cases: its sandbox binds the staging folder
    at the start, and a file written there later is seen; the job comes through the pipe, whose
    read end stays the caller's, open (the worker gets a copy): closed twice, by the run and by
    its session, the number could by then be another thread's file."""
    import json
    import os
    import time

    sandbox = sandbox_for(GradeOptions())  # without one, the same run unconfined
    staged = tmp_path / "staged"
    staged.mkdir()
    job_r, job_w = os.pipe()
    job_inode = os.fstat(job_r).st_ino
    script = 'log=$1; shift; while [ "$1" != --job-fd ]; do shift; done; cat /dev/fd/$2 > "$log"; cat "$STAGED" >> "$log"'
    tool = ["/bin/sh", "-c", script.replace("$STAGED", str(staged / "lab" / "x.npy")), "sh", TOOL_LOG]
    runs: list[ToolRun] = []
    thread = threading.Thread(target=lambda: runs.append(run_under_tool(
        tool, job_r, RunDirs(tmp_path / "in", tmp_path / "out"), 30, Isolation(sandbox, read_only=(staged,)))))
    thread.start()
    time.sleep(0.5)  # the run has started and waits for its job
    (staged / "lab").mkdir()
    (staged / "lab" / "x.npy").write_text("staged later\n")
    os.write(job_w, json.dumps({"kind": "marked"}).encode() + b"\n")
    os.close(job_w)
    thread.join(30)
    assert runs and runs[0].returncode == 0, runs
    assert runs[0].log.splitlines() == ['{"kind": "marked"}', "staged later"]
    assert os.fstat(job_r).st_ino == job_inode  # still the caller's pipe, to close once
    os.close(job_r)


def test_a_file_opened_while_an_early_session_runs_is_still_open_after_it(monkeypatch, tmp_path):
    """The session's run (a real one-shot run under a stand-in tool) and the session close what is
    each their own: the run closed the session's job pipe, whose number the next file opened took,
    and the session's close then closed that file (on the GPU, a worker's reply pipe, most likely
    what cost a reference a lab's points in a class on four GPUs)."""
    import os
    import time

    started = tmp_path / "started"
    script = f'touch {started}; while [ "$1" != --job-fd ]; do shift; done; cat /dev/fd/$2 > /dev/null'

    def run_profiler(task, metrics, dirs, limit, isolation, gpu, stop):
        return run_under_tool(["/bin/sh", "-c", script, "sh"], task, dirs, limit, isolation, stop=stop), CounterRun()

    monkeypatch.setattr(counterbatch, "run_profiler", run_profiler)
    early = counterbatch.EarlySession(tmp_path / "early", ("m.sum",), Isolation(Sandbox(None, reason="test")), None, 60)
    early.start()
    deadline = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < deadline, "the session's run did not start"
        time.sleep(0.01)
    mine = os.open(tmp_path / "mine", os.O_CREAT | os.O_RDWR)
    try:
        early.close()
        assert os.fstat(mine).st_ino == (tmp_path / "mine").stat().st_ino
    finally:
        os.close(mine)


def _early(monkeypatch, tmp_path, profiler):
    """An early session whose profiler run is ``profiler(job_fd, stop)`` (a test double: real
    sessions run in the GPU tests); ``profile_together`` (a session started then) is recorded."""
    import os

    fresh: list[list[str]] = []

    def fake_run_profiler(task, metrics, dirs, limit, isolation, gpu, stop):
        assert isinstance(task, int) and metrics == ("m.sum",) and str(tmp_path / "early" / "staged") in map(str, isolation.read_only)
        return profiler(task, stop)

    def fake_together(requests):
        fresh.append([r.lab for r in requests])
        return {}

    monkeypatch.setattr(counterbatch, "run_profiler", fake_run_profiler)
    monkeypatch.setattr(counterbatch, "profile_together", fake_together)
    early = counterbatch.EarlySession(tmp_path / "early", ("m.sum",), Isolation(Sandbox(None, reason="test")), None, 60)
    early.start()  # (a lab compiled whose cases were not kept)
    return early, fresh, os


def _read_job(fd: int) -> dict:
    """The job a session was sent, read as its worker would: from a copy of the session's descriptor."""
    import json
    import os

    with os.fdopen(os.dup(fd), "rb") as pipe:
        return json.loads(pipe.read())


def test_an_early_session_settles_each_labs_cases_from_the_job_it_was_sent(monkeypatch, tmp_path):
    def profiler(fd, stop):
        job = _read_job(fd)
        rows = [row for k, mark in enumerate(job["marks"]) for row in (_mark(mark), (f"k{k}", "(8, 1, 1)", 10.0 * (k + 1)))]
        results = [{"status": "ok", "kernels_launched": [f"k{k}"]} for k in range(len(job["tasks"]))]
        return ToolRun(0, _csv(rows), "", tool_result({"status": "ok", "results": results}), 1.0), CounterRun()

    early, fresh, _ = _early(monkeypatch, tmp_path, profiler)
    batch = ProfileBatch(["a", "b"], early)
    assert batch.staged("a") == tmp_path / "early" / "staged" / "a"
    batch.send("b", [_request("b", tmp_path)])
    batch.send("a", [_request("a", tmp_path)])
    a, b = batch.runs("a"), batch.runs("b")
    assert [(run.values, run.session, run.early) for run in (*a.values(), *b.values())] == \
        [({"m.sum": 10.0}, 2, True), ({"m.sum": 20.0}, 2, True)]  # in lab order
    assert not fresh
    early.close()
    assert not (tmp_path / "early").exists()


def test_an_early_session_that_never_ran_leaves_the_labs_to_a_session_started_then(monkeypatch, tmp_path):
    early, fresh, os = _early(monkeypatch, tmp_path, lambda fd, stop: (None, CounterRun(skipped="counters busy")))
    batch = ProfileBatch(["a", "b"], early)
    batch.send("a", [_request("a", tmp_path)])
    batch.send("b", [_request("b", tmp_path)])
    assert batch.runs("a") == {} and fresh == [["a", "b"]]
    with pytest.raises(OSError):
        os.fstat(early._job_r)  # no run took the pipe: closed all the same


def test_an_early_session_no_lab_woke_starts_no_profiler(monkeypatch, tmp_path):
    """A regrade of unchanged code: every lab's cases kept, none wakes the session, and no
    profiler starts; a lab that sends cases all the same (its kept run unreadable) gets a session
    started then."""
    import os

    monkeypatch.setattr(counterbatch, "run_profiler", lambda *a: pytest.fail("the early session started"))
    fresh: list[list[str]] = []
    monkeypatch.setattr(counterbatch, "profile_together", lambda requests: fresh.append([r.lab for r in requests]) or {})
    for sent in ([], [_request("a", tmp_path), _request("b", tmp_path)]):
        early = counterbatch.EarlySession(tmp_path / f"early{len(sent)}", ("m.sum",), Isolation(Sandbox(None, reason="test")),
                                          None, 60)
        batch = ProfileBatch(["a", "b"], early)
        for lab in ("a", "b"):
            batch.send(lab, [r for r in sent if r.lab == lab])
        assert batch.runs("a") == {}
        early.close()
        with pytest.raises(OSError):
            os.fstat(early._job_r)  # its pipe closed all the same
    assert fresh == [["a", "b"]]


def test_an_early_session_stopped_on_its_cases_is_not_started_again(monkeypatch, tmp_path):
    """A case that hung or ran past the limit: the labs are profiled alone, as after a session started then."""
    def profiler(fd, stop):
        _read_job(fd)
        return None, CounterRun(error="did not finish within 30 s under the profiler and was killed")

    early, fresh, _ = _early(monkeypatch, tmp_path, profiler)
    batch = ProfileBatch(["a", "b"], early)
    batch.send("a", [_request("a", tmp_path)])
    batch.send("b", [_request("b", tmp_path)])
    assert batch.runs("b") == {} and not fresh


def test_an_early_session_is_stopped_where_fewer_than_two_labs_send_cases(monkeypatch, tmp_path):
    import time

    seen_stop: list[float] = []

    def profiler(fd, stop):
        while not stop.is_set():
            time.sleep(0.01)
        seen_stop.append(time.monotonic())
        return None, CounterRun(error="stopped")

    early, fresh, _ = _early(monkeypatch, tmp_path, profiler)
    batch = ProfileBatch(["a", "b"], early)
    batch.send("a", [_request("a", tmp_path)])
    started = time.monotonic()
    batch.send("b", [])  # b failed to compile, say: a is profiled alone, and the session must not hold the lock
    assert seen_stop and seen_stop[0] - started < 2
    assert batch.runs("a") == {} and not fresh
