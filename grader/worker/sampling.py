"""Timed calls, one sample at a time, driven by the grader (which interleaves the workers)."""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import json
import secrets
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Union

import numpy as np

from .buffers import Allocator, Buffers, Library, library
from .device import device_info, measure_copy_bandwidth
from .owned import Mapped, Owned, save_array
from .protocol import Kind, Reply, Status, Task


def load_problem(path: str) -> ModuleType:
    """The lab's generator module, loaded from its file (the sandbox shows it read-only)."""
    spec = importlib.util.spec_from_file_location("grader_worker_problem", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the lab's generator from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Overlay:
    """A module as another sees it: ``overrides`` first, the rest from ``base``."""

    def __init__(self, base: Any, **overrides: Any):
        self._base = base
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


def drawing_xp(cp: Any) -> Any:
    """CuPy as a lab's ``generate`` sees it in the timing: its ``random.RandomState`` draws from
    Philox. The timing draws fresh inputs with a new seed before every timed call; CuPy's default
    generator, XORWOW, sets up a state per subsequence for every new seed, and the counter-based
    Philox has none to set up (on an H200, a new seed and 1 K values: 0.26 ms against 0.44; 64 M
    values: 1.73 ms against 2.38). Which generator draws them matters to no verdict: the timed
    output is checked against inputs the trusted worker saved, and every session of a seed
    draws alike."""
    philox = functools.partial(cp.random.RandomState, method=cp.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)
    return _Overlay(cp, random=_Overlay(cp.random, RandomState=philox))


#: How long a timing gate holds the stream before it opens by itself (see ``Gate``).
GATE_TIMEOUT_S = 0.005

_GATE_SOURCE = r"""
extern "C" __global__ void timing_gate(volatile int* flags, long long timeout_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        if (flags[0]) return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)timeout_ns);
    flags[1] = 1;
}
"""


class Gate:
    """A one-thread kernel that holds the legacy stream shut until the host opens it.

    Queued before the start event, it lets the start event and everything the launcher queues
    reach the GPU together once it opens: the events then time the GPU's work, not the host's
    latency in queueing it (tens of microseconds through Python, ctypes and the runtime, against
    kernels of 100 us). A launcher that waits for the GPU itself keeps the gate shut until
    ``GATE_TIMEOUT_S``; ``expired`` says so, and the grader then times without a gate.
    """

    def __init__(self, cp: Any):
        rt = cp.cuda.runtime
        self.kernel = cp.RawKernel(_GATE_SOURCE, "timing_gate")
        self.ptr = rt.hostAlloc(2 * ctypes.sizeof(ctypes.c_int), rt.hostAllocMapped)  # same address on the GPU (UVA)
        self.flags = (ctypes.c_int * 2).from_address(self.ptr)
        self.timeout_ns = np.int64(GATE_TIMEOUT_S * 1e9)
        self.hold()  # compiled now, not inside a timed call
        self.open()
        cp.cuda.Device().synchronize()

    def hold(self) -> None:
        self.flags[0] = self.flags[1] = 0
        self.kernel((1,), (1,), (np.uint64(self.ptr), self.timeout_ns))  # on the legacy stream, as the events

    def open(self) -> None:
        self.flags[0] = 1

    @property
    def expired(self) -> bool:
        return bool(self.flags[1])


_DIFFER_SOURCE = r"""
extern "C" __global__ void bytes_differ(const unsigned char* a, const unsigned char* b, unsigned long long n, int* differ) {
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        if (a[i] != b[i]) {
            *differ = 1;
            return;
        }
    }
}
"""


class ByteCompare:
    """Whether two device arrays hold the same bytes, by a kernel of its own.

    ``cupy.array_equal`` is a reduction whose first compilation takes about 7 s on an empty
    kernel cache (H100 host), and it calls two NaNs different; this kernel compiles in a tenth of
    a second, and the same bytes are the same input."""

    def __init__(self, cp: Any):
        self.cp = cp
        self.kernel = cp.RawKernel(_DIFFER_SOURCE, "bytes_differ")
        self.flag = cp.zeros(1, dtype=cp.int32)

    def same(self, a: Any, b: Any) -> bool:
        if a.nbytes != b.nbytes or a.dtype != b.dtype:
            return False
        if a.nbytes == 0:
            return True
        cp = self.cp
        a, b = cp.ascontiguousarray(a), cp.ascontiguousarray(b)
        self.flag.data.memset(0, self.flag.nbytes)
        blocks = min((a.nbytes + 255) // 256, 4096)
        self.kernel((blocks,), (256,), (a, b, np.uint64(a.nbytes), self.flag))
        return not int(self.flag.get()[0])


class TimedInputs:
    """The buffers of timed calls and their inputs: fresh ones before every call, checked
    unchanged after it, the last call's outputs saved at the close.

    The baselines' session holds one; so does the trusted worker for a student's calls, in
    memory it shares with the student's worker (``allocate``): what those calls ran on and left
    is then read here, where no student code runs."""

    def __init__(self, cp: Any, task: Task, l2_bytes: int, allocate: Allocator | None = None):
        self.cp, self.xp = cp, drawing_xp(cp)
        self.params = task["params"]
        self.problem = load_problem(task["problem"])
        self.seed = int(task["seed"])
        fresh = self.problem.generate(self.params, self.seed, self.xp)
        host = {k: cp.asnumpy(v) if not isinstance(v, np.ndarray) else v for k, v in fresh.items()}
        self.bufs = Buffers(cp, task["launcher"], self.params, host, 0, allocate=allocate)
        self.pristine = {k: v.copy() for k, v in self.bufs.inputs.items()}  # the grader's own copy
        self.flush = cp.zeros(max(2 * l2_bytes, 16 << 20) // 4, dtype=cp.int32)
        self.count = 0
        self.tampered: set[str] = set()
        self.compare = ByteCompare(cp)
        # once before any timed call: the comparison's GPU kernels are compiled now (the worker's
        # kernel cache starts empty), not inside the first call's round trip, which bounds its time
        self._modified_inputs()

    def rewind(self) -> None:
        """Start again from the first inputs: the sequence a fresh session would time."""
        self.count = 0
        self.tampered = set()

    def generated(self, count: int) -> dict[str, Any]:
        """The inputs of the call after ``count`` refills: any session of the same seed makes the same."""
        return dict(self.problem.generate(self.params, (self.seed + 7919 * count) % (1 << 32), self.xp))

    def refill(self) -> None:
        """Check the last call left its inputs alone, then fresh inputs, NaN-filled outputs and a
        flushed L2 (read twice its size: it is left holding clean lines; written ones, a fill,
        were written back during the timed call, 8% of a 0.1 ms kernel on an H100)."""
        cp = self.cp
        self.tampered |= self._modified_inputs()
        self.count += 1
        new = self.generated(self.count)
        for name, value in new.items():
            target, copy = self.bufs.inputs[name], self.pristine[name]
            if isinstance(target, np.ndarray):
                target[...] = cp.asnumpy(value) if not isinstance(value, np.ndarray) else value
            else:
                target[...] = cp.asarray(value)  # a generator may return numpy arrays
            copy[...] = target
        for out in self.bufs.outputs.values():
            out.fill(np.nan if out.dtype.kind == "f" else 0)
        self.flush.sum()

    def _modified_inputs(self) -> set[str]:
        return {key for key, value in self.bufs.inputs.items()
                if not (value.tobytes() == self.pristine[key].tobytes() if isinstance(value, np.ndarray)
                        else self.compare.same(value, self.pristine[key]))}

    def save(self, out_dir: Path) -> Reply:
        """The outputs of the last call and the inputs it was given, for the parent's check."""
        self.cp.cuda.Device().synchronize()
        self.tampered |= self._modified_inputs()
        outputs, inputs = {}, {}
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, value in self.bufs.outputs.items():
            outputs[name] = f"timed_output_{name}.npy"
            save_array(out_dir / outputs[name], value.get())
        for name, value in self.pristine.items():
            inputs[name] = f"timed_input_{name}.npy"
            save_array(out_dir / inputs[name], value if isinstance(value, np.ndarray) else value.get())
        return {"status": Status.OK.value, "check_outputs": outputs, "check_inputs": inputs, "inputs_modified": sorted(self.tampered)}


class TimedCalls:
    """Timed calls of one or more libraries on given arguments, one sample at a time.

    Each call is timed with events on the legacy stream (behind a ``Gate`` unless the grader
    turned it off) and bounded by the wall clock up to a device-wide synchronize, so work left on
    another stream or deferred past the return still counts."""

    def __init__(self, cp: Any, libs: dict[str, Library], args: list[Any]):
        self.cp, self.libs, self.args = cp, libs, args
        self.start, self.end = cp.cuda.Event(), cp.cuda.Event()
        self.gate: Gate | None = None
        self.no_gate = ""  # why there is no gate
        try:
            self.gate = Gate(cp)
        except Exception as exc:  # timed without one, as the grader then times every kernel
            self.no_gate = f"unavailable: {type(exc).__name__}: {exc}"

    def sample(self, name: str, gated: bool) -> Reply:
        """One timed call. Behind a gate, the wall clock runs from the gate's opening (the work
        starts then); without one, from the call."""
        cp, lib = self.cp, self.libs[name]
        gate = self.gate if gated else None
        if gate is not None:
            gate.hold()
        self.start.record()
        t0 = time.perf_counter()
        lib.call(self.args)
        self.end.record()
        if gate is not None:
            t0 = time.perf_counter()
            gate.open()
        self.end.synchronize()
        lib.check()  # device-wide synchronize: work left on other streams is waited for
        wall = (time.perf_counter() - t0) * 1e3
        ms = cp.cuda.get_elapsed_time(self.start, self.end)
        if gate is not None:
            state = "expired" if gate.expired else "held"
        else:
            state = self.no_gate if gated else "off"
        return {"status": Status.OK.value, "ms": ms, "wall_ms": wall, "gate": state}


class TimingSession:
    """The baselines' timing: their inputs and their calls in one (trusted) process."""

    def __init__(self, cp: Any, task: Task):
        self.cp = cp
        self.device = device_info(cp)
        if task.get("measure_copy"):
            self.device["copy_gbps"] = measure_copy_bandwidth(cp)
        self.timed = TimedInputs(cp, task, self.device["l2_bytes"])
        self.libs = {n: library(path, task["launcher"]) for n, path in task["libs"].items()}
        self.calls = TimedCalls(cp, self.libs, self.timed.bufs.args)

    def rewind(self) -> None:
        self.timed.rewind()

    def prepare(self, name: str) -> Reply:
        """Everything before a timed call, as a task of its own: the grader times the call's
        round trip alone and bounds the reported time with it."""
        self.timed.refill()
        self.libs[name].reset_l2()
        self.cp.cuda.Device().synchronize()
        return {"status": Status.OK.value}

    def sample(self, name: str, gated: bool) -> Reply:
        return self.calls.sample(name, gated)

    def close(self, out_dir: Path | None) -> Reply:
        return self.timed.save(out_dir) if out_dir else {"status": Status.OK.value}


class SharedTiming:
    """(Trusted worker.) The buffers of a student's timed calls, shared with the student's worker:
    refilled here before each call, read here at the close."""

    def __init__(self, cp: Any, task: Task):
        self.cp = cp
        self.owned = Owned(cp)
        try:
            self.timed = TimedInputs(cp, task, device_info(cp)["l2_bytes"], allocate=self.owned.allocate)
            cp.cuda.Device().synchronize()
        except BaseException:
            self.owned.release()
            raise
        self.share = secrets.token_hex(8)

    def rewind(self) -> None:
        self.timed.rewind()

    def opened(self) -> Reply:
        return {"status": Status.OK.value, "share": self.share, "buffers": list(self.owned.described), "_fds": self.owned.fds()}

    def prepare(self, name: str) -> Reply:
        self.timed.refill()
        self.cp.cuda.Device().synchronize()
        return {"status": Status.OK.value}

    def sample(self, name: str, gated: bool) -> Reply:
        return {"status": Status.WORKER_ERROR.value, "error": "the trusted worker does not call a student's library"}

    def close(self, out_dir: Path | None) -> Reply:
        try:
            return self.timed.save(out_dir) if out_dir else {"status": Status.OK.value}
        finally:
            del self.timed
            self.owned.release()


class MappedTiming:
    """(Student's worker.) Timed calls of the student's library on buffers the trusted worker
    shares and refills; nothing about them is reported from here."""

    def __init__(self, cp: Any, task: Task):
        self.cp = cp
        self.device = device_info(cp)
        self.mapped = Mapped(task["share"], task["buffers"], int(cp.cuda.Device().id))
        libs = {n: library(path, task["launcher"]) for n, path in task["libs"].items()}
        self.calls = TimedCalls(cp, libs, self.mapped.args(task["launcher"], task["params"], 0))

    def rewind(self) -> None:
        pass

    def prepare(self, name: str) -> Reply:
        """After the trusted worker's refill: persisting L2 lines reset, and the GPU switched to this
        process's context before the timed call's round trip starts (the switch takes time)."""
        self.calls.libs[name].reset_l2()
        self.cp.cuda.Device().synchronize()
        return {"status": Status.OK.value}

    def sample(self, name: str, gated: bool) -> Reply:
        return self.calls.sample(name, gated)

    def close(self, out_dir: Path | None) -> Reply:
        self.cp.cuda.Device().synchronize()
        self.mapped.release()
        return {"status": Status.OK.value}


Session = Union[TimingSession, SharedTiming, MappedTiming]


#: Open timing sessions by key (a task's ``session``): a trusted worker that times the baselines
#: of every lab keeps each lab's open, with what it was opened with.
_TIMING: dict[str, tuple[str, Session]] = {}


def _session(cp: Any, task: Task) -> Session:
    if task.get("export"):
        return SharedTiming(cp, task)
    if task.get("share"):
        return MappedTiming(cp, task)
    return TimingSession(cp, task)


def run_timing(cp: Any, task: Task) -> Reply:
    kind, key = task["kind"], str(task.get("session", ""))
    if kind == Kind.TIMING_OPEN.value:
        opened_with = json.dumps({k: task.get(k) for k in ("libs", "launcher", "params", "problem", "seed", "export", "share")},
                                 sort_keys=True)
        kept = _TIMING.get(key)
        if kept is not None and kept[0] == opened_with and isinstance(kept[1], TimingSession):
            kept[1].rewind()  # the same inputs from the start again, nothing generated or loaded
        else:
            old = _TIMING.pop(key, None)  # its GPU memory is freed before the new one takes its own
            if old is not None:
                old[1].close(None)
            kept = _TIMING[key] = (opened_with, _session(cp, task))
        session = kept[1]
        if isinstance(session, SharedTiming):
            return session.opened()
        return {"status": Status.OK.value, "device": session.device}
    current = _TIMING.get(key)
    if current is None:
        return {"status": Status.WORKER_ERROR.value, "error": "no timing session is open"}
    if kind == Kind.TIMING_PREPARE.value:
        return current[1].prepare(task["lib"])
    if kind == Kind.TIMING_SAMPLE.value:
        return current[1].sample(task["lib"], bool(task.get("gated", True)))
    del _TIMING[key]  # timing_close: with no out_dir, the session is only released
    return current[1].close(Path(task["out_dir"]) if task.get("out_dir") else None)
