"""The worker is the student's once their library is loaded: its replies are checked, a wrong one
is a verdict against the submission, and the facts a grade rests on come from elsewhere.

The real attack (a constructor that runs Python inside the worker) is graded on a GPU in
``tests/hostile`` (patch_worker_launched.cu, forge_worker_reply.cu); here a stand-in worker
process sends the replies such a submission makes the real one send, so the grader's side is
tested on any machine.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from worker_replies import LAUNCHER, ok

from grader.checks.correctness import failure_from_task
from grader.checks.counters import launched
from grader.checks.counters.ncu import NO_KERNEL, CounterRun, Profiles
from grader.isolation import replies, runner, toolrun
from grader.isolation.launch import Isolation, RunDirs
from grader.isolation.replies import Reply
from grader.isolation.runner import INTERFERED, TaskResult, WorkerSession
from grader.isolation.sandbox import Sandbox
from grader.labspec.labs import find_lab
from grader.outcome import Outcome, Stage
from grader.worker.protocol import (
    SharedBuffer,
    Status,
    Task,
    case_task,
    marked_tasks,
    read_task,
    share_task,
    timing_sample,
    tool_case_task,
)


def _case(memcpy_only: bool = False) -> Task:
    if memcpy_only:
        return tool_case_task("/lib.so", LAUNCHER, {"width": 16}, {"M": "/in/M.npy", "N": "/in/N.npy"})
    buffers = [SharedBuffer(name=n, size=2 << 20, host=False) for n in ("M", "N", "P")]
    return case_task("/lib.so", LAUNCHER, {"width": 16}, "0123abcd", buffers, 4)


def _read() -> Task:
    return read_task("0123abcd", "/out", False, LAUNCHER)



GOOD_CASE = {"status": "ok", "seconds": 0.01, "kernels_launched": ["matmul_tiled"]}
#: The GPU's memory as the trusted worker finds it after a call that kept none: [free, total].
ROOMY = [79 << 30, 80 << 30]
GOOD_READ = {"status": "ok", "outputs": {"P": "P.npy"}, "guard_violations": {}, "inputs_modified": [], "gpu_memory": ROOMY}


def test_a_reply_of_the_shape_its_task_asks_for_is_accepted():
    assert replies.problem(_case(), GOOD_CASE) == ""
    assert replies.problem(_read(), GOOD_READ) == ""
    assert replies.problem(_read(), {**GOOD_READ, "guard_violations": {"P": [0, 12]}, "inputs_modified": ["M"]}) == ""
    assert replies.problem(_case(True), {"status": "ok", "seconds": 0.0, "kernels_launched": None}) == ""
    assert replies.problem(_case(), {"status": "cuda_error", "error": "an illegal memory access", "sticky": True}) == ""
    assert replies.problem(timing_sample("student"), {"status": "ok", "ms": 0.2, "wall_ms": 0.21, "gate": "held"}) == ""
    shared = {"status": "ok", "share": "0123abcd", "buffers": [{"name": n, "size": 2 << 20, "host": False} for n in "MNP"]}
    assert replies.problem(share_task(LAUNCHER, {"width": 16}, {}, 4), shared) == ""


@pytest.mark.parametrize("change,why", [
    ({"seconds": math.nan}, "seconds not a finite number"),
    ({"seconds": True}, "seconds not a finite number"),
    ({"kernels_launched": "matmul_tiled"}, "kernels_launched not a list of names"),
    ({"kernels_launched": ["k"] * 1000}, "kernels_launched not a list of names"),
    ({"status": "pass"}, "unknown status 'pass'"),
    ({"status": "timeout"}, "unknown status 'timeout'"),  # only the grader says so
    ({"shared_cleared": "all"}, "shared_cleared not a count"),
    ({"shared_cleared": -1}, "shared_cleared not a count"),
])
def test_a_malformed_or_forged_case_reply_is_named(change, why):
    assert replies.problem(_case(), {**GOOD_CASE, **change}).startswith(why)


@pytest.mark.parametrize("change,why", [
    ({"outputs": ["P.npy"]}, "outputs not a mapping"),
    ({"outputs": {"P": "../../etc/passwd"}}, "outputs P: not its own file"),
    ({"outputs": {}}, "outputs lacks P"),
    ({"outputs": {"P": "P.npy", "Q": "Q.npy"}}, "outputs names no such buffer: 'Q'"),
    ({"guard_violations": {"P": [0]}}, "guard_violations P: not two counts"),
    ({"guard_violations": {"P": [-1, 0]}}, "guard_violations P: not two counts"),
    ({"inputs_modified": ["X"]}, "inputs_modified names no such buffer: 'X'"),
    ({"gpu_memory": [1 << 30]}, "gpu_memory not two counts"),
])
def test_a_reading_of_shared_buffers_of_the_wrong_shape_is_named(change, why):
    """The trusted worker's reading is checked too: a wrong one is the grader's bug, never believed."""
    assert replies.problem(_read(), {**GOOD_READ, **change}).startswith(why)


def test_shared_buffers_must_be_one_per_array_of_the_launcher():
    task = share_task(LAUNCHER, {"width": 16}, {}, 4)
    two = {"status": "ok", "share": "x", "buffers": [{"name": n, "size": 1, "host": False} for n in "MN"]}
    assert replies.problem(task, two) == "buffers not one buffer for each of M, N, P"
    sizeless = {"status": "ok", "share": "x", "buffers": [{"name": n, "size": -1, "host": False} for n in "MNP"]}
    assert replies.problem(task, sizeless).startswith("buffers a buffer of no size")


def test_replies_missing_a_field_or_of_another_task_are_refused():
    missing = dict(GOOD_READ)
    del missing["guard_violations"]
    assert replies.problem(_read(), missing) == "no guard_violations"
    assert replies.problem(timing_sample("student"), {"status": "ok", "ms": math.inf, "wall_ms": 0.1, "gate": "held"}).startswith("ms not")
    # a forged clock makes the worker's own readings anything finite: the grader bounds them with its own
    assert replies.problem(timing_sample("student"), {"status": "ok", "ms": -1.0, "wall_ms": 0.1, "gate": "held"}) == ""
    marked = marked_tasks([_case(True)], [1234])
    assert replies.problem(marked, {"status": "ok", "results": [{"status": "ok", "seconds": 0.1, "kernels_launched": []}] * 2}) \
        .startswith("results not a list of at most 1 replies")
    assert replies.problem(marked, {"status": "ok", "results": [{"status": "ok"}]}) == "results reply 1: no seconds"
    assert replies.problem(_case(), {"status": "cuda_error", "error": ["not", "text"]}).startswith("an error that is not a text")


#: A stand-in worker: gets ready, then answers every task with the reply given in argv[1]
#: (JSON, with the task's nonce added), or, for "FLOOD", writes 2 MiB with no end of line. With
#: "SHARE " before the reply it first passes three descriptors tagged "s1", as the trusted worker
#: passes its shared buffers'; after a sticky error it ends, as the real worker does.
STAND_IN = r"""
import json, os, socket, sys
reply = sys.argv[1]
out = int(os.environ["GRADER_RESULT_FD"])
os.write(out, b'{"event": "ready"}\n')
for line in os.fdopen(int(os.environ["GRADER_TASK_FD"])):
    task = json.loads(line)
    if task.get("kind") == "quit":
        break
    if reply == "FLOOD":
        os.write(out, b"x" * (2 << 20))
        continue
    if reply.startswith("SHARE "):
        reply, null = reply[6:], os.open(os.devnull, os.O_RDONLY)
        socket.send_fds(socket.socket(fileno=int(os.environ["GRADER_SHARE_FD"])), [b"s1"], [null] * 3)
    os.write(out, (json.dumps({"event": "result", "id": task["id"], **json.loads(reply)}) + "\n").encode())
    if json.loads(reply).get("sticky"):
        break
