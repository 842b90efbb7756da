"""Hostile and broken submissions: contained, each with its exact verdict, nothing else affected.

The corpus lives in tests/hostile/ with its expected verdicts. Sandbox, seccomp and output-cap
tests run on any Linux machine with bubblewrap; grading the corpus needs the GPU.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grader.course.validate import judge
from grader.engine.grade import grade
from grader.engine.repo import grade_many
from grader.isolation import build as nvcc
from grader.isolation import sandbox as sandboxing
from grader.isolation.launch import Isolation, RunDirs
from grader.isolation.options import GradeOptions
from grader.isolation.toolrun import run_under_tool
from grader.labspec.labs import PROJECT_ROOT, find_lab
from grader.labspec.spec import ExpectedSolution
from grader.labspec.specload import load_expected
from grader.outcome import Outcome
from grader.textutil import CappedOutput

HOSTILE = Path(__file__).parent / "hostile"
LOG_DIR = Path(os.environ["GRADER_TEST_LOG"]) if os.environ.get("GRADER_TEST_LOG") else None
SANDBOX = sandboxing.detect()
needs_sandbox = pytest.mark.skipif(not SANDBOX.active, reason=f"no sandbox here: {SANDBOX.reason}")


class Classroom:
    """A class folder with another student's work, the corpus filled in, and a listening port."""

    def __init__(self, root: Path):
        self.bob = root / "bob" / "labs" / "tiled_matmul"
        self.bob.mkdir(parents=True)
        (self.bob / "student.cu").write_text("// bob's own work\n")
        self.alice = root / "alice"
        self.alice.mkdir()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()
        self.fill = {
            "@PROJECT_ROOT@": str(PROJECT_ROOT), "@OTHER_SUBMISSION@": str(self.bob / "student.cu"),
            "@OTHER_DIR@": str(self.bob), "@PORT@": str(self.listener.getsockname()[1]),
        }

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def corpus(self) -> list[tuple[ExpectedSolution, Path]]:
        out = []
        for sol in load_expected(HOSTILE / "expected.yaml").solutions:
            path = sol.file
            if path.resolve().is_relative_to(HOSTILE.resolve()):
                text = path.read_text()
                for key, value in self.fill.items():
                    text = text.replace(key, value)
                path = self.alice / path.name
                path.write_text(text)
            out.append((sol, path))
        return out

    def file(self, name: str) -> Path:
        return next(path for sol, path in self.corpus() if path.name == name)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def classroom(tmp_path):
    room = Classroom(tmp_path)
    yield room
    room.close()


def test_every_corpus_file_is_listed_with_its_verdicts():
    listed = {s.file.resolve() for s in load_expected(HOSTILE / "expected.yaml").solutions}
    files = {p.resolve() for p in (HOSTILE / "tiled_matmul").glob("*.cu")}
    assert files and files <= listed, sorted(p.name for p in files - listed)


# ------------------------------------------------------------------ no GPU needed


@needs_sandbox
def test_sandbox_hides_the_course_and_other_students_and_the_network(classroom):
    """What a student's program can do inside the sandbox, tried from Python as a student would."""
    scratch = classroom.alice / "scratch"
    scratch.mkdir()
    probe = f"""
import os, socket
def attempt(what, fn):
    try:
        fn()
        print(what, "ALLOWED")
    except OSError as exc:
        print(what, "denied:", exc.strerror)
attempt("read reference", lambda: open({str(PROJECT_ROOT / 'reference' / 'tiled_matmul' / 'reference.cu')!r}).read())
attempt("read lab", lambda: open({str(find_lab('tiled_matmul').root / 'lab.yaml')!r}).read())
attempt("read other", lambda: open({str(classroom.bob / 'student.cu')!r}).read())
attempt("write other", lambda: open({str(classroom.bob / 'planted.cu')!r}, "w").write("x"))
attempt("write system", lambda: open("/usr/planted", "w").write("x"))
attempt("write scratch", lambda: open({str(scratch / 'out.txt')!r}, "w").write("x"))
attempt("connect", lambda: socket.create_connection(("127.0.0.1", {classroom.listener.getsockname()[1]}), timeout=2))
"""
    cmd = SANDBOX.wrap([sys.executable, "-c", probe], writable=(scratch,), cwd=scratch)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    lines = {line.removesuffix(" ALLOWED").split(" denied:")[0]: line for line in out.stdout.splitlines()}
    assert out.returncode == 0, out.stderr
    for what in ("read reference", "read lab", "read other", "write other", "write system", "connect"):
        assert "denied" in lines[what], out.stdout
    assert "ALLOWED" in lines["write scratch"], out.stdout
    assert (scratch / "out.txt").exists() and not (classroom.bob / "planted.cu").exists()
    assert classroom.accepted == 0


