"""The worker: the only process that loads student code.

It loads shared objects with ctypes, allocates with CuPy, runs tasks sent by the parent and hands
back outputs as .npy files. It never sees expected results. Two modes:

* ``--serve`` reads one JSON task per line from the file descriptor in ``GRADER_TASK_FD`` and
  writes one JSON result per line to the one in ``GRADER_RESULT_FD`` (student output goes to
  stdout);
* ``--job JOB.json --result RESULT.json`` runs one task (under ncu or compute-sanitizer).

Before any student code is loaded it confines itself: no new processes (seccomp), and a
Landlock domain where the kernel has one, so that it cannot reach into processes outside it
(the profiler or sanitizer that watches it: their memory, their open files, their log pipe).
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
        self._launched = self.lib.cudalab_grader_launched
        self._launched.restype = ctypes.c_int
        self._launched.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]

    def launched(self, reset: bool = False) -> list[str] | None:
        """Names of the kernels launched since the last reset (None if some had no name)."""
        buf = ctypes.create_string_buffer(1 << 16)
        unnamed = self._launched(buf, len(buf), int(reset))
        if unnamed:
            return None
        return [n for n in buf.value.decode(errors="replace").split("\n") if n]

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
    lib.launched(reset=True)
    t0 = time.perf_counter()
    lib.call(bufs.args)
    lib.check()
    seconds = time.perf_counter() - t0
    result = {"status": "ok", "seconds": seconds, "outputs": {}, "kernels_launched": lib.launched()}
    if task.get("memcpy_only"):
        return result
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, arr in bufs.outputs.items():
        path = out_dir / f"{name}.npy"
        np.save(path, arr.get())
        result["outputs"][name] = path.name
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


class TimingSession:
    """Timed calls of one or more libraries on shared buffers, driven one sample at a time.

    The parent interleaves samples across workers (the baselines run in a worker of their own)
    and decides when to stop. Each sample gets fresh inputs, NaN-filled outputs, a flushed L2
    and no persisting L2 lines; it is timed with events on the legacy stream and bounded by the
    wall clock up to a device-wide synchronize, so work left on another stream or deferred past
    the return still counts.
    """

    def __init__(self, cp, task: dict):
        self.cp = cp
        self.params = task["params"]
        self.problem = _load_problem(task["problem"])
        self.libs = {n: library(path, task["launcher"]) for n, path in task["libs"].items()}
        self.seed = int(task["seed"])
        fresh = self.problem.generate(self.params, self.seed, cp)
        host = {k: cp.asnumpy(v) if not isinstance(v, np.ndarray) else v for k, v in fresh.items()}
        self.bufs = Buffers(cp, task["launcher"], self.params, host, 0)
        self.pristine = {k: v.copy() for k, v in self.bufs.inputs.items()}  # the grader's own copy
        self.device = device_info(cp)
        if task.get("measure_copy"):
            self.device["copy_gbps"] = measure_copy_bandwidth(cp)
        self.flush = cp.empty(max(2 * self.device["l2_bytes"], 16 << 20) // 4, dtype=cp.int32)
        self.start, self.end = cp.cuda.Event(), cp.cuda.Event()
        self.count = 0
        self.tampered: set[str] = set()

    def _refill(self) -> None:
        cp = self.cp
        self.count += 1
        new = self.problem.generate(self.params, (self.seed + 7919 * self.count) % (1 << 32), cp)
        for name, value in new.items():
            target, copy = self.bufs.inputs[name], self.pristine[name]
            if isinstance(target, np.ndarray):
                target[...] = cp.asnumpy(value) if not isinstance(value, np.ndarray) else value
            else:
                target[...] = cp.asarray(value)  # a generator may return numpy arrays
            copy[...] = target
        for out in self.bufs.outputs.values():
            out.fill(np.nan if out.dtype.kind == "f" else 0)

    def prepare(self, name: str) -> dict:
        """Everything before a timed call, as a task of its own: the grader times the call's
        round trip alone and bounds the reported time with it."""
        self._refill()
        self.flush.fill(self.count)
        self.libs[name].reset_l2()
        self.cp.cuda.Device().synchronize()
        return {"status": "ok"}

    def sample(self, name: str) -> dict:
        cp, lib = self.cp, self.libs[name]
        t0 = time.perf_counter()
        self.start.record()
        lib.call(self.bufs.args)
        self.end.record()
        self.end.synchronize()
        lib.check()  # device-wide synchronize: work left on other streams is waited for
        wall = (time.perf_counter() - t0) * 1e3
        ms = cp.cuda.get_elapsed_time(self.start, self.end)
        for key, value in self.bufs.inputs.items():
            same = np.array_equal(value, self.pristine[key]) if isinstance(value, np.ndarray) else bool(cp.array_equal(value, self.pristine[key]))
            if not same:
                self.tampered.add(key)
        return {"status": "ok", "ms": ms, "wall_ms": wall}

    def save(self, out_dir: Path) -> dict:
        """The inputs (the grader's copy) and outputs of the last call, for the parent to check."""
        inputs, outputs = {}, {}
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, value in self.pristine.items():
            inputs[name] = f"timed_input_{name}.npy"
            np.save(out_dir / inputs[name], value if isinstance(value, np.ndarray) else value.get())
        for name, value in self.bufs.outputs.items():
            outputs[name] = f"timed_output_{name}.npy"
            np.save(out_dir / outputs[name], value.get())
        return {"status": "ok", "check_inputs": inputs, "check_outputs": outputs, "inputs_modified": sorted(self.tampered)}


_TIMING: dict[str, TimingSession] = {}


def run_timing(cp, task: dict) -> dict:
    kind = task["kind"]
    if kind == "timing_open":
        _TIMING.clear()
        session = _TIMING["open"] = TimingSession(cp, task)
        return {"status": "ok", "device": session.device}
    session = _TIMING.get("open")
    if session is None:
        return {"status": "worker_error", "error": "no timing session is open"}
    if kind == "timing_prepare":
        return session.prepare(task["lib"])
    if kind == "timing_sample":
        return session.sample(task["lib"])
    result = session.save(Path(task["out_dir"]))  # timing_close
    _TIMING.clear()
    return result


def run_task(cp, task: dict) -> dict:
    try:
        if task["kind"] == "case":
            return run_case(cp, task)
        if task["kind"].startswith("timing_"):
            return run_timing(cp, task)
        return {"status": "worker_error", "error": f"unknown task kind {task['kind']!r}"}
    except StudentCudaError as exc:
        return {"status": "cuda_error", "error": str(exc), "sticky": exc.sticky}
    except Exception as exc:
        if _out_of_memory(cp, exc):
            return {"status": "out_of_memory", "error": _memory_left(cp)}
        return {"status": "worker_error", "error": traceback.format_exc()}


def _out_of_memory(cp, exc: Exception) -> bool:
    """The grader's own allocation failed: the GPU's memory is taken (by the student's code)."""
    if isinstance(exc, cp.cuda.memory.OutOfMemoryError):
        return True
    runtime_error = getattr(cp.cuda.runtime, "CUDARuntimeError", ())
    return isinstance(exc, runtime_error) and getattr(exc, "status", None) == 2  # cudaErrorMemoryAllocation


def _memory_left(cp) -> str:
    gib = 1 << 30
    try:
        free, total = cp.cuda.runtime.memGetInfo()
        ours = cp.get_default_memory_pool().total_bytes()
    except Exception:
        return "your code left no free GPU memory for the next case (free what you allocate with cudaFree)"
    held = max(0, total - free - ours)
    return (f"your code left no free GPU memory: {held / gib:.1f} GiB of {total / gib:.1f} GiB held after it returned "
            f"({free / gib:.2f} GiB free); free what you allocate with cudaFree before the launcher returns")


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
        confine()
    except Exception as exc:
        send({"event": "startup_failed", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"event": "ready"})
    tasks = os.fdopen(int(os.environ["GRADER_TASK_FD"]), "r", encoding="utf-8")
    for line in tasks:
        task = json.loads(line)
        if task.get("kind") == "quit":
            return 0
        result = run_task(cp, task)
        sys.stdout.flush()
        send({"event": "result", "id": task.get("id"), **result})
        if result.get("sticky") or result["status"] == "out_of_memory":
            return 0  # the CUDA context is broken or full: the parent starts a fresh worker
    return 0


def one_shot(job_path: str, result_path: str) -> int:
    task = json.loads(Path(job_path).read_text())
    # no warm-up kernel: under a profiler or sanitizer only the student's kernels should run
    cp = _import_cupy(bool(os.environ.get("GRADER_NO_POOL")), warm_up=False)
    confine()
    result = run_task(cp, task)
    Path(result_path).write_text(json.dumps(result))
    return 0


def confine() -> None:
    """What every worker does once CUDA is up and before student code is loaded."""
    forbid_new_processes()
    enter_landlock_domain()


# Landlock (Linux 5.13+): a process in a domain cannot ptrace, read the memory of, or open the
# files of any process outside it (ptrace access checks guard /proc/PID/mem and /proc/PID/fd).
_LANDLOCK_CREATE_RULESET, _LANDLOCK_RESTRICT_SELF = 444, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_MAKE_CHAR, _MAKE_BLOCK = 1 << 6, 1 << 11  # the rights the ruleset handles (and grants nowhere)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(0, int(version))


def enter_landlock_domain() -> bool:
    """Put this process in a Landlock domain of its own; False where the kernel has no Landlock."""
    if landlock_abi() < 1:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    handled = ctypes.c_uint64(_MAKE_CHAR | _MAKE_BLOCK)  # struct landlock_ruleset_attr, first field only
    fd = libc.syscall(_LANDLOCK_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if fd < 0:
        return False
    try:
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return False
        return libc.syscall(_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)


def close_tool_log() -> None:
    """Close the profiler's log pipe inherited from it (``GRADER_CLOSE_FD=fd:inode``): only the
    profiler may write the report the grader reads."""
    spec = os.environ.pop("GRADER_CLOSE_FD", "")
    fd_text, _, inode = spec.partition(":")
    if not fd_text.isdigit():
        return
    try:
        if str(os.fstat(int(fd_text)).st_ino) == inode:
            os.close(int(fd_text))
    except OSError:
        pass


def private_kernel_cache() -> None:
    """Start from a copy of the grader's CuPy kernel cache (``GRADER_CUPY_SEED``), never the cache itself."""
    seed = os.environ.pop("GRADER_CUPY_SEED", "")
    if not seed:
        return
    import shutil
    import tempfile

    own = tempfile.mkdtemp(prefix="cupy-kernels-")
    if os.path.isdir(seed):
        shutil.copytree(seed, own, dirs_exist_ok=True, symlinks=True)
    os.environ["CUPY_CACHE_DIR"] = own


def limit_self() -> None:
    """Cap the size of every file this process writes (runaway prints) and disable core dumps."""
    limit = int(os.environ.get("GRADER_FILE_LIMIT_BYTES", "0") or 0)
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


# seccomp: after CUDA is up, the process may start threads but no new processes (a fork bomb,
# system(), popen() all fail with EAGAIN). RLIMIT_NPROC cannot do this: root is exempt from it.
_AUDIT_ARCH = {"x86_64": (0xC000003E, {"clone": 56, "fork": 57, "vfork": 58, "clone3": 435}),
               "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435})}
_CLONE_THREAD = 0x00010000


def seccomp_program(arch: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: threads yes, new processes no."""
    audit, nr = _AUDIT_ARCH[arch]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    errno = 0x00050000
    # (code, jump if true, jump if false, k) with jumps as labels; None falls through
    code = [
        (ld, None, None, 4),  # seccomp_data.arch
        (jeq, None, "eperm", audit),  # another ABI (int 0x80 on x86_64): refused
        (ld, None, None, 0),  # seccomp_data.nr
        (jge, "eperm", None, 0x40000000),  # x32 system calls: refused
        (jeq, "enosys", None, nr["clone3"]),  # flags hide behind a pointer; glibc falls back to clone
        *[(jeq, "eagain", None, nr[n]) for n in ("fork", "vfork") if n in nr],
        (jeq, None, "allow", nr["clone"]),
        (ld, None, None, 16),  # low word of args[0]: the clone flags
        (jset, "allow", "eagain", _CLONE_THREAD),
    ]
    labels = {"allow": 0x7FFF0000, "eagain": errno | 11, "enosys": errno | 38, "eperm": errno | 1}
    where = {name: len(code) + i for i, name in enumerate(labels)}
    out = []
    for pc, (op, jt, jf, k) in enumerate(code):
        out.append((op, where[jt] - pc - 1 if jt else 0, where[jf] - pc - 1 if jf else 0, k))
    out += [(ret, 0, 0, value) for value in labels.values()]
    return out


def forbid_new_processes() -> bool:
    """Install the filter on every thread of this process; False where that is not possible."""
    import platform

    arch = platform.machine()
    if arch not in _AUDIT_ARCH or not sys.platform.startswith("linux"):
        return False

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    insns = seccomp_program(arch)
    array = (SockFilter * len(insns))(*[SockFilter(*i) for i in insns])
    fprog = SockFprog(len(insns), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    sys_seccomp = {"x86_64": 317, "aarch64": 277}[arch]
    # SECCOMP_SET_MODE_FILTER with SECCOMP_FILTER_FLAG_TSYNC: CUDA's threads get it too
    return libc.syscall(sys_seccomp, 1, 1, ctypes.byref(fprog)) == 0


def main(argv: list[str]) -> int:
    close_tool_log()
    limit_self()
    private_kernel_cache()
    if argv[:1] == ["--serve"]:
        return serve()
    if len(argv) == 4 and argv[0] == "--job" and argv[2] == "--result":
        return one_shot(argv[1], argv[3])
    print("usage: python -m grader.worker --serve | --job JOB.json --result RESULT.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