"""


def _one_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: str, trusted: bool = False,
              task: Task | None = None) -> tuple[TaskResult, bool]:
    """One case (or ``task``) run by the stand-in that answers ``reply``: the result, and whether the worker was ended."""
    monkeypatch.setattr(runner, "worker_command", lambda *args: [sys.executable, "-I", "-c", STAND_IN, reply])
    session = WorkerSession(RunDirs(tmp_path / "in", tmp_path / "out"), Isolation(Sandbox(None, ""), trusted=trusted))
    try:
        result = session.run(task or _case(), 30)
        return result, session.proc is None
    finally:
        session.close()


FORGED = json.dumps({"status": "ok", "seconds": "no time at all", "kernels_launched": []})


def test_a_forged_reply_is_a_verdict_against_the_submission_and_ends_the_worker(tmp_path, monkeypatch):
    result, ended = _one_case(tmp_path, monkeypatch, FORGED)
    assert result.status == Status.INTERFERED.value and ended
    assert result.reason == f"{INTERFERED} (seconds not a finite number: 'no time at all')"
    check = failure_from_task(result, "correctness[width=16]", Stage.CORRECTNESS, 2)
    assert check.outcome is Outcome.ERROR and check.message.startswith(INTERFERED)
    assert "internal grader error" not in check.message


def test_the_same_reply_from_the_grader_s_own_worker_is_the_grader_s_error(tmp_path, monkeypatch):
    result, _ = _one_case(tmp_path, monkeypatch, FORGED, trusted=True)
    assert result.status == Status.WORKER_ERROR.value and "malformed reply: seconds not a finite number" in result.reason


def test_a_worker_error_once_student_code_is_loaded_is_the_submission_s(tmp_path, monkeypatch):
    said = json.dumps({"status": "worker_error", "error": "Traceback (most recent call last):\n  ...\nKeyError: 'P'"})
    result, _ = _one_case(tmp_path, monkeypatch, said)
    assert result.status == Status.INTERFERED.value
    assert result.reason == f"{INTERFERED} (its own code failed (KeyError: 'P'))"


def test_a_reply_without_an_end_is_cut_off_at_its_limit(tmp_path, monkeypatch):
    result, _ = _one_case(tmp_path, monkeypatch, "FLOOD")
    assert result.status == Status.INTERFERED.value and "a reply of more than 1 MiB" in result.reason


def test_a_forged_exit_report_with_a_code_that_is_not_a_number_is_an_exit_not_a_crash_of_the_grader(tmp_path, monkeypatch):
    result, _ = _one_case(tmp_path, monkeypatch, json.dumps({"status": "exited", "code": "zero"}))
    assert result.status == "exited" and "status 9" in result.reason, result


def test_a_right_reply_comes_back_as_its_typed_record(tmp_path, monkeypatch):
    result, ended = _one_case(tmp_path, monkeypatch, json.dumps({**GOOD_CASE, "shared_cleared": 1}))
    assert result.status == "ok" and result.reason == "" and not ended
    assert result.answer == Reply(Status.OK, seconds=0.01, kernels_launched=("matmul_tiled",), shared_cleared=1)


@pytest.mark.parametrize("sticky", [True, False])
def test_a_cuda_error_is_its_reason_and_a_sticky_one_ends_the_worker(tmp_path, monkeypatch, sticky):
    said = json.dumps({"status": "cuda_error", "error": "an illegal memory access", "sticky": sticky})
    result, ended = _one_case(tmp_path, monkeypatch, said)
    assert (result.status, result.reason, ended) == ("cuda_error", "an illegal memory access", sticky)
    assert result.answer == Reply(Status.CUDA_ERROR, "an illegal memory access", sticky)


def test_an_interfered_status_with_no_error_is_a_failure_with_no_reply(tmp_path, monkeypatch):
    """Only the grader says ``interfered``; one that comes from the worker with no error is not a
    reply to believe: the task failed, with nothing more said."""
    result, _ = _one_case(tmp_path, monkeypatch, json.dumps({"status": "interfered", "seconds": 1.0}))
    assert (result.status, result.reason, result.reply) == ("interfered", "", None)


def test_the_trusted_workers_shared_buffers_come_typed_with_their_descriptors(tmp_path, monkeypatch):
    said = json.dumps({"status": "ok", "share": "s1", "buffers": [{"name": n, "size": 2 << 20, "host": False} for n in "MNP"]})
    task = share_task(LAUNCHER, {"width": 16}, {}, 4)
    result, _ = _one_case(tmp_path, monkeypatch, "SHARE " + said, trusted=True, task=task)
    try:
        assert result.status == "ok" and len(result.fds) == 3
        assert result.answer.share == "s1" and [b["name"] for b in result.answer.buffers or ()] == ["M", "N", "P"]
    finally:
        for fd in result.fds:
            os.close(fd)
    monkeypatch.setattr(runner, "FDS_WAIT_S", 0.5)
    result, _ = _one_case(tmp_path, monkeypatch, said, trusted=True, task=task)  # the descriptors never come
    assert result.status == "worker_error" and "malformed reply: no descriptors for its shared buffers" in result.reason


def test_a_tool_run_s_result_file_of_the_wrong_shape_is_the_submission_s(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"status": "ok", "results": [{"status": "ok", "seconds": "fast"}]}))
    result = toolrun._read_result(tmp_path)
    assert result is not None and result.status == Status.INTERFERED.value
    assert result.error == f"{INTERFERED} (results reply 1: seconds not a finite number: 'fast')"
    (tmp_path / "result.json").write_text("[1, 2]")
    assert toolrun._read_result(tmp_path) == Reply(Status.INTERFERED, f"{INTERFERED} (a result that is not a JSON object)")
    (tmp_path / "result.json").write_text(json.dumps({"status": "ok", "results": 5}))  # once a crash of the grader's
    assert toolrun._read_result(tmp_path) == Reply(Status.INTERFERED, f"{INTERFERED} (results is not a list of replies)")
    fine = {"status": "ok", "results": [{"status": "ok", "seconds": 0.1, "kernels_launched": ["k"]}]}
    (tmp_path / "result.json").write_text(json.dumps(fine))
    assert toolrun._read_result(tmp_path) == Reply(Status.OK, results=(Reply(Status.OK, seconds=0.1, kernels_launched=("k",)),))


def test_a_tool_run_whose_worker_reports_its_own_failure_is_the_submission_s_unless_the_worker_was_the_grader_s(tmp_path):
    broke = {"status": "worker_error", "error": "Traceback ...\nAttributeError: 'list' object has no attribute 'items'"}
    failed = {"status": "ok", "results": [{"status": "ok", "seconds": 0.1, "kernels_launched": []}, broke]}
    (tmp_path / "result.json").write_text(json.dumps(failed))
    assert toolrun._read_result(tmp_path) == Reply(
        Status.INTERFERED, f"{INTERFERED} (its own code failed (AttributeError: 'list' object has no attribute 'items'))")
    # the baselines' own run: the grader's error, as it says
    assert toolrun._read_result(tmp_path, trusted=True) == Reply(
        Status.OK, results=(Reply(Status.OK, seconds=0.1, kernels_launched=()), Reply(Status.WORKER_ERROR, broke["error"])))
    (tmp_path / "result.json").write_text(json.dumps({"status": "ok", "results": "all fine"}))
    assert toolrun._read_result(tmp_path, trusted=True).status == "worker_error"


# ------------------------------------------------------------------ what ran: the profiler's record


def test_which_kernels_ran_is_the_profiler_s_record_of_the_student_s_cases():
    key = ((("width", 64),), 1)
    runs = {("student", key): CounterRun(values={"m": 1.0}, kernels=("matmul_naive(const float *, const float *, float *, int)",)),
            ("baseline naive", key): CounterRun(values={"m": 1.0}, kernels=("baseline_kernel",))}
    assert launched.record(runs).names == {"matmul_naive(const float *, const float *, float *, int)"}
    assert launched.record({("student", key): CounterRun(error=NO_KERNEL)}) == launched.Record(frozenset())
    hidden = CounterRun(hidden="your launcher ran 2 distinct kernels", kernels=("decoy",))
    assert launched.record({("student", key): hidden}).names == {"decoy"}, "what the profiler saw, and nothing it did not"
    assert launched.record({("student", key): CounterRun(skipped="counters restricted")}).unknown == "counters restricted"
    assert launched.record({}).unknown == "the profiler did not run"


def test_a_lab_with_compiled_code_checks_and_no_counter_checks_profiles_a_case_for_the_record():
    import dataclasses

    from grader.checks.counters import traffic

    untimed = dataclasses.replace(find_lab("memory_types"), benchmark=None)
    extra = launched.list_check(untimed)
    assert not untimed.counters and extra is not None
    last = untimed.correctness.cases[-1]
    assert (dict(extra.params), extra.seed, extra.metric) == (dict(last.params), last.seed, launched.LIST_METRIC)
    assert extra.time_limit_s >= 60, "a profiler run pays for ncu's start and may wait for the GPU"
    assert [c.id for c in launched.profiles_for(untimed).checks] == [launched.LIST_CHECK_ID]
    timed = find_lab("memory_types")  # its timed case's traffic may be kept from an earlier grade: the record is this grade's
    assert launched.profiles_for(timed).checks == (extra, *traffic.checks(timed))
    key = Profiles.case(traffic.checks(timed)[0])
    kept = CounterRun(values={"dram__bytes_read.sum": 1.0}, kernels=("old_kernel",), cached=True)
    fresh = CounterRun(values={launched.LIST_METRIC: 1.0}, kernels=("conv1d_tiled",))
    assert launched.record({("student", key): kept, ("student", Profiles.case(extra)): fresh}).names == {"conv1d_tiled"}
    counted = find_lab("tiled_matmul")
    assert launched.list_check(counted) is None
    assert launched.profiles_for(counted).checks == (*counted.counters, *traffic.checks(counted))



class _Session:
    """A test double of WorkerSession that answers each task kind as told (the real workers share
    and read buffers in the GPU tests)."""

    def __init__(self, tmp_path: Path, name: str, answer):
        self.dirs = RunDirs(tmp_path / name / "in", tmp_path / name / "out")
        self.answer, self.tasks, self.proc, self.killed = answer, [], None, 0

    def run(self, task, limit, fds=()):
        self.tasks.append((task, fds))
        return self.answer(task)

    def kill(self):
        self.killed += 1


@pytest.mark.parametrize("guard,modified,expect", [
    ({}, [], "correct"),
    ({"P": [0, 8]}, [], "wrote outside P: 0 bytes changed before it, 8 after it"),
    ({}, ["M"], "modified its input M"),
])
def test_a_case_is_judged_on_the_trusted_workers_reading_whatever_the_students_worker_says(tmp_path, guard, modified, expect):
    """The student's worker only calls the launcher on buffers it is sent; what the call left (the
    output, the guard words, the inputs) is the trusted worker's reading. A reply of the student's
    worker that claims all is well, or carries outputs of its own, changes nothing."""
    import numpy as np

    from grader.checks.correctness import grade_case
    from grader.labspec.labs import load_problem
    from grader.worker.protocol import Kind

    spec = find_lab("tiled_matmul")
    case = spec.correctness.cases[0]
    problem = load_problem(spec)

    def trusted_answer(task):
        if task["kind"] == Kind.SHARE.value:
            inputs = {k: np.load(v) for k, v in task["inputs"].items()}
            trusted_answer.want = problem.expected(inputs, dict(case.params))
            return ok(task, {"share": "s1", "buffers": [{"name": n, "size": 2 << 20, "host": False} for n in "MNP"]}, fds=(7, 8, 9))
        if task["kind"] == Kind.READ.value:
            Path(task["out_dir"]).mkdir(parents=True)
            np.save(Path(task["out_dir"]) / "P.npy", trusted_answer.want["P"].astype(np.float32))
            return ok(task, {"outputs": {"P": "P.npy"}, "guard_violations": guard, "inputs_modified": modified,
                                     "gpu_memory": ROOMY})
        return ok(task, {})

    forged = {"seconds": 0.001, "kernels_launched": ["matmul_tiled"], "guard_violations": {}, "inputs_modified": [],
              "outputs": {"P": "P.npy"}}
    student = _Session(tmp_path, "student", lambda task: ok(task, forged))
    trusted = _Session(tmp_path, "trusted", trusted_answer)
    sub = SimpleNamespace(spec=spec, secret="s", problem=problem, cache_dir=None, library=tmp_path / "lib.so",
                          time_left=lambda limit=math.inf: 60.0)
    closed = []
    real_close = os.close
    try:
        os.close = lambda fd: closed.append(fd) if fd in (7, 8, 9) else real_close(fd)
        check = grade_case(sub, student, trusted, case, "case0")
    finally:
        os.close = real_close
    assert check.message.startswith(expect) if expect != "correct" else check.outcome is Outcome.PASS
    assert check.outcome is (Outcome.PASS if expect == "correct" else Outcome.FAIL)
    sent = [t for t, _ in student.tasks]
    assert [t["kind"] for t in sent] == [Kind.CASE.value] * case.repeat and all(fds == (7, 8, 9) for _, fds in student.tasks)
    assert sent[0]["share"] == "s1" and "inputs" not in sent[0]  # the student's worker gets buffers, not files
    kinds = [t["kind"] for t, _ in trusted.tasks]
    assert kinds == [Kind.SHARE.value, *[Kind.READ.value] * case.repeat, Kind.DROP.value]
    assert sorted(closed) == [7, 8, 9]  # the grader's copies of the descriptors are closed


def _right_answers(problem, case):
    """A stand-in trusted worker for a tiled_matmul case: it shares the buffers, and every reading
    of them holds the right answer and nothing else amiss."""
    import numpy as np

    from grader.worker.protocol import Kind

    want = {}

    def trusted_answer(task):
        if task["kind"] == Kind.SHARE.value:
            want.update(problem.expected({k: np.load(v) for k, v in task["inputs"].items()}, dict(case.params)))
            return ok(task, {"share": "s1", "buffers": [{"name": n, "size": 2 << 20, "host": False} for n in "MNP"]})
        if task["kind"] == Kind.READ.value:
            Path(task["out_dir"]).mkdir(parents=True)
            np.save(Path(task["out_dir"]) / "P.npy", want["P"].astype(np.float64))
            return ok(task, {"outputs": {"P": "P.npy"}, "guard_violations": {}, "inputs_modified": [], "gpu_memory": ROOMY})
        return ok(task, {})
    return trusted_answer


@pytest.mark.parametrize("second,left,expect", [
    ("ok", 60.0, "correct (largest error 0); it took 14.0 s, over the case's limit of 10 s, and was run again with 30 s to finish"),
    ("timeout", 60.0, "did not finish within 10 s, nor within 30 s when run again, and was killed (infinite loop or deadlock?)"),
    (None, 10.0, "did not finish within 10 s and was killed"),  # the submission's own limit leaves no room
])
def test_a_case_killed_at_its_limit_is_run_once_more_with_three_times_as_long(tmp_path, second, left, expect):
    """A busy host must not decide a verdict: a call killed at the case's limit gets one more run,
    on buffers the trusted worker fills again, before its timeout becomes the verdict."""

    from grader.checks.correctness import grade_case
    from grader.labspec.labs import load_problem
    from grader.worker.protocol import Kind

    spec = find_lab("tiled_matmul")
    case = spec.correctness.cases[0]
    problem = load_problem(spec)
    trusted_answer = _right_answers(problem, case)

    killed = TaskResult("timeout", reason="did not finish within 10 s and was killed (infinite loop or deadlock?)", seconds=10.0)
    answers = iter([killed, TaskResult("timeout", seconds=30.0) if second == "timeout" else
                    ok(_case(), {"seconds": 14.0, "kernels_launched": ["k"]}, seconds=14.0)])
    limits: list[float] = []

    def student_answer(task, limit):
        limits.append(limit)
        return next(answers)

    student = _Session(tmp_path, "student", None)
    student.run = lambda task, limit, fds=(): student_answer(task, limit)
    trusted = _Session(tmp_path, "trusted", trusted_answer)
    sub = SimpleNamespace(spec=spec, secret="s", problem=problem, cache_dir=None, library=tmp_path / "lib.so",
                          time_left=lambda limit=math.inf: min(limit, left))
    check = grade_case(sub, student, trusted, case, "case0")
    assert check.message.startswith(expect), check.message
    assert check.outcome is (Outcome.PASS if second == "ok" else Outcome.ERROR)
    assert limits == ([10.0, 30.0] if second else [10.0])
    refills = [t for t, _ in trusted.tasks if t["kind"] == Kind.READ.value and t["keep"]]
    assert len(refills) == (1 if second else 0)  # the buffers filled again before the second run


@pytest.mark.parametrize("cleared,calls,expect", [
    ([0], 1, "correct"),
    ([2, 1, 0], 3, "correct"),  # run again until no launch ran on cleared shared memory
    ([1, 1, 1, 1, 1, 1], 4, "correct"),  # at most three times more: the last run's outputs decide
])
def test_a_call_whose_kernels_ran_on_cleared_shared_memory_is_run_again_with_other_patterns(tmp_path, cleared, calls, expect):
    """Another context's kernels between the grader's fill and the student's kernel leave shared
    memory cleared (the fill's check kernel finds next to none of its pattern): such a call is run
    again on buffers the trusted worker fills again, each time with another pattern, a bounded
    number of times, and the case's figures say how often."""

    from grader.checks.correctness import CLEARED_RERUNS, grade_case
    from grader.labspec.labs import load_problem
    from grader.worker.protocol import Kind

    spec = find_lab("tiled_matmul")
    case = dataclasses.replace(spec.correctness.cases[0], repeat=1)
    problem = load_problem(spec)
    trusted_answer = _right_answers(problem, case)

    answers = iter(cleared)
    student = _Session(tmp_path, "student", lambda task: ok(task, {"seconds": 0.01, "kernels_launched": ["k"],
                                                                           "shared_cleared": next(answers)}, seconds=0.01))
    trusted = _Session(tmp_path, "trusted", trusted_answer)
    sub = SimpleNamespace(spec=spec, secret="s", problem=problem, cache_dir=None, library=tmp_path / "lib.so",
                          time_left=lambda limit=math.inf: 60.0)
    check = grade_case(sub, student, trusted, case, "case0")
    assert check.outcome is Outcome.PASS and check.message.startswith(expect)
    assert len(student.tasks) == calls == min(len(cleared), 1 + CLEARED_RERUNS)
    assert len({t["poison"] for t, _ in student.tasks}) == calls  # another pattern each time
    refills = [t for t, _ in trusted.tasks if t["kind"] == Kind.READ.value and t["keep"]]
    assert len(refills) == calls - 1  # the buffers filled again before each run again
    assert check.measured.get("runs_again_on_cleared_shared_memory", 0) == calls - 1


KEPT = "your code left no free GPU memory: 78.0 GiB of 80.0 GiB held after it returned (0.00 GiB free)"


@pytest.mark.parametrize("short_at,given_back,expect", [
    ("read", 78 << 30, KEPT),  # found by the reading after the call, however the pool is cached
    ("read", 0, "correct"),  # another process (another lane) holds it: no one is blamed
    ("share", 78 << 30, KEPT),  # the trusted worker cannot even allocate the case's buffers
    ("share", 0, "correct"),  # another process held it, and let go: the case waits and runs
])
def test_a_student_whose_call_keeps_the_gpus_memory_is_told_so_only_if_ending_its_worker_gives_it_back(
        tmp_path, monkeypatch, short_at, given_back, expect):
    """A call that keeps (nearly) all of the GPU's memory is found by the trusted worker, after the
    call or when it cannot allocate the next buffers. With several lanes on one GPU the memory may be
    another lane's: the student's worker is ended, and only memory that comes back then is theirs."""
    import numpy as np

    from grader.checks import correctness
    from grader.labspec.labs import load_problem
    from grader.worker.protocol import Kind

    monkeypatch.setattr(correctness, "RELEASE_WAIT_S", 0.3)
    monkeypatch.setattr(correctness, "MEMORY_POLL_S", 0.05)
    spec = find_lab("tiled_matmul")
    case = spec.correctness.cases[0]
    problem = load_problem(spec)
    want, shares, starved = {}, [], 2 << 20

    def trusted_answer(task):
        if task["kind"] == Kind.SHARE.value:
            shares.append(task)
            if short_at == "share" and len(shares) == 1:
                return TaskResult("out_of_memory", reason="out of memory")
            want.update(problem.expected({k: np.load(v) for k, v in task["inputs"].items()}, dict(case.params)))
            return ok(task, {"share": "s1", "buffers": [{"name": n, "size": 2 << 20, "host": False} for n in "MNP"]})
        if task["kind"] == Kind.READ.value:
            Path(task["out_dir"]).mkdir(parents=True)
            np.save(Path(task["out_dir"]) / "P.npy", want["P"].astype(np.float64))
            return ok(task, {"outputs": {"P": "P.npy"}, "guard_violations": {}, "inputs_modified": [],
                                     "gpu_memory": [starved, 80 << 30] if short_at == "read" else ROOMY})
        if task["kind"] == Kind.MEMORY.value:  # asked once the student's worker is ended
            return ok(task, {"gpu_memory": [starved + (given_back if student.killed else 0), 80 << 30]})
        return ok(task, {})

    student = _Session(tmp_path, "student", lambda task: ok(task, {"seconds": 0.01, "kernels_launched": ["k"]}))
    student.proc = SimpleNamespace(poll=lambda: None if not student.killed else 0)
    trusted = _Session(tmp_path, "trusted", trusted_answer)
    sub = SimpleNamespace(spec=spec, secret="s", problem=problem, cache_dir=None, library=tmp_path / "lib.so",
                          time_left=lambda limit=math.inf: 60.0)
    check = correctness.grade_case(sub, student, trusted, case, "case0")
    assert student.killed == 1  # the next case starts a fresh worker either way
    waited = sum(t["kind"] == Kind.MEMORY.value for t, _ in trusted.tasks)
    if expect == "correct":
        assert check.outcome is Outcome.PASS, check.message
        assert waited > 1 and len(shares) == (2 if short_at == "share" else 1)  # it waited for memory that never came back
    else:
        assert check.outcome is Outcome.ERROR and len(shares) == 1
        assert check.message == expect + ("; free what you allocate with cudaFree before the launcher returns; "
                                          "the next case runs in a fresh process")
