"""The profiler's plumbing that needs no GPU: the lock per GPU, retries while the counters are
busy, and counter checks on one case sharing one run. Real ncu runs are in the GPU tests."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from worker_replies import tool_result

from grader.checks.counters import ncu as counters
from grader.checks.counters.ncu import Profiles
from grader.host import gpulock
from grader.host.gpu import GpuInfo
from grader.host.gpus import GpuSlot
from grader.isolation.launch import RunDirs
from grader.isolation.toolrun import ToolRun
from grader.labspec.labs import find_lab
from grader.labspec.spec import CounterCheck


def test_the_profiling_lock_keeps_two_processes_apart(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from grader.host.gpulock import profiling_lock
        with profiling_lock(5, Path({str(tmp_path)!r})):
            print("held", flush=True)
            time.sleep(1.5)
    """)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent)
    assert holder.stdout.readline().strip() == "held"
    with gpulock.profiling_lock(10, tmp_path) as waited:
        pass
    assert waited >= 1.0  # the other process held it for 1.5 s after saying so
    holder.wait(5)


def test_each_gpu_has_its_own_profiling_lock_in_the_folder_of_its_gpu_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GRADER_LOCK_DIR", raising=False)
    h100 = GpuInfo("NVIDIA H100", (9, 0), "580", 0, "GPU-1111aaaa-22bb")
    other = GpuInfo("NVIDIA H100", (9, 0), "580", 1, "GPU-3333cccc-44dd")
    folder = gpulock.lock_folder(h100)
    # the user's own lock folder (not a folder in /tmp that another user could make first)
    assert folder.path(gpulock.PROFILER_LOCK) == tmp_path / "cache" / "cuda-lab-grader" / "locks" / \
        "GPU-1111aaaa-22bb.grader-ncu.lock"
    assert folder == gpulock.gpu_folder(GpuSlot(0, h100.uuid, h100.name, (9, 0)).key)  # a class lane's
    with gpulock.profiling_lock(1, folder):
        with gpulock.profiling_lock(0.3, gpulock.lock_folder(other)) as waited:  # another GPU: no wait
            assert waited < 0.3
        with pytest.raises(TimeoutError):
            with gpulock.profiling_lock(0.3, gpulock.lock_folder(h100)):
                pass
    # a GPU whose UUID is unknown shares the one lock of the lock folder
    assert gpulock.lock_folder(GpuInfo("some GPU", (8, 0), "580")).path(gpulock.PROFILER_LOCK) == \
        tmp_path / "cache" / "cuda-lab-grader" / "locks" / "grader-ncu.lock"


def test_waiting_for_the_profiling_lock_gives_up_at_the_limit(tmp_path):
    with gpulock.profiling_lock(1, tmp_path):
        with pytest.raises(TimeoutError):
            with gpulock.profiling_lock(0.3, tmp_path):
                pass


def _run(log: str, returncode: int | None = 9, console: str = "") -> ToolRun:
    return ToolRun(returncode, log, console, None, 0.1)


BUSY = "==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no other tool"


def test_a_run_that_found_the_counters_busy_is_tried_again():
    runs = iter([_run(BUSY), _run("==PROF== Disconnected", 0)])
    limits = []

    def attempt(limit):
        limits.append(limit)
        return next(runs)

    run, why = counters.run_when_counters_free(attempt, 30, pause_s=0.01)
    assert run is not None and run.returncode == 0 and why == ""
    assert len(limits) == 2 and all(0 < limit <= 30 for limit in limits)


def test_counters_busy_on_every_try_is_a_reason_to_skip():
    tries = []
    run, why = counters.run_when_counters_free(lambda limit: tries.append(limit) or _run(BUSY), 30, pause_s=0.01)
    assert run is None and len(tries) == counters.BUSY_ATTEMPTS
    assert why.startswith(f"the GPU's performance counters stayed busy through {counters.BUSY_ATTEMPTS} tries")


def test_a_busy_message_printed_by_the_program_is_not_believed():
    """Only the profiler's own log (a pipe the program cannot reach) can say the counters are busy."""
    tries = []
    run, why = counters.run_when_counters_free(
        lambda limit: tries.append(limit) or _run("==PROF== Disconnected", 0, console=BUSY), 30, pause_s=0.01)
    assert run is not None and why == "" and len(tries) == 1


def test_a_run_killed_at_its_limit_is_not_tried_again():
    tries = []
    run, _ = counters.run_when_counters_free(lambda limit: tries.append(limit) or _run(BUSY, None), 30, pause_s=0.01)
    assert run is not None and run.timed_out and len(tries) == 1


