"""A worker's reply crosses into the grader as a typed record, made in one place right after it is
checked (``replies.parse``): a reply of the wrong shape stays a ``problem`` with its text, and a
right one becomes a :class:`Reply` holding exactly the fields its task's kind asks for."""

from __future__ import annotations

import json

import pytest
from worker_replies import LAUNCHER

from grader.isolation import replies
from grader.isolation.replies import Invalid, Reply, start_seconds
from grader.worker.protocol import (
    SharedBuffer,
    Status,
    Task,
    case_task,
    drop_task,
    marked_tasks,
    memory_task,
    read_task,
    record_task,
    share_task,
    timing_close,
    timing_open,
    timing_prepare,
    timing_sample,
    tool_case_task,
)

BUFFERS = [{"name": n, "size": 2 << 20, "host": n == "M"} for n in "MNP"]
CASE = case_task("/lib.so", LAUNCHER, {"width": 16}, "s1", [SharedBuffer(name=n, size=2 << 20, host=False) for n in "MNP"], 4)
TOOL_CASE = tool_case_task("/lib.so", LAUNCHER, {"width": 16}, {})
READ = read_task("s1", "/out", False, LAUNCHER)
OPEN = timing_open({"student": "/lib.so"}, LAUNCHER, {"width": 16}, "problem.py", 7, False)
DEVICE = {"name": "H100", "compute_capability": "9.0", "sms": 132, "l2_bytes": 50 << 20, "peak_dram_gbps": 3350.0,
          "something_new": [1, 2]}


def _ok(task: Task, **fields: object) -> Reply:
    raw = {"status": "ok", **fields}
    reply = replies.parse(task, json.loads(json.dumps(raw)))
    assert isinstance(reply, Reply), reply
    return reply


@pytest.mark.parametrize("task,raw", [
    (CASE, {"status": "ok", "seconds": "fast", "kernels_launched": []}),
    (CASE, {"status": "ok", "kernels_launched": []}),
    (CASE, {"status": "pass"}),
    (CASE, {"status": "cuda_error", "error": ["not", "text"]}),
    (CASE, {"status": "cuda_error", "error": "x", "sticky": "yes"}),
    (READ, {"status": "ok", "outputs": {"P": "../P.npy"}, "guard_violations": {}, "inputs_modified": [], "gpu_memory": [1, 2]}),
    (READ, {"status": "ok", "outputs": {"P": "P.npy"}, "guard_violations": {}, "inputs_modified": ["P"], "gpu_memory": [1, 2]}),
    (share_task(LAUNCHER, {"width": 16}, {}, 4), {"status": "ok", "share": "s1", "buffers": BUFFERS[:2]}),
    (OPEN, {"status": "ok", "device": {**DEVICE, "sms": -1}}),
    (timing_sample("student"), {"status": "ok", "ms": float("nan"), "wall_ms": 1.0, "gate": "held"}),
    (timing_close("/out"), {"status": "ok", "check_outputs": {"P": "P"}, "check_inputs": {}, "inputs_modified": []}),
    (marked_tasks([TOOL_CASE], [1]), {"status": "ok", "results": [{"status": "ok"}]}),
])
def test_a_malformed_reply_is_invalid_with_the_problem_text_it_always_had(task, raw):
    why = replies.problem(task, raw)
    assert why
    assert replies.parse(task, raw) == Invalid(why)


def test_a_case_reply_becomes_a_record_of_its_fields():
    assert _ok(CASE, seconds=0.25, kernels_launched=["k", "k2"], shared_cleared=2) == Reply(
        Status.OK, seconds=0.25, kernels_launched=("k", "k2"), shared_cleared=2)
    unnamed = _ok(CASE, seconds=1, kernels_launched=None)
    assert unnamed.kernels_launched is None and unnamed.shared_cleared == 0
    assert type(unnamed.seconds) is int  # kept as the worker wrote it
    record = {"text": "garbage", "arrays": 3}  # the replayer's parser checks it, not this one
    assert _ok(record_task(TOOL_CASE), seconds=0.1, kernels_launched=[], record=record).record == record


def test_a_failed_reply_keeps_its_error_and_whether_it_was_sticky():
    failed = replies.parse(CASE, {"status": "cuda_error", "error": "an illegal memory access", "sticky": True, "seconds": "x"})
    assert failed == Reply(Status.CUDA_ERROR, "an illegal memory access", True)
    assert replies.parse(CASE, {"status": "out_of_memory"}) == Reply(Status.OUT_OF_MEMORY, None, False)


def test_an_ok_replys_unchecked_error_and_sticky_are_kept_as_the_readers_took_them():
    """An ok reply's ``error`` and ``sticky`` are not checked: the record keeps their text and
    truth, all that a reader of the reply ever took of them."""
    odd = replies.parse(TOOL_CASE, {"status": "ok", "seconds": 0.1, "kernels_launched": [], "error": ["a", 1], "sticky": 1})
    assert isinstance(odd, Reply) and odd.error == "['a', 1]" and odd.sticky is True


