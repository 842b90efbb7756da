"""The worker: the only process that loads student code.

It loads shared objects with ctypes, allocates with CuPy, runs tasks sent by the parent and hands
back outputs as .npy files. It never sees expected results. Two modes:

* ``python -m grader.worker --serve`` reads one JSON task per line on stdin and writes one JSON
  result per line to the file descriptor in ``GRADER_RESULT_FD`` (student output goes to stdout);
* ``python -m grader.worker --job JOB.json --result RESULT.json`` runs one task (used under ncu).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from . import expr
from .timing import should_stop, summarize

CANARY = 0xA5
RESULT_FD = int(os.environ.get("GRADER_RESULT_FD", "-1"))
CTYPES = {"int": ctypes.c_int, "long long": ctypes.c_longlong, "float": ctypes.c_float}
FP32_CORES_PER_SM = {(7, 5): 64, (8, 0): 64}  # every later architecture has 128


class StudentCudaError(Exception):
    def __init__(self, message: str, sticky: bool):
        super().__init__(message)
        self.sticky = sticky


class Library:
    """A graded shared object: the launcher plus the grader's support functions."""

    def __init__(self, path: str, launcher: dict):
        self.path = path
        self.lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.launcher = getattr(self.lib, launcher["name"])
        self.launcher.restype = None
        self.launcher.argtypes = [
            CTYPES[a["ctype"]] if a["role"] == "scalar" else ctypes.c_void_p for a in launcher["args"]
        ]
        self._status = self.lib.cudalab_grader_status
        self._status.restype = ctypes.c_int
        self._status.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.reset_l2 = self.lib.cudalab_grader_reset_l2
        self.reset_l2.restype = ctypes.c_int
        self._arm = self.lib.cudalab_grader_arm
        self._arm.argtypes = [ctypes.c_int]
        self._disarm = self.lib.cudalab_grader_disarm

    def call(self, args: list) -> None:
        """Run the launcher; exit() or a crash inside it is reported on the result fd at once."""
        self._arm(RESULT_FD)
        try:
            self.launcher(*args)
        finally:
            self._disarm()

    def check(self) -> None:
        """Raise StudentCudaError if the launch failed or a kernel faulted (synchronizes)."""
        buf = ctypes.create_string_buffer(512)
        code = self._status(buf, len(buf))
        if code != 0:
            message = buf.value.decode(errors="replace") or f"CUDA error {code}"
            sticky = self._status(None, 0) != 0  # still failing: the context is unusable
            raise StudentCudaError(message, sticky)


_LIBS: dict[str, Library] = {}


def library(path: str, launcher: dict) -> Library:
    key = f"{path}:{launcher['name']}"
    if key not in _LIBS:
        _LIBS[key] = Library(path, launcher)
    return _LIBS[key]


# ------------------------------------------------------------------ buffers


class Buffers:
    """Device buffers for one call, in launcher order, with canary guards around outputs."""

    def __init__(self, cp, launcher: dict, params: dict, inputs: dict, guard: int, memcpy_only: bool = False):
        self.cp = cp
        self.args: list = []
        self.inputs: dict = {}
        self.host_inputs: dict = {}
        self.outputs: dict = {}
        self.raw: dict = {}
        self.guard_bytes: dict = {}
        self.launcher = launcher
        for a in launcher["args"]:
            name = a["name"]
            if a["role"] == "scalar":
                self.args.append(CTYPES[a["ctype"]](expr.evaluate(a["value"], params)))
                continue
            shape = tuple(int(expr.evaluate(s, params)) for s in a["shape"])
            dtype = np.dtype(a["dtype"])
            if a["role"] == "input":
                host = np.ascontiguousarray(inputs[name], dtype=dtype).reshape(shape)
                self.host_inputs[name] = host
                if a.get("host"):
                    self.inputs[name] = host.copy()
                    self.args.append(self.inputs[name].ctypes.data)
                else:
                    dev = cp.asarray(host)
                    self.inputs[name] = dev
                    self.args.append(dev.data.ptr if dev.size else 0)
                continue
            n = int(np.prod(shape)) if shape else 1
            fill = np.nan if a.get("init", "nan") == "nan" and dtype.kind == "f" else 0
            if a.get("init", "nan") == "nan" and dtype.kind != "f":
                fill = np.iinfo(dtype).max
            gb = guard * dtype.itemsize
            if memcpy_only:  # no CuPy kernels at all, so that only student kernels get profiled
                host_raw = np.full(n * dtype.itemsize + 2 * gb, CANARY, dtype=np.uint8)
                host_raw[gb : gb + n * dtype.itemsize].view(dtype)[:] = fill
                raw = cp.asarray(host_raw)
            else:
                raw = cp.empty(n * dtype.itemsize + 2 * gb, dtype=cp.uint8)
                raw.fill(CANARY)
                raw[gb : gb + n * dtype.itemsize].view(dtype).fill(fill)
            body = raw[gb : gb + n * dtype.itemsize].view(dtype).reshape(shape)
            self.raw[name], self.guard_bytes[name], self.outputs[name] = raw, gb, body
            self.args.append(raw.data.ptr + gb if raw.size else 0)

    def guard_violations(self) -> dict[str, list[int]]:
        bad = {}
        for name, raw in self.raw.items():
            gb = self.guard_bytes[name]
            if gb == 0:
                continue
            host = raw.get()
            before = int(np.count_nonzero(host[:gb] != CANARY))
            after = int(np.count_nonzero(host[len(host) - gb :] != CANARY))
            if before or after:
                bad[name] = [before, after]
        return bad

    def modified_inputs(self) -> list[str]:
        changed = []
        for name, value in self.inputs.items():
            now = value if isinstance(value, np.ndarray) else value.get()
            if not np.array_equal(now, self.host_inputs[name], equal_nan=True):
                changed.append(name)
        return changed


