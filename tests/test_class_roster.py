"""Class runs without grading: rosters, shards, GPU selection, the health gate, the GPU lock, git identity."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.classroom import roster, shard
from grader.classroom.roster import RosterError
from grader.cli import main as cli_main
from grader.errors import GraderError
from grader.host import gpulock, gpus, health
from grader.host.health import HealthGate, HealthSample

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------ rosters


def _roster(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "roster.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_roster_with_header_comments_and_commit(tmp_path):
    path = _roster(tmp_path, "\ufeffStudent,Path,Commit\n# a comment\n\nalice,repos/alice,\nbob@uni.edu,/abs/bob,v1.0\n")
    students = roster.load(path)
    assert [s.id for s in students] == ["alice", "bob@uni.edu"]
    assert students[0].path == tmp_path / "repos" / "alice" and students[0].commit is None and students[0].line == 4
    assert students[1].path == Path("/abs/bob") and students[1].commit == "v1.0" and students[1].line == 5


def test_roster_without_header(tmp_path):
    students = roster.load(_roster(tmp_path, "alice,a\nbob,b,0123abcd\n"))
    assert [(s.id, s.path.name, s.commit) for s in students] == [("alice", "a", None), ("bob", "b", "0123abcd")]
    # a student whose id is a header word, with a path, is still a student
    assert [s.id for s in roster.load(_roster(tmp_path, "name,repos/name\n"))] == ["name"]


@pytest.mark.parametrize("text,line,problem", [
    ("student,path\nalice,a\nalice,b\n", 3, "student 'alice' is listed twice (first on line 2)"),
    ("student,path\nalice\n", 2, "expected 2 fields (student, path), found 1"),
    ("student,path\nalice,a,b,c\n", 2, "expected 2 fields (student, path), found 4"),
    ("student,path\n../evil,a\n", 2, "student id '../evil' may hold only letters"),
    ("student,path\n,a\n", 2, "the student id is empty"),
    ("student,path\nalice,\n", 2, "no repository path for student 'alice'"),
    ("student,path,commit\nalice,a,--upload-pack=x\n", 2, "commit '--upload-pack=x' is not a commit hash, tag or branch name"),
    ("student,pth\nalice,a\n", 1, "unknown column 'pth' (columns: student, path, commit); did you mean 'path'?"),
    ("student,commit\nalice,a\n", 1, "the header has no 'path' column"),
    ('student,path\n"alice,a\n', 2, "not a CSV line"),
    ("name,repo\nalice,a\n", 1, "the first line looks like a header (name,repo) but a roster's header is student,path[,commit]: "
                               "write 'student,path'"),
    ("Login,Repository,SHA\nalice,a,0123abcd\n", 1, "the first line looks like a header (login,repository,sha)"),
])
def test_a_bad_roster_line_is_one_message_naming_file_line_and_problem(tmp_path, capsys, text, line, problem):
    path = _roster(tmp_path, text)
    with pytest.raises(RosterError) as err:
        roster.load(path)
    assert str(err.value).startswith(f"{path}:{line}: {problem}")
    code = cli_main(["grade-class", "--roster", str(path), "--out", str(tmp_path / "out"), "--no-gpu", "-q"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith(f"error: {path}:{line}: {problem}")
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert not (tmp_path / "out").exists()  # nothing graded


def test_roster_file_problems(tmp_path):
    with pytest.raises(RosterError, match="roster not found"):
        roster.load(tmp_path / "none.csv")
    with pytest.raises(RosterError, match=r"not UTF-8 text \(first bad byte on line 2\)"):
        roster.load(_roster(tmp_path, b"student,path\nal\xe9,a\n"))
    with pytest.raises(RosterError, match="no students in the roster"):
        roster.load(_roster(tmp_path, "student,path\n# nobody yet\n"))


def test_a_class_folder_is_one_student_per_subfolder(tmp_path):
    for name in ("bob", "alice", ".git"):
        (tmp_path / name).mkdir()
    (tmp_path / "notes.txt").write_text("x")
    assert [(s.id, s.path) for s in roster.from_folder(tmp_path)] == [("alice", tmp_path / "alice"), ("bob", tmp_path / "bob")]
    (tmp_path / "bad name").mkdir()
    with pytest.raises(RosterError, match="folder 'bad name': student id 'bad name' may hold only"):
        roster.from_folder(tmp_path)
    with pytest.raises(RosterError, match="folder not found"):
        roster.from_folder(tmp_path / "missing")


def test_grade_class_needs_a_folder_or_a_roster(tmp_path, capsys):
    assert cli_main(["grade-class", "--out", str(tmp_path / "o")]) == 2
    assert "give either a folder of student repositories or --roster CSV" in capsys.readouterr().err


# ------------------------------------------------------------------ shards


def test_shards_partition_the_class_deterministically_and_evenly():
    ids = [f"s{k:03d}" for k in range(23)]
    slices = [shard.Shard(i, 4).select(ids) for i in range(1, 5)]
    assert set().union(*slices) == set(ids)
    assert sum(len(s) for s in slices) == len(ids)  # disjoint
    assert max(map(len, slices)) - min(map(len, slices)) <= 1
    shuffled = list(reversed(ids))
    assert [shard.Shard(i, 4).select(shuffled) for i in range(1, 5)] == slices  # roster order does not matter
    assert shard.Shard(1, 1).select(ids) == set(ids)


@pytest.mark.parametrize("text,message", [("3", "expected I/N"), ("0/2", "between 1 and N"), ("3/2", "between 1 and N"),
                                          ("1/0", "between 1 and N"), ("a/b", "expected I/N")])
def test_bad_shards_are_refused(text, message):
    with pytest.raises(GraderError, match=message):
        shard.parse(text)
    assert shard.parse(" 2/5 ") == shard.Shard(2, 5)


# ------------------------------------------------------------------ GPUs and lanes

DEVICES = [gpus.GpuSlot(i, f"GPU-{i}aaa-{i}", "H100", (9, 0)) for i in range(4)]


@pytest.mark.parametrize("visible,expected", [
    (None, [0, 1, 2, 3]), ("2,0", [2, 0]), ("GPU-3aaa", [3]), ("1,7,2", [1]), ("", []), ("-1", []), ("1,1", [1]),
])
def test_cuda_visible_devices_narrows_the_gpus(visible, expected):
    assert [d.index for d in gpus.visible(DEVICES, visible)] == expected


def test_gpus_option_picks_among_the_visible_ones():
    seen = gpus.visible(DEVICES, "3,1,2")
    assert [d.index for d in gpus.select(seen, None)] == [3, 1, 2]
    assert [d.index for d in gpus.select(seen, "all")] == [3, 1, 2]
    assert gpus.select(seen, "none") == []
    assert [d.index for d in gpus.select(seen, "2,0")] == [2, 3]
    with pytest.raises(GraderError, match="there is no GPU 3 here"):
        gpus.select(seen, "3")
    with pytest.raises(GraderError, match="expected all, none or GPU numbers"):
        gpus.select(seen, "two")
    assert DEVICES[1].lane == "gpu1" and DEVICES[1].arch == "sm_90" and DEVICES[1].key == "GPU-1aaa-1"


def test_a_gpu_found_is_remembered_by_the_process_and_none_found_is_looked_for_again(monkeypatch):
    """Each probe started NVML (30-70 ms), a dozen times in a repository's grade: a GPU found is
    probed once per process and set of visible devices; where none was found, the next probe looks
    again (a GPU busy at the first look is not lost for the whole run)."""
    from grader.host import gpu

    looks: list[str | None] = []
    answer = {"gpu": gpu.GpuInfo("H100", (9, 0), "580.1", 0, "GPU-1")}

    def look() -> gpu.GpuProbe:
        looks.append(os.environ.get("CUDA_VISIBLE_DEVICES"))
        return gpu.GpuProbe(answer["gpu"], "" if answer["gpu"] else "NVML: busy")

    monkeypatch.setattr(gpu, "_probe_device", look)
    monkeypatch.setattr(gpu.importlib.util, "find_spec", lambda name: object())  # (CuPy "installed")
    monkeypatch.setattr(gpu, "_FOUND", {})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("GRADER_NO_GPU", raising=False)
    assert gpu.probe() == gpu.probe() == gpu.GpuProbe(answer["gpu"]) and looks == ["0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    answer["gpu"] = None
    assert gpu.probe() == gpu.probe() == gpu.GpuProbe(None, "NVML: busy") and looks == ["0", "1", "1"]
    answer["gpu"] = gpu.GpuInfo("H100", (9, 0), "580.1", 1, "GPU-2")
    assert gpu.probe().gpu == gpu.probe().gpu == answer["gpu"] and looks == ["0", "1", "1", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu.probe().gpu is not None and gpu.probe().gpu.uuid == "GPU-1" and len(looks) == 4


def test_nvml_is_shut_down_after_each_reading_and_a_driver_that_cannot_start_it_reads_as_nothing(monkeypatch):
    """``gpu.nvml``, shared by the GPU's health and the list of GPUs: NVML shut down after the
    block, even one that failed; no NVML, or none that starts, gives None (and so no health, no GPUs)."""
    import types

    from grader.host import gpu

    calls: list[str] = []
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: calls.append("init")
    fake.nvmlShutdown = lambda: calls.append("shutdown")
    fake.nvmlDeviceGetCount = lambda: 1

    def handle(i):
        raise RuntimeError("GPU is lost")

    fake.nvmlDeviceGetHandleByIndex = handle
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with gpu.nvml() as pynvml:
        assert pynvml is fake and calls == ["init"]
    assert calls == ["init", "shutdown"]
    assert gpu.health(gpu.GpuInfo("H100", (9, 0), "580.1", 0, "GPU-1")) == {} and gpus.nvml_devices() == []
    assert calls == ["init", "shutdown"] * 3  # each shut down after its error

    def no_driver():
        calls.append("init")
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = no_driver
    with gpu.nvml() as pynvml:
        assert pynvml is None
    assert gpu.health(gpu.GpuInfo("H100", (9, 0), "580.1", 0, "GPU-1")) == {} and gpus.nvml_devices() == []
    assert calls == ["init", "shutdown"] * 3 + ["init"] * 3  # never shut down what did not start
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    with gpu.nvml() as pynvml:
        assert pynvml is None
    assert gpus.nvml_devices() == []


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_health_gate_passes_a_quiet_gpu_at_once():
    clock = _Clock()
    gate = HealthGate(lambda: HealthSample((10, 11), 60, 90, 0x1), lambda pid: True, 30, 2, clock.sleep, clock)
    assert gate() == "" and clock.now == 0


def test_health_gate_waits_for_another_process_to_leave():
    clock = _Clock()
    samples = iter([HealthSample((10, 99), 60), HealthSample((10, 99), 60), HealthSample((10,), 60)])
    gate = HealthGate(lambda: next(samples), lambda pid: pid == 10, 30, 2, clock.sleep, clock)
    assert gate() == ""
    assert clock.now == 4 and gate.waited_s == 4


def test_health_gate_marks_a_persistently_disturbed_gpu_noisy():
    clock = _Clock()
    sample = HealthSample((10, 99, 98), temperature_c=87, slowdown_c=90, clock_reasons=0x40 | 0x4 | 0x1)
    gate = HealthGate(lambda: sample, lambda pid: {10: True, 99: False}.get(pid), 10, 3, clock.sleep, clock)
    note = gate()
    assert clock.now == 10
    assert note == ("1 other process on the GPU (PID 99); clocks slowed down (HwThermalSlowdown); "
                    "GPU at 87 C, slows down at 90 C (still so after waiting 10 s)")


def test_health_gate_does_not_block_when_the_gpu_cannot_be_read():
    def broken() -> HealthSample:
        raise RuntimeError("NVML gone")

    assert HealthGate(broken, lambda pid: True, 10)() == ""


def test_descendants_are_the_graders_own_processes():
    child = subprocess.Popen([sys.executable, "-c", "import subprocess,sys; subprocess.run(['sleep','30'])"])
    try:
        for _ in range(100):
            grandchildren = subprocess.run(["pgrep", "-P", str(child.pid)], capture_output=True, text=True).stdout.split()
            if grandchildren:
                break
            time.sleep(0.05)
        ours = health.descendant_of(os.getpid())
        assert ours(os.getpid()) is True and ours(child.pid) is True
        assert grandchildren and ours(int(grandchildren[0])) is True
        assert ours(1) is False
        assert health.descendant_of(child.pid)(os.getpid()) is False
        assert ours(2 ** 22 + 12345) is None  # no such PID here: cannot tell
    finally:
        child.kill()
        child.wait()


def test_a_speed_note_marks_only_timed_checks():
    from grader.engine.repo import timed_on_disturbed_gpu
    from grader.outcome import CheckResult, LabReport, Outcome, Stage

    report = LabReport("x", "X", "f.cu", (CheckResult("c", Stage.CORRECTNESS, Outcome.PASS, 1, 1, "ok"),
                                           CheckResult("s", Stage.SPEED, Outcome.PASS, 2, 2, "1.5x")))
    noted = timed_on_disturbed_gpu(report, "GPU at 88 C")
    assert [c.message for c in noted.checks] == ["ok", "1.5x [timed on a disturbed GPU: GPU at 88 C]"]
    assert noted.environment["timing_noisy"] == "GPU at 88 C"


def test_a_wait_at_the_health_gate_is_in_the_labs_stage_seconds():
    """A TA sees how long each timing waited for the GPU to be fit, also when it then was."""
    from grader.engine.repo import HEALTH_GATE, after_gate
    from grader.outcome import CheckResult, LabReport, Outcome, Stage

    report = LabReport("x", "X", "f.cu", (CheckResult("s", Stage.SPEED, Outcome.PASS, 2, 2, "1.5x"),),
                       stage_seconds={"speed": 1.0})
    waited = after_gate(report, "", 4.25)
    assert waited.stage_seconds == {"speed": 1.0, HEALTH_GATE: 4.25}
    assert waited.checks == report.checks and "timing_noisy" not in waited.environment
    assert after_gate(report, "", 0.001).stage_seconds == {"speed": 1.0}  # the gate's own look: not a wait
    noisy = after_gate(report, "GPU at 88 C (still so after waiting 60 s)", 60.0)
    assert noisy.stage_seconds[HEALTH_GATE] == 60.0 and noisy.environment["timing_noisy"].startswith("GPU at 88 C")


def test_the_gpu_lock_lets_one_grader_at_a_time(tmp_path):
    folder = gpulock.gpu_folder("GPU-test", base=tmp_path / "locks")
    assert folder.path(gpulock.LOCK_NAME) == tmp_path / "locks" / "GPU-test.grader-gpu.lock"
    assert oct(folder.folder.stat().st_mode & 0o7777) == "0o700"  # the user's own, never a shared /tmp folder
    code = ("import sys, time; from pathlib import Path; from grader.host.gpulock import gpu_folder, gpu_lock\n"
            "with gpu_lock(gpu_folder('GPU-test', Path(sys.argv[1]))):\n    print('held', flush=True); time.sleep(1.5)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder.folder)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with gpulock.gpu_lock(folder, poll_s=0.05) as waited:
            pass
        assert waited > 1.0  # we got it only once the other had held it its 1.5 s
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------ identity from git


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x", "GIT_COMMITTER_NAME": "s",
           "GIT_COMMITTER_EMAIL": "s@x", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_commit_of_a_repository_owned_by_another_user(tmp_path):
    from grader.isolation import gitinfo

    repo = tmp_path / "alice"
    (repo / "labs").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "labs" / "f.cu").write_text("// v1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "v1")
    head = _git(repo, "rev-parse", "HEAD")
    assert gitinfo.resolve(repo) == head
    assert gitinfo.resolve(repo / "labs") is None  # inside a repository is not a repository
    assert gitinfo.resolve(repo, "no-such-branch") is None
    assert gitinfo.resolve(repo, "--output=/tmp/x") is None
    if os.getuid() == 0:  # git refuses a repository of another owner unless it is declared safe
        subprocess.run(["chown", "-R", "65534:65534", str(repo)], check=True)
        plain = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                               env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull})
        assert plain.returncode != 0 and "dubious ownership" in plain.stderr
        assert gitinfo.resolve(repo) == head


def test_grade_repo_on_a_folder_without_labs_is_an_input_error(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    code = cli_main(["grade-repo", str(tmp_path), "--no-gpu", "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (f"error: {tmp_path}: not a student repository: it has no labs/ folder "
                           "(expected labs/<lab>/student.cu, for example labs/boundary_checks/student.cu)")


def test_progress_is_live_on_a_terminal_and_plain_lines_elsewhere():
    import io

    from grader.classroom import progress
    from grader.classroom.student import StudentResult

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    plain = io.StringIO()
    shown = progress.make(False, plain)
    assert type(shown) is progress.Display
    shown.begin(2, 1, ["cpu0"])
    shown.lane("cpu0", "", "timing readied in 9.5 s")  # what a lane says of itself is a line
    shown.lane("cpu0", "alice", "[histogram] compiling")  # what it says of a student, and idle, are not
    shown.finished(StudentResult("alice", 12, 127, 1.5, (), "cpu0"))
    shown.lane("cpu0", "", progress.IDLE)
    shown.finished(StudentResult("bob", 0, 127, 0.5, ("x: compile error",), "cpu0"))
    lines = plain.getvalue().splitlines()
    assert lines[0].startswith("1 students already graded") and lines[1] == "grading 2 students on 1 lanes (cpu0)"
    assert lines[2] == "cpu0: timing readied in 9.5 s"
    assert lines[3].startswith("[1/2] alice: 12/127 in 1.5 s on cpu0 (ETA ")
    assert lines[4].startswith("[2/2] bob: 0/127 in 0.5 s on cpu0, 1 problem (ETA 0 s)")
    assert len(lines) == 5
    assert progress.make(True, plain).quiet
    tty = Terminal()
    live = progress.make(False, tty)
    assert isinstance(live, progress.LiveDisplay)
    live.begin(2, 0, ["gpu0", "gpu1"])
    live.lane("gpu0", "alice", "[histogram] timing against reference")
    live.finished(StudentResult("alice", 12, 127, 1.5, (), "gpu0"))
    live.close()
    assert "[1/2] alice: 12/127" in tty.getvalue() and "ETA" in tty.getvalue()


def test_a_student_graded_over_a_minute_gets_a_line_with_their_lane_s_last_step(monkeypatch):
    import io

    from grader.classroom import progress

    plain = io.StringIO()
    shown = progress.Display(plain)
    shown.lane("gpu0.1", "hang", "[tiled_matmul] correctness: 3 cases")
    shown.lane("gpu0.1", "hang", "[tiled_matmul] sanitizer memcheck")
    shown.lane("gpu0", "alice", "[histogram] compiling")
    shown.lane("gpu0", "", progress.IDLE)  # alice done: her lane is no longer busy
    later = time.monotonic() + progress.STILL_S + 1
    assert shown.still(later) == [f"gpu0.1: still grading hang after {progress.STILL_S + 1:.0f} s; last: [tiled_matmul] sanitizer memcheck"]
    assert shown.still(later + 1) == []  # once a minute, not at every tick
    assert len(shown.still(later + progress.STILL_S)) == 1
    shown.lane("gpu0.1", "zoe", "[histogram] compiling")  # the next student's minute starts afresh
    assert shown.still(time.monotonic() + progress.STILL_S - 5) == []
    # the plain display's ticker says it while the class runs; the live display shows the step itself
    monkeypatch.setattr(progress, "STILL_S", 0.06)
    shown = progress.Display(plain)
    shown.begin(1, 0, ["gpu0"])
    shown.lane("gpu0", "bob", "[memory_types] timing")
    time.sleep(0.2)
    shown.close()
    assert "gpu0: still grading bob after 0 s; last: [memory_types] timing" in plain.getvalue()
    assert not progress.LiveDisplay.__dict__.get("still") and progress.LiveDisplay.shows_lanes


def test_every_lane_step_goes_to_the_class_log_with_its_seconds_and_the_log_is_capped(tmp_path, monkeypatch):
    from grader.classroom import progress
    from grader.classroom.student import StudentResult

    log = tmp_path / progress.LANES_LOG
    shown = progress.Display(quiet=True)
    shown.keep_log(log)
    shown.begin(1, 0, ["gpu0"])
    shown.lane("gpu0", "", "timing readied in 6.4 s")
    shown.lane("gpu0", "alice", "[tiled_matmul] profiling\x1b[31m ::error::x")
    shown.finished(StudentResult("alice", 24, 24, 8.5, (), "gpu0"))
    shown.close()
    lines = log.read_text().splitlines()
    assert lines[0].split(" s  ", 1)[1].startswith("-  -  run started at ")
    assert [ln.split(" s  ", 1)[1] for ln in lines[1:3]] == ["gpu0  -  timing readied in 6.4 s",
                                                             "gpu0  alice  [tiled_matmul] profiling ::error::x"]  # (controls stripped)
    assert lines[3].endswith("[1/1] alice: 24/24 in 8.5 s on gpu0 (ETA 0 s)")
    assert all(float(ln.split(" s  ")[0]) >= 0 for ln in lines)
    shown.lane("gpu0", "bob", "after the close")  # nothing written once the log is closed
    assert len(log.read_text().splitlines()) == 4
    # a second run appends; past the limit one line says the log stops there, and it grows no more
    monkeypatch.setattr(progress, "LOG_LIMIT_BYTES", log.stat().st_size + 300)
    again = progress.Display(quiet=True)
    again.keep_log(log)
    for k in range(20):
        again.lane("gpu0", f"s{k}", "[histogram] compiling " + "x" * 40)
    again.end_log()
    text = log.read_text()
    assert text.count("run started at") == 2 and text.endswith("(the log stops here: it reached 0 MiB)\n")
    assert text.count("(the log stops here") == 1
    assert len(progress.read_log(log)) == len(text.splitlines()) - 1  # (every line read back but that one)
    assert len(text.encode()) <= log.stat().st_size <= progress.LOG_LIMIT_BYTES + 100


def test_the_class_benchmark_names_the_slowest_students_and_where_their_time_went(tmp_path):
    """From a class log as the display writes it: each slow student's span on its lane and its
    longest pause, with the step it followed (the log's own lines, not a student's, are skipped)."""

    from grader.classroom import progress
    from grader.classroom.student import StudentResult

    bench = _class_benchmark()
    log = tmp_path / progress.LANES_LOG
    shown = progress.Display(quiet=True)
    shown.keep_log(log)
    shown.lane("gpu0", "", "timing readied in 6.4 s")
    shown.lane("gpu0", "alice", "[tiled_matmul] compiling")
    shown.lane("gpu0.1", "hang", "[tiled_matmul] sanitizer memcheck")
    time.sleep(0.3)
    shown.lane("gpu0.1", "hang", "[tiled_matmul] sanitizer racecheck")
    shown.finished(StudentResult("alice", 1, 1, 0.1, (), "gpu0"))
    shown.end_log()
    first, second = bench.slowest(log)
    assert first.startswith("hang 0.") and 'longest pause 0.3 s, after "[tiled_matmul] sanitizer memcheck"' in first, first
    assert second.startswith("alice ") and "[tiled_matmul] compiling" in second
    assert bench.slowest(tmp_path / "none.log") == []


def test_the_class_benchmark_splits_a_students_lane_into_its_phases(tmp_path):
    """From a class log: the median timed student's time to its first case, over its cases, in
    the tool runs after them, and in its timing (with seats, the phase that grows is where they
    wait on one another); students never timed are left out, and no timed student says nothing."""
    from grader.classroom import progress

    bench = _class_benchmark()
    log = tmp_path / progress.LANES_LOG
    lines = [(0.0, "gpu0", "-", "timing readied in 1.7 s")]
    for k, (student, start) in enumerate((("ann", 1.0), ("bob", 20.0), ("cy", 40.0))):
        lines += [(start, "gpu0", student, "starting"), (start + 0.5 + k, "gpu0", student, "[histogram] correctness 1/12: empty"),
                  (start + 3.5 + k, "gpu0", student, "[memory_types] correctness 8/8: n=1048579,mask_width=15"),
                  (start + 4.0 + k, "gpu0", student, "[memory_types] counters: the kernels that ran (the replayer)"),
                  (start + 8.0 + 2 * k, "gpu0", student, "[histogram] timing against global_atomics, reference"),
                  (start + 12.0 + 3 * k, "gpu0", student, f"[{k + 1}/4] {student}: 143/143 in 12.0 s on gpu0")]
    lines += [(60.0, "gpu0", "stub", "starting"), (60.5, "gpu0", "stub", "[histogram] correctness 1/12: empty"),
              (63.0, "gpu0", "stub", "[4/4] stub: 3/143 in 3.0 s on gpu0")]
    log.write_text("".join(f"{t:9.1f}{progress.LOG_SEP}{lane}  {who}  {text}\n" for t, lane, who, text in lines))
    assert bench.phases(log) == ("a student's lane, median of 3 timed: 1.5 s to its first case, its cases 3.0 s, "
                                 "its tool runs after them 5.5 s, its timing (opened, its turn, timed, checked) 5.0 s")
    log.write_text("".join(f"{t:9.1f}{progress.LOG_SEP}{lane}  {who}  {text}\n" for t, lane, who, text in lines[-3:]))
    assert bench.phases(log) == "" and bench.phases(tmp_path / "none.log") == ""
    # where the log says when a stage's runs were over: the latest of a student's labs, after its last case
    for k, (student, start) in enumerate((("ann", 1.0), ("bob", 20.0), ("cy", 40.0))):
        lines += [(start + 3.5 + k + 1.0, "gpu0", student, "[histogram] sanitizer: every run over after 4.0 s"),
                  (start + 3.5 + k + 2.0 + k, "gpu0", student, "[tiled_matmul] sanitizer: every run over after 5.0 s"),
                  (start + 3.5 + k + 3.0, "gpu0", student, "[histogram] counters: every run over after 6.0 s")]
    log.write_text("".join(f"{t:9.1f}{progress.LOG_SEP}{lane}  {who}  {text}\n" for t, lane, who, text in sorted(lines)))
    assert bench.phases(log).endswith("; its last runs over after its last case: sanitizer +3.0 s, counters +3.0 s")
    # each lab's second case starts once its first is over (its worker up): the median lab of the median student
    for k, (student, start) in enumerate((("ann", 1.0), ("bob", 20.0), ("cy", 40.0))):
        lines += [(start + 1.5 + k, "gpu0", student, "[histogram] correctness 2/12: one_letter_n1"),
                  (start + 2.0 + k, "gpu0", student, "[memory_types] correctness 2/8: n=1,mask_width=15"),
                  (start + 2.5 + k, "gpu0", student, "[tiled_matmul] correctness 2/5: width=48")]
    log.write_text("".join(f"{t:9.1f}{progress.LOG_SEP}{lane}  {who}  {text}\n" for t, lane, who, text in sorted(lines)))
    assert bench.phases(log).endswith("counters +3.0 s; a lab's first case over 3.0 s after the student's start"), bench.phases(log)


def _class_benchmark():
    from benchmark_modules import load

    return load("grade_class_speed")


def test_the_class_benchmark_s_serial_bound_counts_the_profiler_run_not_its_waits(tmp_path, capsys):
    """A student's profiler seconds are their session's own (the counter checks' figure, the same
    for every lab of the session), not the counters stage, which with seats includes the waits."""
    bench = _class_benchmark()

    def lab(stage: dict, *seconds: float) -> dict:
        return {"stage_seconds": stage, "checks": [{"id": f"c{k}", "measured": {"profile_seconds": s}} for k, s in enumerate(seconds)]}

    students = {
        "alice": [lab({"counters": 11.5, "speed.open": 0.5, "speed.sampling": 0.4, "speed.close": 0.1}, 3.25, 3.25),
                  lab({"counters": 11.5, "speed.open": 0.3, "speed.sampling": 0.6}, 3.25)],
        "bob": [lab({"counters": 2.75, "speed.open": 0.2, "speed.sampling": 0.3})],  # no counter check: the stage
    }
    for one in students["alice"]:  # the student's shared racecheck run, as each lab reports it
        one["checks"].append({"id": "racecheck_clean", "measured": {"seconds": 2.5, "shared_run_labs": 2}})
    for sid, labs in students.items():
        folder = tmp_path / "students" / sid
        folder.mkdir(parents=True)
        (folder / "report.json").write_text(json.dumps({"labs": labs}))
    bench.print_serial(tmp_path, 1)
    # profiler (3.25 + 2.75) / 2; timing (0.5 + 0.4 + 0.1 + 0.6 + 0.2 + 0.3) / 2; at least their sum
    assert capsys.readouterr().out.strip().splitlines() == [
        "one student at a time per GPU: profiler 3.00 s and timing 1.05 s per student; the class cannot take less than 8 s on 1 GPU(s)",
        "racecheck 1.25 s per student (racecheck runs of separate processes went one at a time on an H100; not in the bound above)"]


def test_the_class_benchmark_grades_alone_in_slices_and_compares_them_together(tmp_path):
    """On a host with several GPUs the alone verdicts come from a process per GPU, each grading a
    slice of the class built once; compared together they cover every student, and one slice
    alone names the students it lacks."""
    bench = [sys.executable, str(Path(__file__).resolve().parent.parent / "benchmarks" / "grade_class_speed.py"),
             "--no-gpu", "--students", "6", "-q", "--keep", str(tmp_path)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*bench, *args], capture_output=True, text=True, timeout=300)

    early = run("--alone-only", "--shard", "1/2")
    assert early.returncode == 2 and "a class already built" in early.stderr
    graded = run("--no-compare")
    assert graded.returncode == 0, graded.stderr
    busy = re.search(r"^CPUs busy: (\d+)% of (\d+) CPUs' time on average \((\d+) samples\), (\d+)% at most$", graded.stdout, re.M)
    assert busy is not None, graded.stdout  # (where the time goes without a GPU: the CPUs' share, sampled)
    assert int(busy[3]) >= 1 and 0 <= int(busy[1]) <= int(busy[4]) <= 100
    # (and whose: the run's processes by program, the compilers among them)
    programs = re.search(r"^CPU seconds by program, as sampled \((\d+) s of the host's (\d+) s, ([\d.]+) s a student; .*?\): (.*)$",
                         graded.stdout, re.M)
    assert programs is not None, graded.stdout
    # (both figures are printed rounded: the total to a second, the share to a tenth)
    assert 0 < int(programs[1]) and float(programs[3]) == pytest.approx(int(programs[1]) / 6, abs=0.5 / 6 + 0.05)
    assert "python: the grader " in programs[4] and "cicc " in programs[4], programs[4]
    # the slices at once, a process each (as on two GPUs: each told to see one); a student already
    # graded alone is not graded again, and every verdict ends up in alone.json too
    names = sorted(d.name for d in (tmp_path / "class").iterdir())
    (tmp_path / "alone.json").write_text(json.dumps({names[0]: "seeded"}))
    module = _class_benchmark()
    assert module.grade_alone_over(tmp_path, names, [3, 5], ["--students", "6", "--no-gpu"]) == 0
    halves = [json.loads((tmp_path / f"alone-{i}-of-2.json").read_text()) for i in (1, 2)]
    assert sorted([*halves[0], *halves[1]]) == names and not set(halves[0]) & set(halves[1])
    together = json.loads((tmp_path / "alone.json").read_text())
    assert sorted(together) == names and together[names[0]] == "seeded"
    (tmp_path / "alone.json").unlink()
    halves[0 if names[0] in halves[0] else 1].pop(names[0])  # (the seeded one graded for real, for the compares below)
    for i, half in enumerate(halves, 1):
        (tmp_path / f"alone-{i}-of-2.json").write_text(json.dumps(half))
    assert module.grade_alone_over(tmp_path, names, [3, 5], ["--students", "6", "--no-gpu"]) == 0
    one = run("--resume", "--compare-with", str(tmp_path / "alone-1-of-2.json"))
    assert "no verdicts for 3 of 6 students" in one.stdout
    both = run("--resume", "--compare-with", str(tmp_path / "alone-1-of-2.json"), "--compare-with", str(tmp_path / "alone-2-of-2.json"))
    assert both.returncode == 0 and "no verdicts" not in both.stdout and "every verdict the same as in the class" in both.stdout


def test_the_context_start_benchmark_says_it_needs_a_gpu_where_none_is_visible():
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "context_starts.py"
    done = subprocess.run([sys.executable, str(script), "--rounds", "1"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 1 and done.stdout.startswith("needs a CUDA GPU") and "Traceback" not in done.stderr


def test_the_context_start_benchmark_starts_tool_runs_beside_and_times_the_plain_processes_only(tmp_path, monkeypatch):
    """Stand-ins for the probe and the tool: every process starts, each on the GPU it was placed
    on, and only the plain ones' seconds come back; a tool run that fails names the tool."""
    from benchmark_modules import load

    module = load("context_starts")
    monkeypatch.setenv("MARK", str(tmp_path / "started-"))
    probe = "import os; open(os.environ['MARK'] + os.environ['CUDA_VISIBLE_DEVICES'] + '-' + str(os.getpid()), 'w'); print(0.25)"
    assert module.starts([0, 1], beside=[2], tool=["env"], probe=probe) == [0.25, 0.25]
    assert sorted(p.name.split("-")[1] for p in tmp_path.glob("started-*")) == ["0", "1", "2"]
    with pytest.raises(SystemExit, match="under env -i"):
        module.starts([0], beside=[1], tool=["env", "-i"], probe=probe)  # (the tool's process lacks MARK)