def test_the_trusted_workers_replies_become_records():
    shared = _ok(share_task(LAUNCHER, {"width": 16}, {}, 4), share="s1", buffers=BUFFERS)
    assert shared.share == "s1" and shared.buffers == tuple(BUFFERS) and shared.device == {}
    exported = _ok({**OPEN, "export": True}, share="s2", buffers=BUFFERS)
    assert exported.share == "s2" and exported.buffers == tuple(BUFFERS)
    read = _ok(READ, outputs={"P": "P.npy"}, guard_violations={"P": [0, 12]}, inputs_modified=["M"], gpu_memory=[1 << 30, 80 << 30])
    assert read == Reply(Status.OK, outputs={"P": "P.npy"}, guard_violations={"P": (0, 12)}, inputs_modified=("M",),
                         gpu_memory=(1 << 30, 80 << 30))
    assert _ok(memory_task(), gpu_memory=[5, 80]).gpu_memory == (5, 80)
    assert _ok(drop_task("s1")) == Reply(Status.OK)
    assert _ok(CASE, seconds=0.1, kernels_launched=[]).buffers is None  # a case's reply shares no buffers


def test_timing_replies_become_records():
    assert _ok(OPEN, device=DEVICE).device == DEVICE  # kept whole: the reports show it
    sample = _ok(timing_sample("student"), ms=2, wall_ms=2.5, gate="held")
    assert (sample.ms, sample.wall_ms, sample.gate) == (2, 2.5, "held") and type(sample.ms) is int
    closed = _ok(timing_close("/out"), check_outputs={"P": "out_P.npy"}, check_inputs={"M": "in_M.npy"}, inputs_modified=["N"])
    assert (closed.check_outputs, closed.check_inputs, closed.inputs_modified) == ({"P": "out_P.npy"}, {"M": "in_M.npy"}, ("N",))
    assert _ok(timing_close(""), check_outputs={"P": 1}) == Reply(Status.OK)  # a close that saves nothing holds no fields
    assert _ok(timing_prepare("student")) == Reply(Status.OK)


def test_marked_cases_become_a_record_of_each_cases_reply():
    marked = marked_tasks([TOOL_CASE, TOOL_CASE, TOOL_CASE], [1, 2, 3])
    reply = _ok(marked, results=[{"status": "ok", "seconds": 0.1, "kernels_launched": ["k"]},
                                 {"status": "cuda_error", "error": "boom", "sticky": True}])
    assert reply.results == (Reply(Status.OK, seconds=0.1, kernels_launched=("k",)), Reply(Status.CUDA_ERROR, "boom", True))
    assert _ok(TOOL_CASE, seconds=0.1, kernels_launched=[]).results is None  # not marked: no list of replies


@pytest.mark.parametrize("raw", [
    {"status": "ok", "results": 5},
    {"status": "ok", "results": [{"status": "ok", "seconds": "fast"}]},
    {"status": "ok", "results": [1]},
    {"status": "ok", "results": [["status", "ok"]]},
    {"status": "ok"},
    {"status": "maybe"},
])
def test_a_one_shot_workers_malformed_result_is_invalid_with_the_problem_text_it_always_had(raw):
    why = replies.result_problem(raw)
    assert why
    assert replies.parse_result(raw) == Invalid(why)


def test_a_one_shot_workers_result_is_one_case_or_marked_cases():
    one = replies.parse_result({"status": "ok", "seconds": 0.5, "kernels_launched": ["k"]})
    assert one == Reply(Status.OK, seconds=0.5, kernels_launched=("k",))
    marked = replies.parse_result({"status": "ok", "results": [{"status": "ok", "seconds": 0.5, "kernels_launched": None},
                                                               {"status": "worker_error"}]})
    assert marked == Reply(Status.OK, results=(Reply(Status.OK, seconds=0.5), Reply(Status.WORKER_ERROR)))
    assert replies.parse_result({"status": "ok", "results": []}) == Reply(Status.OK, results=())  # an empty list is not none


def test_a_workers_word_on_its_start_is_shown_only_where_it_is_a_plausible_number():
    """The ready message's start time (shown in the lab's environment, never judged) must be a
    number of seconds within the start's own limit."""
    assert start_seconds({"event": "ready", "start_s": 1.25}, 120) == 1.25 and start_seconds({"start_s": 0}, 120) == 0.0
    for bad in (True, "1.0", -0.1, 120.5, float("nan"), None, [1.0]):
        assert start_seconds({"event": "ready", "start_s": bad}, 120) is None, bad
    assert start_seconds({"event": "ready"}, 120) is None