# ------------------------------------------------------------------ tasks


def run_case(cp, task: dict) -> dict:
    lib = library(task["lib"], task["launcher"])
    inputs = {k: np.load(v) for k, v in task["inputs"].items()}
    out_dir = Path(task["out_dir"])
    bufs = Buffers(cp, task["launcher"], task["params"], inputs, task.get("guard", 0), task.get("memcpy_only", False))
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    lib.call(bufs.args)
    lib.check()
    seconds = time.perf_counter() - t0
    result = {"status": "ok", "seconds": seconds, "outputs": {}}
    if task.get("memcpy_only"):
        return result
    for name, arr in bufs.outputs.items():
        path = out_dir / f"{name}.npy"
        np.save(path, arr.get())
        result["outputs"][name] = str(path)
    result["guard_violations"] = bufs.guard_violations()
    result["inputs_modified"] = bufs.modified_inputs()
    return result


def _load_problem(path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("grader_worker_problem", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def device_info(cp) -> dict:
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    attr = cp.cuda.runtime.deviceGetAttribute
    info = {
        "name": name,
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sms": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"],
    }
    clock_khz = mem_khz = bus_bits = 0
    try:
        clock_khz = attr(13, dev.id)  # cudaDevAttrClockRate
        mem_khz = attr(36, dev.id)  # cudaDevAttrMemoryClockRate
        bus_bits = attr(37, dev.id)  # cudaDevAttrGlobalMemoryBusWidth
    except Exception:
        pass
    if not clock_khz or not mem_khz:
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
            clock_khz = clock_khz or pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) * 1000
            mem_khz = mem_khz or pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM) * 1000
            bus_bits = bus_bits or pynvml.nvmlDeviceGetMemoryBusWidth(h)
        except Exception:
            pass
    cores = FP32_CORES_PER_SM.get((props["major"], props["minor"]), 128)
    if clock_khz:
        info["peak_fp32_gflops"] = round(info["sms"] * cores * 2 * clock_khz / 1e6, 1)
    if mem_khz and bus_bits:
        info["peak_dram_gbps"] = round(2 * mem_khz * 1e3 * bus_bits / 8 / 1e9, 1)
    return info