def test_the_context_start_benchmark_gives_each_process_the_settings_asked_for(tmp_path, monkeypatch):
    """``--env``: a setting reaches every process, plain and beside the tool, ``NAME=`` removes one
    the grader's environment has, and a setting without ``=`` is refused before any start."""
    from benchmark_modules import load

    module = load("context_starts")
    monkeypatch.setenv("KEPT", "from the grader")
    monkeypatch.setenv("GONE", "from the grader")
    probe = ("import os; print(0.5 if os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') == '1' and 'GONE' not in os.environ "
             "and os.environ.get('KEPT') == 'from the grader' else 'unset')")
    settings = module.environment(["CUDA_DEVICE_MAX_CONNECTIONS=1", "GONE="])
    assert settings == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "GONE": None}
    assert module.starts([0, 1], beside=[0], tool=["env"], probe=probe, env=settings) == [0.5, 0.5]
    with pytest.raises(ValueError):  # (the plain run of the same probe: the settings were not there)
        module.starts([0], probe=probe)
    with pytest.raises(ValueError, match="NAME=VALUE"):
        module.environment(["CUDA_DEVICE_MAX_CONNECTIONS"])
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "context_starts.py"
    refused = subprocess.run([sys.executable, str(script), "--env", "NOEQUALS"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "give NAME=VALUE" in refused.stderr and "Traceback" not in refused.stderr
    compile(module.DRIVER_PROBE, "driver probe", "exec")  # (it runs where a driver is: on a GPU)


def test_the_class_benchmark_counts_the_samples_taken_again_and_those_still_raised(tmp_path, capsys):
    bench = _class_benchmark()
    labs = [{"timings": {"_device": {"name": "GPU"}, "reference": {"samples_taken_again": 2},
                         "student": {"samples_taken_again": 1, "samples_bounded_by_round_trip": 1}}},
            {"timings": {"naive": {"samples_taken_again": 0}, "student": {"samples_taken_again": 3}}},
            {"timings": {}}]  # a lab not timed
    folder = tmp_path / "students" / "alice"
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"labs": labs}))
    bench.print_retakes(tmp_path)
    assert capsys.readouterr().out.strip() == (
        "timing: 6 samples taken again over 4 timed kernels; 1 of the students' samples raised to the grader's round trip")


