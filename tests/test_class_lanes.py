"""A GPU lane's process machinery, run on the CPU: the lane's own process (what it sees of the
GPU, its temporary folder), progress through the queue, and a lane process that dies mid-student."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from grader.classroom import plan, roster
from grader.classroom.progress import Display
from grader.classroom.scheduler import Scheduler
from grader.host import gpulock
from grader.host.gpus import GpuSlot
from grader.isolation.options import GradeOptions

ROOT = Path(__file__).resolve().parent.parent
LAB = "tiled_matmul"
#: A GPU that is not there: the lane's machinery runs without one.
SLOT = GpuSlot(7, "GPU-test-lane-7", "Fake", (9, 0))


class Recorder(Display):
    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.events: list[tuple[str, str, str]] = []
        self.on_event = None

    def lane(self, lane: str, student: str, text: str) -> None:
        self.events.append((lane, student, text))
        if self.on_event is not None:
            self.on_event(lane, student, text)


def test_a_gpu_lane_grades_in_its_own_process_and_survives_its_death(tmp_path):
    from grader.labspec.labs import find_lab

    repos = tmp_path / "repos"
    for sid in ("alice", "victim", "zoe"):
        target = repos / sid / "labs" / LAB / "student.cu"
        target.parent.mkdir(parents=True)
        shutil.copy(find_lab(LAB).files.reference, target)
    out = tmp_path / "out"
    options = GradeOptions(gpu=False)  # the lane's machinery without a GPU: compile and compiled-code checks
    jobs = [plan.plan_student(s, [find_lab(LAB)], options, out, tmp_path) for s in roster.from_folder(repos)]
    display = Recorder()
    scheduler = Scheduler(options, [SLOT], [("sm_90",)], display, jobs=1)
    killed: list[int] = []

    def kill_the_lane(lane: str, student: str, text: str) -> None:
        if student == "victim" and text.startswith(f"[{LAB}]") and not killed:
            lane_obj = scheduler_lanes[0]
            for proc in list(getattr(lane_obj.pool, "_processes", {}).values()):
                killed.append(proc.pid)
                os.kill(proc.pid, signal.SIGKILL)

    real_lanes = scheduler._lanes
    scheduler_lanes: list = []

    def lanes(labs):
        made = real_lanes(labs)
        scheduler_lanes.extend(made)
        return made

    scheduler._lanes = lanes  # type: ignore[method-assign]
    display.on_event = kill_the_lane
    results = scheduler.run(jobs)
    assert [r.student for r in results] == ["alice", "victim", "zoe"]
    assert all(r.lane == "gpu7" for r in results)
    assert killed
    # progress from inside the lane process came through the queue
    assert any(lane == "gpu7" and sid == "alice" and text.startswith(f"[{LAB}] compiling") for lane, sid, text in display.events)
    # ... and from the process that replaced the killed one (its events travel on the same queue)
    assert any(lane == "gpu7" and sid == "zoe" and text.startswith(f"[{LAB}]") for lane, sid, text in display.events)
    alice = json.loads((out / "students" / "alice" / "report.json").read_text())
    assert alice["score"] == 2 and alice["identity"]["student"] == "alice"
    victim = json.loads((out / "students" / "victim" / "report.json").read_text())
    assert victim["labs"][0]["checks"][0]["message"].startswith("the grading process died")
    assert results[1].problems and not results[2].problems  # the lane started afresh for zoe
    # the lane took the lock in the GPU's own folder (where its profiling lock is too)
    assert gpulock.gpu_folder(SLOT.key).path(gpulock.LOCK_NAME).exists()


def test_several_seats_on_one_gpu_are_lanes_of_their_own_each_with_its_lock(tmp_path):
    from grader.labspec.labs import find_lab

    repos = tmp_path / "repos"
    for sid in ("a", "b", "c", "d"):
        target = repos / sid / "labs" / LAB / "student.cu"
        target.parent.mkdir(parents=True)
        shutil.copy(find_lab(LAB).files.reference, target)
    options = GradeOptions(gpu=False)
    jobs = [plan.plan_student(s, [find_lab(LAB)], options, tmp_path / "out", tmp_path) for s in roster.from_folder(repos)]
    slots = [GpuSlot(7, "GPU-test-seats-7", "Fake", (9, 0)), GpuSlot(8, "GPU-test-seats-8", "Fake", (9, 0))]
    scheduler = Scheduler(options, slots, [("sm_90",)], Recorder(), jobs=1, per_gpu=2)
    lanes = scheduler._lanes((LAB,))
    try:
        assert [lane.name for lane in lanes] == ["gpu7", "gpu8", "gpu7.1", "gpu8.1"]  # seat by seat: one student per GPU first
    finally:
        for lane in lanes:
            lane.close()
    assert gpulock.seat_lock(0) == gpulock.LOCK_NAME and gpulock.seat_lock(1) == "grader-gpu-1.lock"
    results = Scheduler(options, slots[:1], [("sm_90",)], Recorder(), jobs=1, per_gpu=2).run(jobs)
    assert [r.student for r in results] == ["a", "b", "c", "d"] and not any(r.problems for r in results)
    assert {r.lane for r in results} == {"gpu7", "gpu7.1"}, "both seats graded"


def _alice(tmp_path: Path, options: GradeOptions = GradeOptions(gpu=False)) -> tuple[GradeOptions, plan.StudentJob]:
    """A class of one (alice, the lab's reference) planned without a GPU: its options and job."""
    from grader.labspec.labs import find_lab

    target = tmp_path / "repos" / "alice" / "labs" / LAB / "student.cu"
    target.parent.mkdir(parents=True)
    shutil.copy(find_lab(LAB).files.reference, target)
    return options, plan.plan_student(roster.from_folder(tmp_path / "repos")[0], [find_lab(LAB)], options, tmp_path / "out", tmp_path)


def test_a_rehearsal_that_takes_its_lane_process_down_costs_the_first_student_nothing(tmp_path):
    """A lane readies its GPU before its first student, in its own process; should that process
    die there, the lane starts afresh and the student is graded as if there had been none."""
    import multiprocessing

    from grader.classroom.lanes import GpuLane

    options, job = _alice(tmp_path)
    manager = multiprocessing.get_context("spawn").Manager()
    try:
        lane = GpuLane(SLOT, options, manager.Queue(), "visible", 5.0, (LAB,))
        assert lane.rehearsal is not None
        lane.rehearsal.result(timeout=120)  # it ran in the lane's process (without a GPU: nothing to ready)
        first = lane.pool
        lane.rehearsal = lane.pool.submit(os._exit, 1)  # a rehearsal that took its process down
        result = lane.run(job)
        assert lane.pool is not first and lane.rehearsal is None
        assert result.student == "alice" and not result.problems and result.score == 2
        lane.close()
    finally:
        manager.shutdown()


def _stuck_grading() -> int:
    """In a lane's process: what a grading stuck on the GPU leaves (a tool run in a session of its
    own, and a thread that will not end, as one waiting for a sanitizer run of a hung kernel)."""
    import subprocess
    import threading
    import time

    child = subprocess.Popen(["sleep", "600"], start_new_session=True)
    threading.Thread(target=time.sleep, args=(600,), name="stuck").start()
    return child.pid


def test_an_interrupted_lane_ends_within_its_grace_with_everything_it_started(tmp_path):
    """A class stopped (Ctrl-C, or SIGTERM from a job's time limit) must end: a lane whose process
    does not leave on the stop is killed with what it started, not waited for (an interrupted run
    with two seats on an H100 never exited)."""
    import multiprocessing
    import time

    import psutil

    from grader.classroom.lanes import STOP_GRACE_S, GpuLane

    manager = multiprocessing.get_context("spawn").Manager()
    try:
        lane = GpuLane(SLOT, GradeOptions(gpu=False), manager.Queue(), "visible", 5.0)
        child = lane.pool.submit(_stuck_grading).result(timeout=120)
        [proc] = lane._processes()
        began = time.monotonic()
        lane.interrupt()
        lane.close(wait=False)
        took = time.monotonic() - began
        assert took < STOP_GRACE_S + 5

        def ended(pid: int) -> bool:  # gone, or dead and not yet reaped (the pool's own thread reaps the lane)
            try:
                return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        assert ended(proc.pid), "the lane's process outlived the close"
        assert ended(child), "what the lane started outlived it"
    finally:
        manager.shutdown()


def test_a_lanes_progress_never_waits_for_the_scheduler_and_arrives_in_order():
    import queue as queues
    import threading

    from grader.classroom import lanes

    release, received = threading.Event(), []

    class SlowQueue:  # the manager's queue on a busy machine: each put waits for an answer
        def put(self, item):
            assert release.wait(5)
            received.append(item)

    outbox: queues.SimpleQueue = queues.SimpleQueue()
    threading.Thread(target=lanes._forward, args=(outbox, SlowQueue()), daemon=True).start()
    for k in range(3):
        outbox.put(("gpu0", "alice", f"step {k}"))  # a grading thread goes on at once
    sent = threading.Event()
    outbox.put(sent)
    assert not sent.wait(0.2) and received == []  # held up in the forwarder, not in grading
    release.set()
    assert sent.wait(5)
    assert received == [("gpu0", "alice", f"step {k}") for k in range(3)]

    class GoneQueue:
        def put(self, item):
            raise EOFError("the manager is gone")

    dead: queues.SimpleQueue = queues.SimpleQueue()
    threading.Thread(target=lanes._forward, args=(dead, GoneQueue()), daemon=True).start()
    dead.put(("gpu0", "bob", "x"))
    flushed = threading.Event()
    dead.put(flushed)
    assert flushed.wait(5)  # with the scheduler gone, a lane still never waits out its flush


def test_each_build_is_one_task_for_the_class_and_the_first_students_come_first(tmp_path):
    from grader.classroom.prepare import Builder
    from grader.labspec.labs import find_lab

    repos = tmp_path / "repos"
    for sid, text in (("alice", None), ("bob", None), ("carol", "// carol's own\n")):
        target = repos / sid / "labs" / LAB / "student.cu"
        target.parent.mkdir(parents=True)
        shutil.copy(find_lab(LAB).files.reference, target)
        if text:
            target.write_text(target.read_text() + text)
    options = GradeOptions(gpu=False)
    jobs = [plan.plan_student(s, [find_lab(LAB)], options, tmp_path / "out", tmp_path) for s in roster.from_folder(repos)]
    builder = Builder(options, [("sm_90",)], baselines=True)
    alice, bob, carol = (set(builder.tasks(job)) for job in jobs)
    assert alice == bob  # the same file: the same builds, compiled once for both
    assert len(carol - alice) == 1 and {k[1] for k in alice - carol} == {jobs[0].identity.files[f"labs/{LAB}/student.cu"]}
    assert {k[1] for k in alice if k[1].startswith("baseline:")} == {f"baseline:{n}" for n in {"reference", *find_lab(LAB).files.baselines}}


def test_builds_run_at_a_lower_priority_than_grading_and_what_they_start_inherits_it():
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from grader.classroom import scheduler

    def child_nice() -> int:
        stat = subprocess.run(["cat", "/proc/self/stat"], capture_output=True, text=True).stdout
        return int(stat[stat.rindex(")") + 2:].split()[16])

    before = os.getpriority(os.PRIO_PROCESS, 0)
    with ThreadPoolExecutor(1, initializer=scheduler._lower_priority) as pool:
        niced = pool.submit(child_nice).result()
    assert niced >= scheduler.BUILD_NICENESS and niced > before
    assert os.getpriority(os.PRIO_PROCESS, 0) == before  # the grading thread keeps its priority


def _failing_thread() -> str:
    """In a lane's process: a thread that fails (as the one ending a student's workers once did)."""
    import threading

    def fail() -> None:
        raise ValueError("a descriptor that was not open")

    thread = threading.Thread(target=fail, name="teardown")
    thread.start()
    thread.join()
    return threading.excepthook.__qualname__


def test_a_failing_thread_in_a_lane_shows_one_line_and_logs_its_trace(tmp_path, capfd, monkeypatch):
    import multiprocessing

    from grader.classroom.lanes import GpuLane

    log = tmp_path / "internal.log"
    monkeypatch.setenv("GRADER_LOG", str(log))
    manager = multiprocessing.get_context("spawn").Manager()
    try:
        lane = GpuLane(SLOT, GradeOptions(gpu=False), manager.Queue(), "visible", 5.0)
        assert lane.pool.submit(_failing_thread).result(timeout=120).startswith("report_thread_errors")
        lane.close()
    finally:
        manager.shutdown()
    err = capfd.readouterr().err
    assert "in the grader's thread teardown: ValueError: a descriptor that was not open" in err and "Traceback" not in err, err
    assert "Traceback" in log.read_text()


def _graded_slowly() -> None:
    import time

    time.sleep(600)


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "grading"])
def test_an_interrupted_lane_prints_no_traceback(tmp_path, capfd, busy):
    """A stopped class says it was stopped, once, from the parent: its lanes' processes, idle or in
    the middle of a student, end without a Python traceback of the interrupt (a class of 24 stopped
    by its time limit printed one per lane)."""
    import contextlib
    import multiprocessing
    import time

    from grader.classroom.lanes import GpuLane

    manager = multiprocessing.get_context("spawn").Manager()
    try:
        lane = GpuLane(SLOT, GradeOptions(gpu=False), manager.Queue(), "visible", 5.0)
        lane.pool.submit(int).result(timeout=120)  # the lane's process is up
        if busy:
            lane.pool.submit(_graded_slowly)
            time.sleep(1.0)
        [proc] = lane._processes()
        lane.interrupt()
        time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGINT)  # (Ctrl-C reaches the lane too, while it handles the first stop)
        lane.close(wait=False)
        proc.join(timeout=10)
    finally:
        manager.shutdown()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def _blas_threads() -> int:
    from threadpoolctl import threadpool_info

    return max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")


