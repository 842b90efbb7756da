"""The worker's entry point: start-up, the task loop and one-shot runs."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from . import owned, shared
from .buffers import Buffers, StudentCudaError, array_addresses, filled_inputs, library
from .confine import close_tool_log, confine, limit_self, private_kernel_cache
from .owned import Mapped
from .poison import arm, cleared, fill_shared, seed_kernels
from .protocol import MARK_KERNEL, Kind, Reply, Status, Task, makes_shared, memory_taken
from .sampling import run_timing


def run_case(cp: Any, task: Task) -> Reply:
    """One call of the launcher (``protocol.case_task`` or ``protocol.tool_case_task``)."""
    lib = library(task["lib"], task["launcher"])
    mapped = bufs = None  # held until the call is over: their memory is the call's
    if task.get("memcpy_only"):
        if "fill" in task:
            inputs = filled_inputs(task["launcher"], task["params"], int(task["fill"]))
        else:
            inputs = {k: np.load(v) for k, v in task["inputs"].items()}
        bufs = Buffers(cp, task["launcher"], task["params"], inputs, 0, memcpy_only=True, pad=int(task.get("pad", 0)))
        args = bufs.args
    else:
        mapped = Mapped(task["share"], task["buffers"], int(cp.cuda.Device().id))
        args = mapped.args(task["launcher"], task["params"], int(task.get("guard", 0)))
    recording = bool(task.get("record"))
    checked = 0  # launches whose shared memory was checked after them
    try:
        poison = task.get("poison")
        if poison is not None:  # what the student's kernels find in shared memory
            fill_shared(cp, int(poison))  # (for launches the wrappers do not see: cooperative, driver API, graphs)
            arm(cp, lib, int(poison) ^ 0x5BD1E995)  # before each wrapped launch, another pattern than the call's
        cp.cuda.Device().synchronize()
        lib.launched(reset=True)
        lib.record(recording)
        t0 = time.perf_counter()
        try:
            lib.call(args)
        finally:
            lib.record(False)
            if poison is not None:
                checked = int(lib.shared_checks())
                arm(cp, lib, None)
        lib.check()
        seconds = time.perf_counter() - t0
    finally:
        if mapped is not None:
            mapped.release()
        del bufs
    reply = {"status": Status.OK.value, "seconds": seconds, "kernels_launched": lib.launched()}
    if checked:  # launches that ran after another context cleared shared memory: the grader runs the call again
        reply["shared_cleared"] = cleared(checked)
    if recording:  # what the launcher did, for the grader's replayer (grader/checks/counters/replay/record.py)
        reply["record"] = {"text": lib.recorded(), "arrays": array_addresses(task["launcher"], args)}
    return reply


def share_case(cp: Any, task: Task) -> Reply:
    """(Trusted worker.) A call's buffers allocated to share (``protocol.share_task``)."""
    inputs = {k: np.load(v) for k, v in task["inputs"].items()}
    call = owned.OwnedCall(cp, task["launcher"], task["params"], inputs, int(task.get("guard", 0)))
    owned.keep(call)
    return {"status": Status.OK.value, "share": call.id, "buffers": list(call.owned.described), "_fds": call.owned.fds()}


def read_case(cp: Any, task: Task) -> Reply:
    """(Trusted worker.) What the student's call left in shared buffers (``protocol.read_task``)."""
    call = owned.find(task["share"])
    Path(task["out_dir"]).mkdir(parents=True, exist_ok=True)
    try:
        found = call.read(task["out_dir"])
        if task.get("keep"):
            call.bufs.rearm()
            cp.cuda.Device().synchronize()
    finally:
        if not task.get("keep"):
            owned.drop(task["share"])
    return {"status": Status.OK.value, **found, "gpu_memory": list(cp.cuda.runtime.memGetInfo())}


def run_marked(cp: Any, task: Task) -> Reply:
    """Tasks in turn, each announced by a launch of the marker kernel (``protocol.marked_tasks``)."""
    mark = cp.RawKernel(f'extern "C" __global__ void {MARK_KERNEL}() {{}}', MARK_KERNEL)
    results: list[Reply] = []
    for blocks, sub in zip(task["marks"], task["tasks"]):
        mark((blocks,), (32,), ())
        cp.cuda.Device().synchronize()
        reply = run_task(cp, sub)
        results.append(reply)
        if reply.get("sticky") or reply["status"] == Status.OUT_OF_MEMORY.value:
            break  # the context is broken or full: the tasks left are run elsewhere
    return {"status": Status.OK.value, "results": results}