def measure_copy_bandwidth(cp) -> float:
    """Achieved device-to-device copy bandwidth in GB/s (bytes read plus written)."""
    n = 64 * 1024 * 1024  # 256 MiB of float32
    a = cp.ones(n, dtype=cp.float32)
    b = cp.empty_like(a)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(6):
        start.record()
        cp.copyto(b, a)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    del a, b
    best = sorted(times[1:])[len(times[1:]) // 2]
    return round(2 * n * 4 / (best / 1e3) / 1e9, 1)


def run_timing(cp, task: dict) -> dict:
    launcher, params, cfg = task["launcher"], task["params"], task["timing"]
    problem = _load_problem(task["problem"])
    names = list(task["libs"])  # baselines first, student last: the buffers end with its output
    libs = {n: library(task["libs"][n], launcher) for n in names}
    fresh = problem.generate(params, task["seed"], cp)
    bufs = Buffers(cp, launcher, params, {k: cp.asnumpy(v) if not isinstance(v, np.ndarray) else v for k, v in fresh.items()}, 0)
    device = device_info(cp)
    device["copy_gbps"] = measure_copy_bandwidth(cp)
    flush = cp.empty(max(2 * device["l2_bytes"], 16 << 20) // 4, dtype=cp.int32)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    counter = [0]

    def refill():
        counter[0] += 1
        new = problem.generate(params, task["seed"] + 7919 * counter[0], cp)
        for name, value in new.items():
            target = bufs.inputs[name]
            if isinstance(target, np.ndarray):
                target[...] = cp.asnumpy(value) if not isinstance(value, np.ndarray) else value
            else:
                target[...] = cp.asarray(value)  # a generator may return numpy arrays
        for name, out in bufs.outputs.items():
            out.fill(np.nan if out.dtype.kind == "f" else 0)

    def sample(lib: Library) -> tuple[float, float]:
        refill()
        flush.fill(counter[0])
        lib.reset_l2()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        start.record()
        lib.call(bufs.args)
        end.record()
        end.synchronize()
        lib.check()  # device-wide synchronize: work left on other streams is waited for
        wall = (time.perf_counter() - t0) * 1e3
        return cp.cuda.get_elapsed_time(start, end), wall

    for lib in libs.values():  # warm up
        t_end = time.perf_counter() + cfg["warmup_s"]
        sample(lib)
        while time.perf_counter() < t_end:
            sample(lib)

    remeasured = False
    while True:
        samples = {n: [] for n in names}
        walls = {n: [] for n in names}
        t_start = time.perf_counter()
        while not should_stop(
            samples, time.perf_counter() - t_start,
            min_samples=cfg["min_samples"], max_samples=cfg["max_samples"],
            target_rse=cfg["target_rse"], budget_s=cfg["budget_s"],
        ):
            for n in names:
                ms, wall = sample(libs[n])
                samples[n].append(ms)
                walls[n].append(wall)
        noisy = [n for n in names if summarize(samples[n]).cv > cfg["max_cv"]]
        if not noisy or remeasured:
            break
        remeasured = True

    out_dir = Path(task["out_dir"])
    check_inputs, check_outputs = {}, {}
    for name, value in bufs.inputs.items():
        path = out_dir / f"timed_input_{name}.npy"
        np.save(path, value if isinstance(value, np.ndarray) else value.get())
        check_inputs[name] = str(path)
    for name, value in bufs.outputs.items():
        path = out_dir / f"timed_output_{name}.npy"
        np.save(path, value.get())
        check_outputs[name] = str(path)
    return {
        "status": "ok",
        "samples_ms": samples,
        "wall_ms": walls,
        "remeasured": remeasured,
        "noisy": noisy,
        "device": device,
        "check_inputs": check_inputs,
        "check_outputs": check_outputs,
    }


def run_task(cp, task: dict) -> dict:
    try:
        if task["kind"] == "case":
            return run_case(cp, task)
        if task["kind"] == "timing":
            return run_timing(cp, task)
        return {"status": "worker_error", "error": f"unknown task kind {task['kind']!r}"}
    except StudentCudaError as exc:
        return {"status": "cuda_error", "error": str(exc), "sticky": exc.sticky}
    except Exception:
        return {"status": "worker_error", "error": traceback.format_exc()}


def _import_cupy(no_pool: bool = False, warm_up: bool = True):
    import cupy as cp

    if no_pool:
        cp.cuda.set_allocator(None)
    cp.cuda.Device(0).use()
    if warm_up:  # create the context now, not during the first timed call
        cp.zeros(1).sum()
    return cp


def serve() -> int:
    fd = int(os.environ["GRADER_RESULT_FD"])

    def send(obj: dict) -> None:
        os.write(fd, (json.dumps(obj) + "\n").encode())

    try:
        cp = _import_cupy(bool(os.environ.get("GRADER_NO_POOL")))
    except Exception as exc:
        send({"event": "startup_failed", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"event": "ready"})
    for line in sys.stdin:
        task = json.loads(line)
        if task.get("kind") == "quit":
            return 0
        result = run_task(cp, task)
        sys.stdout.flush()
        send({"event": "result", "id": task.get("id"), **result})
        if result.get("sticky"):
            return 0  # the CUDA context is broken: the parent starts a fresh worker
    return 0


def one_shot(job_path: str, result_path: str) -> int:
    task = json.loads(Path(job_path).read_text())
    # no warm-up kernel: under a profiler or sanitizer only the student's kernels should run
    cp = _import_cupy(bool(os.environ.get("GRADER_NO_POOL")), warm_up=False)
    result = run_task(cp, task)
    Path(result_path).write_text(json.dumps(result))
    return 0


def limit_self() -> None:
    """Cap the size of every file this process writes (runaway prints) and disable core dumps."""
    limit = int(os.environ.get("GRADER_FILE_LIMIT_BYTES", "0") or 0)
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(argv: list[str]) -> int:
    limit_self()
    if argv[:1] == ["--serve"]:
        return serve()
    if len(argv) == 4 and argv[0] == "--job" and argv[2] == "--result":
        return one_shot(argv[1], argv[3])
    print("usage: python -m grader.worker --serve | --job JOB.json --result RESULT.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