@pytest.mark.parametrize("lanes", [1, 4])
def test_a_lanes_blas_takes_its_share_of_the_cpus(lanes):
    """Every lane's oracle products on a thread per CPU oversubscribe the host: each lane's process
    gets its share (and the only lane all of them)."""
    import multiprocessing

    from grader.classroom.lanes import GpuLane, blas_threads
    from grader.isolation.options import usable_cpus

    manager = multiprocessing.get_context("spawn").Manager()
    try:
        lane = GpuLane(SLOT, GradeOptions(gpu=False), manager.Queue(), "visible", 5.0,
                       lanes=lanes)
        seen = lane.pool.submit(_blas_threads).result(timeout=120)
        lane.close()
    finally:
        manager.shutdown()
    assert seen == blas_threads(lanes) == max(1, usable_cpus() // lanes)
    if lanes == 1:
        assert seen == min(usable_cpus(), _blas_threads()), "the only lane keeps numpy's own count"


def test_a_stopped_lane_starts_no_process_again(tmp_path):
    """A lane whose process the stop ended must not take that for a crash and start a fresh one for
    its student (nothing would stop that one), nor grade the student as failed."""
    import multiprocessing.connection

    from grader.classroom import stopping
    from grader.classroom.lanes import GpuLane

    options, job = _alice(tmp_path)
    manager = multiprocessing.get_context("spawn").Manager()
    try:
        lane = GpuLane(SLOT, options, manager.Queue(), "visible", 5.0, (LAB,))
        lane.rehearsal.result(timeout=120)
        first, [proc] = lane.pool, lane._processes()
        lane.interrupt()
        # it ends by itself, wherever in the pool's loop the stop reached it (the pool's own thread
        # reaps it: its sentinel, not is_alive, which races with that thread's wait, says it is gone)
        assert multiprocessing.connection.wait([proc.sentinel], timeout=10), "the stopped lane process is still there"
        with pytest.raises(stopping.Stopped):
            lane.run(job)
        assert lane.pool is first and [p.pid for p in lane._processes()] in ([], [proc.pid]), "a process started after the stop"
        lane.close(wait=False)
    finally:
        manager.shutdown()


def test_a_lane_stopped_mid_student_ends_once_the_grading_has_unwound(tmp_path):
    """The pool's worker loop takes the stop's interrupt for the failure of its call, sends that
    back and waits for the next: the stopped lane process must end by itself all the same (its
    end-of-stop watchdog, 15 s on, is not what ends it), with its student's processes."""
    import multiprocessing.connection

    from grader.classroom import lanes
    from grader.host.procgroup import ended

    # a cache of its own: the build is seconds of nvcc, not a copy of an earlier test's (the stop
    # must come while the grading runs, not once it has returned)
    options, job = _alice(tmp_path, GradeOptions(gpu=False, cache_dir=tmp_path / "cache"))
    manager = multiprocessing.get_context("spawn").Manager()
    try:
        progress = manager.Queue()
        lane = lanes.GpuLane(SLOT, options, progress, "visible", 5.0, (LAB,))
        lane.rehearsal.result(timeout=120)
        [proc] = lane._processes()
        grading = lane.pool.submit(lanes._lane_grade, job, options, "visible")
        progress.get(timeout=60)  # the student's grading has begun (it compiles: seconds of nvcc)
        below = psutil.Process(proc.pid).children(recursive=True)
        lane.interrupt()
        assert multiprocessing.connection.wait([proc.sentinel], timeout=10), "the stopped lane process is still there"
        assert grading.exception(timeout=10) is not None, "a stopped student's grading returned a result"
        assert all(ended(p) for p in below), "the stopped student's processes outlived its lane"
        lane.close(wait=False)
    finally:
        manager.shutdown()