def test_worker_seccomp_allows_threads_but_no_processes():
    code = """
import os, subprocess, threading
from grader.worker.confine import forbid_new_processes
assert forbid_new_processes()
ran = []
t = threading.Thread(target=lambda: ran.append(1)); t.start(); t.join()
print("thread", ran == [1])
for name, fn in (("fork", os.fork), ("spawn", lambda: subprocess.run(["true"]))):
    try:
        fn()
        print(name, "ALLOWED")
        os._exit(0)
    except OSError as exc:
        print(name, exc.errno)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["thread", "True", "fork", "11", "spawn", "11"], out.stdout


def test_captured_output_keeps_its_ends_and_counts_the_rest():
    cap = CappedOutput(10, 5)
    cap.feed(b"0123456789abc")
    cap.feed(b"x" * 1000 + b"THEEND")
    assert cap.total == 1019
    assert cap.omitted == 1019 - 15
    assert cap.text().startswith("0123456789\n[... 1,004 bytes of output omitted]\n")
    assert cap.text().endswith("HEEND")


def test_a_tool_run_that_prints_100_mb_is_capped_and_finishes(tmp_path):
    """The real pipe and process group of a sanitizer or profiler run, with a flooding 'tool'."""
    flood = ["sh", "-c", 'head -c 100000000 /dev/zero | tr "\\0" x; echo; echo flood-done; exec "$@"', "flood"]
    run = run_under_tool(flood, {"kind": "case"}, RunDirs(tmp_path / "in", tmp_path / "out"), 120,
                         Isolation(sandboxing.Sandbox(None)))
    assert not run.timed_out
    assert "bytes of output omitted" in run.console and "flood-done" in run.console
    assert len(run.console) < 1_000_000


def test_a_hanging_tool_run_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child.pid"
    hang = ["sh", "-c", f'sleep 300 & echo $! > {marker}; wait', "hang"]
    run = run_under_tool(hang, {"kind": "case"}, RunDirs(tmp_path / "in", tmp_path / "out"), 2,
                         Isolation(sandboxing.Sandbox(None)))
    assert run.timed_out
    child = int(marker.read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


@needs_sandbox
def test_including_the_reference_does_not_compile_in_the_sandbox(classroom):
    spec = find_lab("tiled_matmul")
    build = nvcc.build(classroom.file("include_reference.cu"), spec.files.header, ("sm_90",),
                       exports=(spec.launcher.name,), sandbox=SANDBOX)
    assert not build.ok
    assert "include_reference.cu:2" in build.message and "No such file or directory" in build.message


def test_a_template_bomb_is_stopped_at_the_compile_limit():
    spec = find_lab("tiled_matmul")
    build = nvcc.build(HOSTILE / "tiled_matmul" / "template_bomb.cu", spec.files.header, ("sm_90",),
                       exports=(spec.launcher.name,), time_limit_s=5, sandbox=SANDBOX)
    assert not build.ok and build.timed_out
    assert build.message == "compilation of template_bomb.cu took longer than 5 s and was stopped"


def test_redefining_a_cuda_runtime_function_is_a_link_error_that_names_it(tmp_path):
    spec = find_lab("tiled_matmul")
    src = tmp_path / "student.cu"
    src.write_text('#include <cuda_runtime.h>\n'
                   'extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 0; return cudaSuccess; }\n'
                   'extern "C" void matmul(const float*, const float*, float*, int) {}\n')
    build = nvcc.build(src, spec.files.header, ("sm_90",), exports=(spec.launcher.name,), sandbox=SANDBOX)
    assert not build.ok
    assert build.message == ("link error: student.cu defines `cudaEventElapsedTime`, which the CUDA runtime "
                             "already defines (give your function another name)")


def test_reports_say_whether_the_run_was_sandboxed(classroom):
    spec = find_lab("tiled_matmul")
    source = classroom.file("read_other_submission.cu")
    off = grade(spec, source, GradeOptions(gpu=False, sandbox=False))
    assert off.environment["sandbox"] == "none: turned off (--no-sandbox); the submission ran without a sandbox"
    on = grade(spec, source, GradeOptions(gpu=False))
    assert on.environment["sandbox"] == SANDBOX.describe()


# ------------------------------------------------------------------ on the GPU


@pytest.mark.gpu
@needs_sandbox
def test_hostile_corpus_gets_exactly_its_verdicts(classroom):
    spec = find_lab("tiled_matmul")
    corpus = classroom.corpus()
    reports = grade_many([(spec, path, path.name) for _, path in corpus], GradeOptions(), window=4)
    results = [judge(sol, report) for (sol, _), report in zip(corpus, reports)]
    table = ["| submission | expected | observed | score |", "| --- | --- | --- | --- |"]
    for (sol, path), r in zip(corpus, results):
        first = next((c for c in r.report.checks if c.outcome is not Outcome.PASS), None)
        seen = f"{first.id} {first.outcome.value}: {first.message}" if first else "every check passes"
        table.append(f"| {path.name} | {sol.why} | {'as expected' if r.ok else 'MISMATCH'}: {seen} | "
                     f"{r.report.score:g}/{r.report.max_score:g} |")
        for m in r.mismatches:
            details = next(c.details for c in r.report.checks if c.id == m.check).replace("\n", " / ")[:1500]
            table.append(f"|  | MISMATCH {m.check} | got {m.got}, expected {m.expected}: {m.message} {details} | |")
    text = "\n".join(table) + "\n"
    if LOG_DIR:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        (LOG_DIR / "hostile.md").write_text(text)
    assert all(r.ok for r in results), text

    by_name = {path.name: r.report for (_, path), r in zip(corpus, results)}

    def check(name: str, cid: str):
        return next(c for c in by_name[name].checks if c.id == cid)

    flood = check("stdout_flood.cu", "correctness[width=16]")
    assert "exited with status 3" in flood.message
    assert "bytes of output omitted" in flood.details and "last line of the flood" in flood.details
    assert "did not finish within 10 s" in check("fork_bomb.cu", "correctness[width=16]").message
    assert "cudaErrorMemoryAllocation" in check("gpu_out_of_memory.cu", "correctness[width=16]").message
    assert "SIGABRT" in check("calls_abort.cu", "correctness[width=16]").message
    assert "wrote outside P" in check("oob_write.cu", "correctness[width=16]").message
    assert "modified its input M" in check("tamper_inputs.cu", "correctness[width=16]").message
    assert "output of a timed call was wrong" in check("cache_results.cu", "speedup_vs_naive").message
    assert "timed by the wall clock" in check("nonblocking_stream.cu", "speedup_vs_naive").message
    slow = check("very_slow.cu", "speedup_vs_naive")
    assert "sampling stopped after 1 sample: your kernel took more than 50x" in slow.message, slow.message
    forged = check("below_floor.cu", "speed_vs_reference").message
    assert "the timing was tampered with" in forged or "impossible time" in forged, forged
    # a fast CPU reaches the compiler's 8 GiB cap before the 60 s limit (H100 host: out of memory)
    bomb = check("template_bomb.cu", "compile").message
    assert "catastrophic error: out of memory" in bomb or "took longer than 60 s" in bomb, bomb
    assert not (classroom.bob / "planted.cu").exists() and classroom.accepted == 0
    forged_reply = check("forge_worker_reply.cu", "correctness[width=16]").message
    assert "your code interfered with the grader's worker" in forged_reply and "kernels_launched" in forged_reply, forged_reply
    assert "internal grader error" not in forged_reply
    # what the worker claims of the buffers is never asked: the trusted worker reads them itself
    assert check("oob_write_claims_clean.cu", "correctness[width=16]").message.startswith("wrote outside P: 0 bytes changed before it")
    assert "modified its input M" in check("tamper_inputs_claims_clean.cu", "correctness[width=16]").message
    hidden = check("hide_from_profiler_claims_one.cu", "shared_memory_tiles").message
    assert "decoy()" in hidden and "matmul_naive(" in hidden.split("ran:")[1], hidden
    placed = check("patch_worker_launched.cu", "shared_memory_tiles").message
    assert "judged on the kernels that ran: matmul_naive(" in placed and "matmul_tiled" not in placed.split("ran:")[1], placed


@pytest.mark.gpu
def test_without_the_sandbox_the_same_attacks_succeed(classroom):
    """The control: what the sandbox denied above, an unsandboxed run allows."""
    spec = find_lab("tiled_matmul")
    options = GradeOptions(sandbox=False, timing=False, counters=False)
    names = ["include_reference.cu", "read_other_submission.cu", "network_socket.cu", "write_outside_scratch.cu"]
    reports = grade_many([(spec, classroom.file(n), n) for n in names], options, window=4)
    got = {n: r for n, r in zip(names, reports)}
    assert all(c.outcome is Outcome.PASS for c in got["include_reference.cu"].checks if c.stage.value == "correctness")
    for name, status in (("read_other_submission.cu", 42), ("network_socket.cu", 43), ("write_outside_scratch.cu", 44)):
        first = next(c for c in got[name].checks if c.id == "correctness[width=16]")
        assert first.outcome is Outcome.ERROR and f"exited with status {status}" in first.message, (name, first.message)
    assert (classroom.bob / "planted.cu").exists() and classroom.accepted >= 1


@pytest.mark.gpu
def test_the_submission_time_limit_cuts_a_hanging_case_short(classroom):
    spec = find_lab("tiled_matmul")
    report = grade(spec, classroom.file("host_infinite_loop.cu"), GradeOptions(submission_limit_s=6, counters=False))
    first = next(c for c in report.checks if c.id == "correctness[width=16]")
    assert first.outcome is Outcome.ERROR and "did not finish within" in first.message
    limit = float(first.message.split("within ")[1].split(" s")[0])
    assert limit < 6, first.message
    later = [c for c in report.checks if c.stage.value == "correctness"][1:]
    assert all(c.outcome is Outcome.ERROR for c in later)


@pytest.mark.gpu
def test_a_submission_that_keeps_all_gpu_memory_is_told_so_and_the_next_case_starts_fresh():
    """Graded alone: it would starve other submissions on the same GPU."""
    spec = find_lab("tiled_matmul")
    report = grade(spec, HOSTILE / "alone" / "hog_gpu_memory.cu", GradeOptions(counters=False, timing=False))
    cases = [c for c in report.checks if c.stage.value == "correctness"]
    text = "\n".join(f"{c.id} {c.outcome.value}: {c.message}" for c in cases)
    if LOG_DIR:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        (LOG_DIR / "hog_gpu_memory.txt").write_text(text + "\n")
    assert "internal grader error" not in text and "Traceback" not in text, text
    # every call keeps the memory, and each is found by the trusted reading after it, however the
    # grader's own allocations happen to be cached: each case is an error, and the next starts afresh
    assert all(c.outcome is Outcome.ERROR for c in cases), text
    for c in cases:
        assert c.message.startswith("your code left no free GPU memory: "), text
        assert "GiB held after it returned" in c.message and "the next case runs in a fresh process" in c.message
        held, total = (float(c.message.split(": ", 1)[1].split(" GiB")[k].split()[-1]) for k in (0, 1))
        assert held > total / 2, c.message
    assert len(cases) == len(spec.correctness.cases), text  # the starved case did not end the grading
