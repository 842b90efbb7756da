"""A student's sanitizer cases of several labs run one process per tool: what a shared run
settles (only a clean one, every case run) and what it leaves to each lab's own run. Real shared
runs on a GPU are in tests/test_gpu_labs.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from grader import sanitizer, sanitizerbatch
from grader.runner import Isolation, RunDirs, ToolRun
from grader.sandbox import Sandbox
from grader.sanitizerbatch import SanitizerBatch, ToolRequest, sanitize_together
from grader.worker.protocol import Kind, case_task

CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
FOUND = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 4 bytes\n"
         "=========     at k(float *)+0x730 in student.cu:23\n========= \n========= ERROR SUMMARY: 3 errors\n")


def _request(lab: str, tool: str, tmp: Path, check: str | None = None) -> ToolRequest:
    dirs = RunDirs(tmp / lab / "in", tmp / lab / "out")
    task = case_task(str(tmp / lab / "lib.so"), {"name": "f", "args": []}, {}, {}, str(dirs.outbox), memcpy_only=True)
    return ToolRequest(lab, check or f"{tool}_clean", tool, task, dirs, Isolation(Sandbox(None, reason="test"), read_only=(tmp / lab,)),
                       10.0, threading.Event())


def _tool(monkeypatch, returncode: int | None, log: str, results: list | None, calls: list | None = None) -> None:
    def fake(task, tool, dirs, limit, isolation, stop=None):
        if calls is not None:
            calls.append((tool, task, limit, isolation))
        return ToolRun(returncode, log, "", None if results is None else {"status": "ok", "results": results}, 2.5), ""
    monkeypatch.setattr(sanitizer, "run_tool", fake)


def test_a_clean_shared_run_settles_every_labs_check_of_its_tool(monkeypatch, tmp_path):
    calls: list = []
    _tool(monkeypatch, 0, CLEAN, [{"status": "ok"}, {"status": "ok"}], calls)
    a, b = _request("a", "memcheck", tmp_path), _request("b", "memcheck", tmp_path)
    out = sanitize_together([a, b])
    assert set(out) == {("a", "memcheck_clean"), ("b", "memcheck_clean")}
    assert all(run.errors == 0 and not run.error and run.shared == 2 and run.seconds == 2.5 for run in out.values())
    (tool, task, limit, isolation), = calls
    assert tool == "memcheck" and task["kind"] == Kind.MARKED.value and task["tasks"] == [a.task, b.task]
    assert limit == 20.0  # the cases' limits added up: they run one after the other
    assert set(isolation.read_only) == {tmp_path / "a", tmp_path / "b"}  # both labs' files, no more


@pytest.mark.parametrize("returncode,log,results", [
    (sanitizer.ERROR_EXIT, FOUND, [{"status": "ok"}, {"status": "ok"}]),  # a report: whose, the labs' own runs say
    (0, CLEAN, [{"status": "ok"}, {"status": "cuda_error", "error": "unspecified launch failure"}]),  # a case failed
    (0, CLEAN, [{"status": "ok"}]),  # a case not run (the context broke before it)
    (None, "", None),  # killed at the limit, or stopped
    (-9, "", None),  # the process died
])
def test_a_shared_run_that_is_not_clean_settles_nothing(monkeypatch, tmp_path, returncode, log, results):
    _tool(monkeypatch, returncode, log, results)
    assert sanitize_together([_request("a", "racecheck", tmp_path), _request("b", "racecheck", tmp_path)]) == {}


def test_no_sanitizer_here_is_the_same_for_every_lab(monkeypatch, tmp_path):
    monkeypatch.setattr(sanitizer, "run_tool", lambda *a, **k: (None, "compute-sanitizer is not installed on this machine"))
    out = sanitize_together([_request("a", "memcheck", tmp_path), _request("b", "memcheck", tmp_path)])
    assert {run.skipped for run in out.values()} == {"compute-sanitizer is not installed on this machine"} and len(out) == 2


def test_each_tool_runs_once_for_the_labs_and_a_tool_of_one_lab_is_left_to_it(monkeypatch, tmp_path):
    calls: list = []
    _tool(monkeypatch, 0, CLEAN, [{"status": "ok"}] * 3, calls)
    requests = [_request("a", "memcheck", tmp_path), _request("a", "memcheck", tmp_path, "memcheck_thin"),
                _request("b", "memcheck", tmp_path), _request("a", "synccheck", tmp_path), _request("b", "racecheck", tmp_path)]
    out = sanitize_together(requests)
    assert [c[0] for c in calls] == ["memcheck"]  # synccheck and racecheck have one lab each: run alone, as before
    assert set(out) == {("a", "memcheck_clean"), ("a", "memcheck_thin"), ("b", "memcheck_clean")}


def test_the_batch_runs_once_every_lab_has_sent_and_hands_each_its_own(monkeypatch, tmp_path):
    ran: list[list[str]] = []

    def fake(requests):
        ran.append([r.lab for r in requests])
        return {(r.lab, r.check): sanitizer.SanitizerRun(shared=2) for r in requests}

    monkeypatch.setattr(sanitizerbatch, "sanitize_together", fake)
    batch = SanitizerBatch(["b", "a", "c"])
    batch.send("b", [_request("b", "memcheck", tmp_path)])
    batch.send("c", [])  # a lab with nothing to run (it did not compile, say)
    assert ran == [] and batch.waiting_for() == {"a"}
    batch.send("a", [_request("a", "memcheck", tmp_path)])
    assert set(batch.runs("a")) == {"memcheck_clean"} and set(batch.runs("c")) == set()
    assert ran == [["a", "b"]]
    batch.send("a", [_request("a", "racecheck", tmp_path)])  # only a lab's first send counts
    assert ran == [["a", "b"]]


def test_a_lab_alone_or_a_broken_shared_run_leaves_the_checks_to_the_labs_own_runs(monkeypatch, tmp_path):
    monkeypatch.setattr(sanitizerbatch, "sanitize_together", lambda requests: pytest.fail("a shared run for one lab"))
    alone = SanitizerBatch(["a", "b"])
    alone.send("a", [_request("a", "memcheck", tmp_path)])
    alone.send("b", [])
    assert alone.runs("a") == {}

    def broken(requests):
        raise RuntimeError("grader bug")

    monkeypatch.setattr(sanitizerbatch, "sanitize_together", broken)
    batch = SanitizerBatch(["a", "b"])
    batch.send("a", [_request("a", "memcheck", tmp_path)])
    batch.send("b", [_request("b", "memcheck", tmp_path)])
    ran_alone: list[str] = []
    monkeypatch.setattr(sanitizer, "grade", lambda sub, check: ran_alone.append(check.id) or "alone")

    class Sub:
        class spec:
            id = "a"

    class Check:
        id = "memcheck_clean"

    assert sanitizerbatch.grade(Sub(), Check(), batch) == ["alone"] and ran_alone == ["memcheck_clean"]


def test_a_lab_whose_cases_cannot_be_written_sends_none_and_the_others_do_not_wait(tmp_path):
    batch = SanitizerBatch(["a", "b"])

    def broken() -> list[ToolRequest]:
        raise OSError("disk full")

    with pytest.raises(OSError):
        batch.send_made("a", broken)
    assert batch.waiting_for() == {"b"}
    batch.send_made("b", lambda: [_request("b", "memcheck", tmp_path)])
    assert batch.runs("b") == {}  # one lab sent cases: it runs them alone