def _check(cid, metric, seed, params=None, per=""):
    return CounterCheck(cid, metric, "what", params or {"width": 512}, seed, 1.0, 0.0, 1.0, per=per)


def test_counter_checks_on_one_case_share_one_run_with_all_their_metrics():
    a = _check("a", "m1.sum", 31, per="m2.sum")
    b = _check("b", "m3.sum + m1.sum", 31)
    c = _check("c", "m4.sum", 32)
    profiles = Profiles((a, b, c))
    asked = []

    def profile(metrics):
        asked.append(metrics)
        return counters.CounterRun(values={m: 1.0 for m in metrics})

    for check in (a, b, c):
        profiles.run("student", check, profile)
    profiles.run("baseline naive", a, profile)
    assert asked == [("m1.sum", "m2.sum", "m3.sum"), ("m4.sum",), ("m1.sum", "m2.sum", "m3.sum")]
    assert profiles.first[profiles.case(b)] == "a"


@pytest.mark.parametrize("lab", ["corner_turning", "histogram"])
def test_each_lab_profiles_its_counter_checks_in_one_run(lab):
    spec = find_lab(lab)
    assert len(spec.counters) == 2
    assert len({Profiles.case(check) for check in spec.counters}) == 1


@pytest.mark.parametrize("run,reason", [
    (ToolRun(0, "", "", tool_result({"status": "ok"}), 0.1), ""),
    (ToolRun(0, "", "", tool_result({"status": "cuda_error", "error": "CUDA error: an illegal memory access"}), 0.1),
     "CUDA error: an illegal memory access"),
    (ToolRun(-11, "", "", None, 0.1), "segmentation fault in host code (a bad pointer dereferenced on the CPU?) [SIGSEGV]"),
    (ToolRun(3, "", "", None, 0.1), "the process exited with status 3 while running your code (exit() called?)"),
    (ToolRun(0, "", "", None, 0.1), "ended before reporting"),
])
def test_why_a_tool_run_failed(run, reason):
    """Shared by the sanitizer and the profiler: a crash, an exit or an error the worker reported."""
    assert run.failure("ended before reporting") == reason


def test_coalescing_is_sectors_per_32_bytes_requested():
    """Four scattered floats of a 4-thread warp: 4 sectors for 16 bytes, one request. Sectors per
    request (4) looked coalesced; sectors per 32 bytes requested (8) does not."""
    from grader.checks.counters.ncu import counter_value

    check = next(c for c in find_lab("corner_turning").counters if c.id == "coalesced_loads")
    values = {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 4.0, "smsp__sass_data_bytes_mem_global_op_ld.sum": 16.0}
    assert check.scale == 32 and counter_value(values, check) == 8.0
    coalesced = {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 4.0, "smsp__sass_data_bytes_mem_global_op_ld.sum": 128.0}
    assert counter_value(coalesced, check) == 1.0 <= check.full


def test_a_cached_baseline_profile_writes_no_inputs(tmp_path):
    """A trusted run found in the cache neither runs the profiler nor generates its case's
    inputs (16M characters of text for histogram: seconds per lab)."""
    library = tmp_path / "baseline.so"
    library.write_bytes(b"\x7fELF compiled baseline")
    cached = counters.cache_path("key", tmp_path / "cache", library)
    cached.parent.mkdir(parents=True)
    cached.write_text('{"values": {"smsp__inst_executed.sum": 42.0}, "kernels": ["naive"]}')

    def no_task():
        raise AssertionError("the case's inputs were written for a cached run")

    run = counters.profile(library, no_task, ("smsp__inst_executed.sum",), RunDirs(tmp_path / "in", tmp_path / "out"),
                           10.0, None, cache_key="key", cache_dir=tmp_path / "cache")  # type: ignore[arg-type]
    assert run.cached and run.values == {"smsp__inst_executed.sum": 42.0} and run.kernels == ("naive",)


@pytest.mark.parametrize("launched,profiled,hidden", [
    (["decoy", "matmul_naive"], ["decoy"], True),  # cudaProfilerStop() after a decoy
    (["matmul_naive"], [], True),
    (["matmul_tiled"], ["matmul_tiled(const float *, const float *, float *, int)"], False),  # names differ in form
    (["a", "b"], ["a(int)", "b(int)", "a(int)"], False),  # a kernel launched twice
    (None, ["decoy"], False),  # a launch without a name: no record to hold the profile against
])
def test_a_profile_missing_kernels_the_runtime_launched_is_not_trusted(launched, profiled, hidden):
    why = counters.hidden_kernels(launched, profiled)
    assert bool(why) is hidden
    if hidden:
        assert f"ran {len(launched)} distinct kernel" in why and f"profiler saw {len(set(profiled))}" in why
