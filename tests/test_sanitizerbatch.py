"""A student's sanitizer cases of several labs run one process per tool: what a shared run
settles (a lab whose case ran clean, every report naming another lab's kernel) and what it leaves
to each lab's own run. Real shared runs on a GPU are in tests/test_gpu_labs.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from worker_replies import tool_result

from grader.checks import sanitizer, sanitizerbatch
from grader.checks.sanitizerbatch import SanitizerBatch, ToolRequest, sanitize_together
from grader.isolation.launch import Isolation, RunDirs
from grader.isolation.sandbox import Sandbox
from grader.isolation.toolrun import ToolRun
from grader.worker.protocol import Kind, tool_case_task

CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
FOUND = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 4 bytes\n"
         "=========     at k(float *)+0x730 in student.cu:23\n========= \n========= ERROR SUMMARY: 3 errors\n")


def _request(lab: str, tool: str, tmp: Path, check: str | None = None, kernels: tuple[str, ...] = ()) -> ToolRequest:
    dirs = RunDirs(tmp / lab / "in", tmp / lab / "out")
    task = tool_case_task(str(tmp / lab / "lib.so"), {"name": "f", "args": []}, {}, {})
    return ToolRequest(lab, check or f"{tool}_clean", tool, task, dirs, Isolation(Sandbox(None, reason="test"), read_only=(tmp / lab,)),
                       10.0, threading.Event(), frozenset(kernels or (f"{lab}_kernel",)))


def _tool(monkeypatch, returncode: int | None, log: str, results: list | None, calls: list | None = None,
          later: list[tuple[int | None, str, list | None]] = ()) -> None:
    """compute-sanitizer's runs: the first as given, then each of ``later`` in turn."""
    runs = [(returncode, log, results), *later]

    def fake(task, tool, dirs, limit, isolation, stop=None, print_limit=sanitizer.PRINT_LIMIT):
        if calls is not None:
            calls.append((tool, task, limit, isolation, print_limit))
        code, text, replies = runs.pop(0)
        return ToolRun(code, text, "", None if replies is None else tool_result({"status": "ok", "results": replies}), 2.5), ""
    monkeypatch.setattr(sanitizer, "run_tool", fake)


def test_a_clean_shared_run_settles_every_labs_check_of_its_tool(monkeypatch, tmp_path):
    calls: list = []
    _tool(monkeypatch, 0, CLEAN, [{"status": "ok"}, {"status": "ok"}], calls)
    a, b = _request("a", "memcheck", tmp_path), _request("b", "memcheck", tmp_path)
    out = sanitize_together([a, b])
    assert set(out) == {("a", "memcheck_clean"), ("b", "memcheck_clean")}
    assert all(run.errors == 0 and not run.error and run.shared == 2 and run.seconds == 2.5 for run in out.values())
    (tool, task, limit, isolation, print_limit), = calls
    assert tool == "memcheck" and task["kind"] == Kind.MARKED.value and task["tasks"] == [a.task, b.task]
    assert limit == 20.0  # the cases' limits added up: they run one after the other
    assert print_limit == sanitizerbatch.SHARED_PRINT_LIMIT > sanitizer.PRINT_LIMIT
    assert set(isolation.read_only) == {tmp_path / "a", tmp_path / "b"}  # both labs' files, no more


@pytest.mark.parametrize("returncode,log,results", [
    (sanitizer.ERROR_EXIT, FOUND, [{"status": "ok"}, {"status": "ok"}]),  # a report naming no lab's kernel
    (None, "", None),  # killed at the limit, or stopped
    (-9, "", None),  # the process died
])
def test_a_shared_run_that_is_not_clean_settles_nothing(monkeypatch, tmp_path, returncode, log, results):
    _tool(monkeypatch, returncode, log, results)
    assert sanitize_together([_request("a", "racecheck", tmp_path), _request("b", "racecheck", tmp_path)]) == {}


def _report(kernel: str, what: str = "Invalid __global__ write of size 4 bytes") -> str:
    return (f"========= {what}\n=========     at {kernel}(const float *, float *, int)+0x730 in student.cu:23\n"
            "=========     by thread (0,0,0) in block (0,0,0)\n=========     Saved host backtrace up to driver entry point\n"
            "=========         Host Frame: run_case in main.py:30\n========= \n")


