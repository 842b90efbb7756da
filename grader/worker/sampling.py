"""Timed calls, one sample at a time, driven by the grader (which interleaves the workers)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from .buffers import Buffers, library
from .device import device_info, measure_copy_bandwidth
from .protocol import Kind, Reply, Status, Task


def load_problem(path: str) -> ModuleType:
    """The lab's generator module, loaded from its file (the sandbox shows it read-only)."""
    spec = importlib.util.spec_from_file_location("grader_worker_problem", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the lab's generator from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TimingSession:
    """Timed calls of one or more libraries on shared buffers, driven one sample at a time.

    The parent interleaves samples across workers (the baselines run in a worker of their own)
    and decides when to stop. Each sample gets fresh inputs, NaN-filled outputs, a flushed L2
    and no persisting L2 lines; it is timed with events on the legacy stream and bounded by the
    wall clock up to a device-wide synchronize, so work left on another stream or deferred past
    the return still counts.
    """

    def __init__(self, cp: Any, task: Task):
        self.cp = cp
        self.params = task["params"]
        self.problem = load_problem(task["problem"])
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
        # once before any timed call: the comparison's GPU kernels are compiled now (the worker's
        # kernel cache starts empty), not inside the first call's round trip, which bounds its time
        self._modified_inputs()

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

    def prepare(self, name: str) -> Reply:
        """Everything before a timed call, as a task of its own: the grader times the call's
        round trip alone and bounds the reported time with it."""
        self._refill()
        self.flush.fill(self.count)
        self.libs[name].reset_l2()
        self.cp.cuda.Device().synchronize()
        return {"status": Status.OK.value}

    def sample(self, name: str) -> Reply:
        cp, lib = self.cp, self.libs[name]
        t0 = time.perf_counter()
        self.start.record()
        lib.call(self.bufs.args)
        self.end.record()
        self.end.synchronize()
        lib.check()  # device-wide synchronize: work left on other streams is waited for
        wall = (time.perf_counter() - t0) * 1e3
        ms = cp.cuda.get_elapsed_time(self.start, self.end)
        self.tampered |= self._modified_inputs()
        return {"status": Status.OK.value, "ms": ms, "wall_ms": wall}

    def _modified_inputs(self) -> set[str]:
        cp = self.cp
        return {key for key, value in self.bufs.inputs.items()
                if not (np.array_equal(value, self.pristine[key]) if isinstance(value, np.ndarray)
                        else bool(cp.array_equal(value, self.pristine[key])))}

    def save(self, out_dir: Path) -> Reply:
        """The inputs (the grader's copy) and outputs of the last call, for the parent to check."""
        inputs, outputs = {}, {}
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, value in self.pristine.items():
            inputs[name] = f"timed_input_{name}.npy"
            np.save(out_dir / inputs[name], value if isinstance(value, np.ndarray) else value.get())
        for name, value in self.bufs.outputs.items():
            outputs[name] = f"timed_output_{name}.npy"
            np.save(out_dir / outputs[name], value.get())
        return {"status": Status.OK.value, "check_inputs": inputs, "check_outputs": outputs, "inputs_modified": sorted(self.tampered)}


_TIMING: dict[str, TimingSession] = {}


def run_timing(cp: Any, task: Task) -> Reply:
    kind = task["kind"]
    if kind == Kind.TIMING_OPEN.value:
        _TIMING.clear()
        opened = _TIMING["open"] = TimingSession(cp, task)
        return {"status": Status.OK.value, "device": opened.device}
    current = _TIMING.get("open")
    if current is None:
        return {"status": Status.WORKER_ERROR.value, "error": "no timing session is open"}
    if kind == Kind.TIMING_PREPARE.value:
        return current.prepare(task["lib"])
    if kind == Kind.TIMING_SAMPLE.value:
        return current.sample(task["lib"])
    result = current.save(Path(task["out_dir"]))  # timing_close
    _TIMING.clear()
    return result