def test_the_class_benchmark_tells_the_graders_workers_from_its_other_python_by_their_command_line():
    import psutil

    bench = _class_benchmark()
    worker = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)", "from grader.worker.main import main"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "up\n"  # (started: its command line is its own)
        assert bench.program_of(psutil.Process(worker.pid)) == "python: workers"
        assert bench.program_of(psutil.Process()) == "python: the grader"
    finally:
        worker.kill()
        worker.wait()


def test_the_class_benchmark_says_how_long_the_labs_workers_took_to_start(tmp_path, capsys):
    """From the reports: the median, 90th percentile and longest of the labs' worker starts (as
    each worker said); labs without the figure (no GPU, or a worker that never started) are left out."""
    from grader.engine.grade import WORKER_START

    bench = _class_benchmark()
    for k, starts in enumerate(([0.4, 1.0, 2.0], [0.5, None, 3.5], [6.0, 0.6, 0.7, 0.8])):
        folder = tmp_path / "students" / f"s{k}"
        folder.mkdir(parents=True)
        labs = [{"environment": {} if s is None else {WORKER_START: s}} for s in starts]
        (folder / "report.json").write_text(json.dumps({"labs": labs}))
    bench.print_worker_starts(tmp_path)
    assert capsys.readouterr().out == ("a lab's worker started in 0.80 s (median of 9), 6.00 s at the 90th percentile, "
                                       "6.00 s at most\n")
    bench.print_worker_starts(tmp_path / "none")
    assert capsys.readouterr().out == ""