def _log(*reports: str, summary: str = "========= ERROR SUMMARY: 3 errors\n") -> str:
    return "========= COMPUTE-SANITIZER\n" + "".join(reports) + summary


OK = {"status": "ok"}
BROKE = {"status": "cuda_error", "error": "cudaErrorLaunchFailure: unspecified launch failure", "sticky": True}


def test_a_lab_whose_kernels_no_report_names_is_settled_and_the_one_named_is_left_to_its_own_run(monkeypatch, tmp_path):
    race = ("========= Error: Race reported between Write access at b_kernel(int *)+0xa0 in student.cu:3\n"
            "=========     and Read access at b_kernel(int *)+0xb0 in student.cu:4 [128 hazards]\n========= \n")
    _tool(monkeypatch, sanitizer.ERROR_EXIT, _log(race, summary="========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n"),
          [OK, OK, OK])
    out = sanitize_together([_request(lab, "racecheck", tmp_path) for lab in "abc"])
    assert set(out) == {("a", "racecheck_clean"), ("c", "racecheck_clean")}
    assert all(run.errors == 0 and run.shared == 3 for run in out.values())


def test_the_labs_a_broken_context_left_unreached_share_a_run_again(monkeypatch, tmp_path):
    calls: list = []
    hit = '========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.\n'
    _tool(monkeypatch, sanitizer.ERROR_EXIT, _log(_report("a_kernel"), _report("a_kernel"), hit), [BROKE], calls,
          later=[(0, CLEAN, [OK, OK])])
    requests = [_request(lab, "memcheck", tmp_path) for lab in "abc"]
    out = sanitize_together(requests)
    assert set(out) == {("b", "memcheck_clean"), ("c", "memcheck_clean")}  # a: its own run says what it did
    assert [c[1]["tasks"] for c in calls] == [[r.task for r in requests], [requests[1].task, requests[2].task]]
    assert {run.shared for run in out.values()} == {2}


def test_a_failed_case_is_left_to_its_own_run_and_one_lab_unreached_runs_alone(monkeypatch, tmp_path):
    calls: list = []
    _tool(monkeypatch, 0, CLEAN, [OK, {"status": "cuda_error", "error": "cudaErrorInvalidValue: invalid argument"}], calls)
    out = sanitize_together([_request(lab, "memcheck", tmp_path) for lab in "abc"])
    assert set(out) == {("a", "memcheck_clean")} and len(calls) == 1  # c, not reached, is one lab: alone


def test_a_run_stopped_for_a_lab_that_hangs_is_shared_again_by_the_others(monkeypatch, tmp_path):
    requests = [_request(lab, "synccheck", tmp_path) for lab in "abc"]
    calls: list = []
    _tool(monkeypatch, None, "", None, calls, later=[(0, CLEAN, [OK, OK])])
    requests[1].stop.set()  # b's correctness case hung: the shared run was stopped for it
    out = sanitize_together(requests)
    assert set(out) == {("a", "synccheck_clean"), ("c", "synccheck_clean")}
    assert calls[1][1]["tasks"] == [requests[0].task, requests[2].task]


@pytest.mark.parametrize("log,results", [
    (_log(_report("atomicAdd")), [OK, OK]),  # a device function's name: whose kernel called it?
    (_log(_report("a_kernel"), summary="========= ERROR SUMMARY: 30 errors\n========= ERROR SUMMARY: 29 errors were not printed. "
                                       "Use --print-limit option to adjust the number of printed errors\n"), [OK, OK]),
    (_log(_report("a_kernel"), "[... 1,234 bytes of output omitted]\n", _report("a_kernel")), [OK, OK]),  # the log was cut
    (_log('========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaMemcpy.\n'),
     [OK, OK]),  # a failed call that no broken context explains
    (_log(summary="========= ERROR SUMMARY: 2 errors\n"), [OK, OK]),  # errors counted, none printed
])
def test_a_report_that_cannot_be_told_apart_settles_nothing(monkeypatch, tmp_path, log, results):
    _tool(monkeypatch, sanitizer.ERROR_EXIT, log, results)
    assert sanitize_together([_request("a", "memcheck", tmp_path), _request("b", "memcheck", tmp_path)]) == {}