def run_task(cp: Any, task: Task) -> Reply:
    try:
        if task["kind"] == Kind.CASE.value:
            return run_case(cp, task)
        if task["kind"] == Kind.MARKED.value:
            return run_marked(cp, task)
        if task["kind"] == Kind.SHARE.value:
            return share_case(cp, task)
        if task["kind"] == Kind.READ.value:
            return read_case(cp, task)
        if task["kind"] == Kind.MEMORY.value:
            return {"status": Status.OK.value, "gpu_memory": list(cp.cuda.runtime.memGetInfo())}
        if task["kind"] == Kind.DROP.value:
            owned.drop(task["share"])
            return {"status": Status.OK.value}
        if task["kind"].startswith("timing_"):
            return run_timing(cp, task)
        return {"status": Status.WORKER_ERROR.value, "error": f"unknown task kind {task['kind']!r}"}
    except StudentCudaError as exc:
        return {"status": Status.CUDA_ERROR.value, "error": str(exc), "sticky": exc.sticky}
    except Exception as exc:
        if _out_of_memory(cp, exc) or (isinstance(exc, shared.SharingError) and exc.out_of_memory):
            return {"status": Status.OUT_OF_MEMORY.value, "error": _memory_left(cp)}
        return {"status": Status.WORKER_ERROR.value, "error": traceback.format_exc()}


def _out_of_memory(cp: Any, exc: Exception) -> bool:
    """The grader's own allocation failed: the GPU's memory is taken (by the student's code)."""
    if isinstance(exc, cp.cuda.memory.OutOfMemoryError):
        return True
    runtime_error = getattr(cp.cuda.runtime, "CUDARuntimeError", ())
    return isinstance(exc, runtime_error) and getattr(exc, "status", None) == 2  # cudaErrorMemoryAllocation


def _memory_left(cp: Any) -> str:
    try:
        free, total = cp.cuda.runtime.memGetInfo()
        ours = cp.get_default_memory_pool().total_bytes()
    except Exception:
        return "your code left no free GPU memory for the next case (free what you allocate with cudaFree)"
    return memory_taken(max(0, total - free - ours), total, free)


def _import_cupy(no_pool: bool = False, warm_up: bool = True) -> Any:
    import cupy as cp

    if no_pool:
        cp.cuda.set_allocator(None)
    cp.cuda.Device(0).use()
    if warm_up:  # create the context now, not during the first timed call
        cp.zeros(1).sum()
    return cp


def serve() -> int:
    fd = int(os.environ["GRADER_RESULT_FD"])

    def send(obj: Reply) -> None:
        os.write(fd, (json.dumps(obj) + "\n").encode())

    begun = time.monotonic()
    try:
        cp = _import_cupy(bool(os.environ.get("GRADER_NO_POOL")))
        if os.environ.pop("GRADER_SEED_KERNELS", ""):
            # a trusted worker: the kernels each sandboxed worker runs on its first case, compiled
            # into the cache they start from a copy of (each compiled them anew: 0.1-0.2 s)
            seed_kernels(cp)
        confine()
    except Exception as exc:
        send({"event": "startup_failed", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"event": "ready", "start_s": round(time.monotonic() - begun, 3)})  # (CuPy and the CUDA context)
    tasks = os.fdopen(int(os.environ["GRADER_TASK_FD"]), "r", encoding="utf-8")
    for line in tasks:
        task = json.loads(line)
        if task.get("kind") == Kind.QUIT.value:
            return 0
        result = run_task(cp, task)
        sys.stdout.flush()
        fds = result.pop("_fds", None)
        if fds is not None:  # shared buffers' descriptors go first, on the socket, tagged with their id
            try:
                shared.send_fds(owned.share_socket(), str(result["share"]), fds)
            except (OSError, shared.SharingError) as exc:
                result = {"status": Status.WORKER_ERROR.value, "error": f"could not pass shared buffers: {exc}"}
        send({"event": "result", "id": task.get("id"), **result})
        if result.get("sticky") or (result["status"] == Status.OUT_OF_MEMORY.value and not makes_shared(task)):
            return 0  # the CUDA context is broken or full: the parent starts a fresh worker
    return 0


def one_shot(job: str, result_path: str, job_fd: bool = False) -> int:
    """Run one task, from the file ``job`` or, with ``job_fd``, from the pipe of that number:
    the worker then gets ready first (CuPy, the CUDA context, under the tool) and waits for it."""
    task = None if job_fd else json.loads(Path(job).read_text())
    # no warm-up kernel: under a profiler or sanitizer only the student's kernels should run
    cp = _import_cupy(bool(os.environ.get("GRADER_NO_POOL")), warm_up=False)
    if task is None:
        cp.cuda.runtime.free(0)  # the context, made now: no kernel
    confine()
    if task is None:
        with os.fdopen(int(job), "rb") as pipe:
            text = pipe.read()
        if not text:
            return 3  # the grader had no job for it after all
        task = json.loads(text)
    result = run_task(cp, task)
    owned.write_new(result_path, lambda fh: fh.write(json.dumps(result).encode()))
    return 0


def main(argv: list[str]) -> int:
    close_tool_log()
    limit_self()
    private_kernel_cache()
    if argv[:1] == ["--serve"]:
        return serve()
    if len(argv) == 4 and argv[0] in ("--job", "--job-fd") and argv[2] == "--result":
        return one_shot(argv[1], argv[3], argv[0] == "--job-fd")
    print("usage: grader.worker.main --serve | --job JOB.json | --job-fd FD --result RESULT.json", file=sys.stderr)
    return 2