def test_the_class_benchmark_keeps_its_wall_time_written_while_it_runs(tmp_path):
    """A run killed outright (its machine taken back) leaves the time it took so far, for --resume
    to add up; the last write is the whole run's."""
    import time

    bench = _class_benchmark()
    path = tmp_path / "elapsed_s.txt"
    started = time.monotonic() - 100.0  # (100 s of earlier runs)
    last = bench.keep_elapsed(path, started, every_s=0.05)
    deadline = time.monotonic() + 10
    while not path.is_file():
        assert time.monotonic() < deadline, "nothing written while running"
        time.sleep(0.02)
    assert 100.0 <= float(path.read_text()) < 110.0
    wall = last()
    assert float(path.read_text()) == round(wall, 3) and wall >= 100.0
    time.sleep(0.2)
    assert float(path.read_text()) == round(wall, 3)  # (nothing after the last)


def test_the_class_benchmark_says_where_a_students_counter_replay_spent_its_time(tmp_path, capsys):
    """From the reports: each phase of the replay summed over a student's labs, the median
    student; a student with no replayed lab (no GPU, the profiler's path) is left out."""
    bench = _class_benchmark()
    students = ([{"counters.record": 0.5, "counters.queue": 1.0, "counters.profile": 0.25}, {"counters.queue": 2.0, "compile": 3.0}],
                [{"counters.record": 1.5, "counters.profile": 0.75}],
                [{"counters.record": 0.25, "counters.queue": 0.5, "counters.check": 0.125}],
                [{"compile": 1.0}, {}])
    for k, labs in enumerate(students):
        folder = tmp_path / "students" / f"s{k}"
        folder.mkdir(parents=True)
        (folder / "report.json").write_text(json.dumps({"labs": [{"lab": "ab"[i], "stage_seconds": s} for i, s in enumerate(labs)]}))
    bench.print_replay_phases(tmp_path)
    assert capsys.readouterr().out == ("the counter replay's phases, seconds summed over a student's labs, median of 3 students: "
                                       "ahead 0.00, cases 0.00, record 0.50, extract 0.00, plan 0.00, queue 0.50, prepare 0.00, lock 0.00, "
                                       "profile 0.25, finish 0.00, check 0.00\n"
                                       # each lab over the students it was replayed for: a's three, b's one
                                       "  a, median of 3: ahead 0.00, cases 0.00, record 0.50, extract 0.00, plan 0.00, queue 0.50, "
                                       "prepare 0.00, lock 0.00, profile 0.25, finish 0.00, check 0.00\n"
                                       "  b, median of 1: ahead 0.00, cases 0.00, record 0.00, extract 0.00, plan 0.00, queue 2.00, "
                                       "prepare 0.00, lock 0.00, profile 0.00, finish 0.00, check 0.00\n")
    bench.print_replay_phases(tmp_path / "none")
    assert capsys.readouterr().out == ""