def test_a_kernel_name_two_labs_share_leaves_both_to_their_own_runs(monkeypatch, tmp_path):
    _tool(monkeypatch, sanitizer.ERROR_EXIT, _log(_report("tiled")), [OK, OK, OK])
    requests = [_request("a", "memcheck", tmp_path, kernels=("tiled",)), _request("b", "memcheck", tmp_path, kernels=("tiled", "b2")),
                _request("c", "memcheck", tmp_path)]
    assert set(sanitize_together(requests)) == {("c", "memcheck_clean")}


@pytest.mark.parametrize("ptxas,sanitizer_name", [
    ("matmul(const float*, const float*, float*, int)", "matmul(const float *, const float *, float *, int)"),
    ("void tiled<16>(float*, int)", "tiled<16>(float *, int)"),
    ("histogram_kernel", "histogram_kernel"),
])
def test_kernel_names_from_ptxas_and_from_the_sanitizer_agree(ptxas, sanitizer_name):
    assert sanitizerbatch.kernel_name(ptxas) == sanitizerbatch.kernel_name(sanitizer_name)


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
    monkeypatch.setattr(sanitizer, "run_alone", lambda sub, check: ran_alone.append(check.id) or sanitizer.SanitizerRun())
    monkeypatch.setattr(sanitizer, "judge", lambda sub, check, run: "alone")

    class Sub:
        gpu = None  # (nothing kept without a GPU)
        moot = threading.Event()

        class spec:
            id = "a"

    class Check:
        id = "memcheck_clean"

    assert sanitizerbatch.grade(Sub(), Check(), batch) == ["alone"] and ran_alone == ["memcheck_clean"]


def _kept_setup(monkeypatch, tmp_path):
    """A student's lab as the kept runs see it, a sanitizer at a path of its own, and each run alone counted."""
    from types import SimpleNamespace

    from grader.host.gpu import GpuInfo
    from grader.labspec.labs import find_lab

    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\n")
    monkeypatch.setenv("GRADER_COMPUTE_SANITIZER", str(tool))
    from grader.host import toolchain

    toolchain.find.cache_clear()
    monkeypatch.setattr(toolchain, "find", lambda name: tool if name == "compute-sanitizer" else None)
    library = tmp_path / "student.so"
    library.write_bytes(b"compiled once")
    spec = find_lab("boundary_checks")
    sub = SimpleNamespace(spec=spec, gpu=GpuInfo("H100", (9, 0), "580"), cache_dir=tmp_path / "cache", library=library,
                          name="labs/boundary_checks/student.cu", moot=threading.Event(), source_lines=("int x;",) * 40,
                          kernels=())
    runs: list[str] = []
    return sub, runs, tool


WRITE = "Invalid __global__ write of size 4 bytes\n  at matmul+0x70 in labs/boundary_checks/student.cu:23"
FOUND = sanitizer.SanitizerRun(errors=2, findings=(WRITE,),
                               log="========= ERROR SUMMARY: 2 errors", seconds=1.5, writes_outside=True)