def test_the_class_benchmark_sets_the_timed_kernels_dram_traffic_beside_an_earlier_runs(tmp_path, capsys):
    """Against another class run's results: every timed kernel's DRAM traffic (the roofline's
    figure) both runs measured, the median change, and those that moved by more than 5%, largest
    first; a kernel with the lab's model (no figure) or a student missing from either is left out."""
    bench = _class_benchmark()

    def run(folder, figures):
        for name, labs in figures.items():
            (tmp_path / folder / "students" / name).mkdir(parents=True)
            (tmp_path / folder / "students" / name / "report.json").write_text(json.dumps(
                {"labs": [{"lab": lab, "timings": {k: {"median_ms": 1.0, **({"dram_bytes": v} if v else {})} for k, v in rows.items()}}
                          for lab, rows in labs.items()]}))

    run("a", {"s0": {"corner_turning": {"student": 42_000_000, "naive": 5_000_000, "reference": 0}},
              "s1": {"corner_turning": {"student": 40_000_000}}, "gone": {"histogram": {"student": 1_000_000}}})
    run("b", {"s0": {"corner_turning": {"student": 42_400_000, "naive": 75_000_000, "reference": 0}},
              "s1": {"corner_turning": {"student": 30_000_000}}})
    bench.print_dram_differences(tmp_path / "a", tmp_path / "b", ["s0", "s1", "gone"])
    assert capsys.readouterr().out == (
        f"DRAM traffic of the timed kernels against {tmp_path / 'a'}: 3 figures, median change 25.0%, 2 moved by more than 5%:\n"
        "  s0 corner_turning naive: 5.0 MB, now 75.0 MB (+1400%)\n"
        "  s1 corner_turning student: 40.0 MB, now 30.0 MB (-25%)\n")
    bench.print_dram_differences(tmp_path / "a", tmp_path / "none", ["s0"])
    assert capsys.readouterr().out == ""