def test_a_sanitizer_run_is_kept_for_the_next_grade_of_the_same_code_and_judged_again(monkeypatch, tmp_path):
    sub, runs, tool = _kept_setup(monkeypatch, tmp_path)
    memcheck, racecheck = sub.spec.sanitizers[0], next(c for c in sub.spec.sanitizers if c.tool == "racecheck")
    answers = {memcheck.id: FOUND, racecheck.id: sanitizer.SanitizerRun(seconds=1.8)}
    monkeypatch.setattr(sanitizer, "run_alone", lambda s, check: runs.append(check.id) or answers[check.id])

    def grade_all(reuse: bool = True) -> dict[str, object]:
        return {c.id: sanitizerbatch.grade(sub, c, None, reuse)[0] for c in (memcheck, racecheck)}  # type: ignore[arg-type]

    first = grade_all()
    assert runs == [memcheck.id, racecheck.id]
    runs.clear()
    again = grade_all()
    assert runs == [], "nothing run again"
    for cid, check in again.items():
        assert (check.outcome, check.message, check.location) == (first[cid].outcome, first[cid].message, first[cid].location)
        assert check.measured["kept"] is True and "kept" not in first[cid].measured
    assert again[memcheck.id].location.line == 23 and again[memcheck.id].measured["global_writes_outside"] is True
    monkeypatch.setattr(sanitizerbatch, "tool_task", lambda sub, check, dirs: {"case": check.id})
    sub.tool_dirs, sub.isolation, sub.time_left = (lambda name: RunDirs(tmp_path / name, tmp_path / name)), None, (lambda s: s)
    asked = [r.check for r in sanitizerbatch.requests_of(sub)]  # (the repository's shared runs)
    assert asked == [c.id for c in sub.spec.sanitizers if c not in (memcheck, racecheck)], "the kept checks ask for no run"
    assert len(sanitizerbatch.requests_of(sub, reuse=False)) == len(sub.spec.sanitizers)
    grade_all(reuse=False)
    assert runs == [memcheck.id, racecheck.id], "--rerun-tools"
    for edit in (lambda: sub.library.write_bytes(b"compiled from an edited file"),
                 lambda: tool.write_text("#!/bin/sh\n# another version of the tool\n")):
        edit()
        runs.clear()
        grade_all()
        assert runs == [memcheck.id, racecheck.id], "other code or another tool: run again"


@pytest.mark.parametrize("answer", [sanitizer.SanitizerRun(error="did not finish within 10 s under compute-sanitizer and was killed"),
                                    sanitizer.SanitizerRun(skipped="compute-sanitizer cannot run on this machine")])
def test_a_run_that_did_not_finish_or_could_not_run_is_not_kept(monkeypatch, tmp_path, answer):
    sub, runs, _ = _kept_setup(monkeypatch, tmp_path)
    check = sub.spec.sanitizers[0]
    monkeypatch.setattr(sanitizer, "run_alone", lambda s, c: runs.append(c.id) or answer)
    for _ in range(2):
        sanitizerbatch.grade(sub, check, None)  # type: ignore[arg-type]
    assert runs == [check.id, check.id]


def test_a_run_stopped_for_a_hung_case_is_not_kept_and_a_broken_kept_file_is_run_again(monkeypatch, tmp_path):
    sub, runs, _ = _kept_setup(monkeypatch, tmp_path)
    check = sub.spec.sanitizers[0]
    monkeypatch.setattr(sanitizer, "run_alone", lambda s, c: runs.append(c.id) or sanitizer.SanitizerRun())
    sub.moot.set()  # a correctness case hung while the run went on
    assert sanitizerbatch.grade(sub, check, None)[0].message.startswith("not graded")  # type: ignore[arg-type]
    assert sanitizerbatch.kept_file(sub, check).exists() is False  # type: ignore[union-attr]
    sub.moot.clear()
    sanitizerbatch.grade(sub, check, None)  # type: ignore[arg-type]
    path = sanitizerbatch.kept_file(sub, check)  # type: ignore[arg-type]
    assert path is not None and path.exists()
    for broken in (b"{not json", b'{"errors": "many"}', b"[]", b'{"errors": 0, "findings": [], "verdict": "pass"}',
                   b'{"errors": 1, "findings": [7]}'):
        path.write_bytes(broken)
        runs.clear()
        sanitizerbatch.grade(sub, check, None)  # type: ignore[arg-type]
        assert runs == [check.id], broken


def test_a_lab_whose_cases_cannot_be_written_sends_none_and_the_others_do_not_wait(tmp_path):
    batch = SanitizerBatch(["a", "b"])

    def broken() -> list[ToolRequest]:
        raise OSError("disk full")

    with pytest.raises(OSError):
        batch.send_made("a", broken)
    assert batch.waiting_for() == {"b"}
    batch.send_made("b", lambda: [_request("b", "memcheck", tmp_path)])
    assert batch.runs("b") == {}  # one lab sent cases: it runs them alone
