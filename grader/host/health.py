"""The health gate before timing: is the GPU fit to time a student's kernel?

Another process computing on the GPU, clocks slowed by heat or a hardware brake, or a GPU near
its slowdown temperature would make a student's kernel look slow. The gate samples the GPU
(NVML) until it is fit or ``max_wait_s`` has passed; the timing then goes ahead, and if the
GPU never became fit the report says why its speed checks were taken on a disturbed GPU.

The grader's own processes (the lane and everything it started: workers, baselines, profilers)
are not "other processes". PIDs that NVML reports but this PID namespace cannot see (a
container) cannot be told apart and are left out.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..labspec.spec import LabSpec

#: Clock event reasons that disturb timing (NVML bit values): heat and hardware brakes.
DISTURBING_REASONS = {0x8: "HwSlowdown", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown"}
#: Hot: within this many degrees of the GPU's slowdown temperature (or above HOT_C when unknown).
HOT_MARGIN_C = 5
HOT_C = 85


@dataclass(frozen=True)
class HealthSample:
    processes: tuple[int, ...] = ()  # PIDs computing on the GPU
    temperature_c: int | None = None
    slowdown_c: int | None = None
    clock_reasons: int = 0  # NVML clock event reasons (bit mask)


def disturbances(sample: HealthSample, ours: Callable[[int], bool | None]) -> list[str]:
    """What about the GPU would disturb a timing ([] when nothing). ``ours(pid)``: True for the
    grader's own processes, None when the PID cannot be looked up here."""
    found = []
    others = sorted(p for p in sample.processes if ours(p) is False)
    if others:
        shown = ", ".join(map(str, others[:5])) + (" ..." if len(others) > 5 else "")
        found.append(f"{len(others)} other process{'es' if len(others) > 1 else ''} on the GPU (PID {shown})")
    reasons = [name for bit, name in sorted(DISTURBING_REASONS.items()) if sample.clock_reasons & bit]
    if reasons:
        found.append(f"clocks slowed down ({', '.join(reasons)})")
    if sample.temperature_c is not None:
        limit = sample.slowdown_c - HOT_MARGIN_C if sample.slowdown_c else HOT_C
        if sample.temperature_c >= limit:
            slows = f", slows down at {sample.slowdown_c} C" if sample.slowdown_c else ""
            found.append(f"GPU at {sample.temperature_c} C{slows}")
    return found


def descendant_of(root: int, proc: str = "/proc") -> Callable[[int], bool | None]:
    """``ours(pid)``: whether ``pid`` is ``root`` or started (at any depth) by it; None when unknown."""
    def parent(pid: int) -> int | None:
        try:
            with open(f"{proc}/{pid}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
            return int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def ours(pid: int) -> bool | None:
        seen = 0
        current: int | None = pid
        while current is not None and seen < 64:
            if current == root:
                return True
            if current <= 1:
                return False
            current = parent(current)
            seen += 1
            if current is None:
                return None if seen == 1 else False
        return False

    return ours


class HealthGate:
    """A timing gate (see ``grader.engine.repo.TimingGate``) over a health sampler."""

    def __init__(self, sample: Callable[[], HealthSample], ours: Callable[[int], bool | None], max_wait_s: float = 60.0,
                 poll_s: float = 2.0, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sample, self.ours, self.max_wait_s, self.poll_s = sample, ours, max_wait_s, poll_s
        self.sleep, self.clock = sleep, clock
        self.waited_s = 0.0  # in all, for the run's statistics

    def __call__(self, spec: LabSpec | None = None) -> str:
        started = self.clock()
        while True:
            try:
                problems = disturbances(self.sample(), self.ours)
            except Exception:  # the health of the GPU cannot be read: time as before
                return ""
            waited = self.clock() - started
            if not problems:
                self.waited_s += waited
                return ""
            if waited >= self.max_wait_s:
                self.waited_s += waited
                return "; ".join(problems) + f" (still so after waiting {waited:.0f} s)"
            self.sleep(min(self.poll_s, max(0.0, self.max_wait_s - waited)))


def nvml_sampler(index: int) -> Callable[[], HealthSample]:
    """Samples of the GPU with this NVML index (NVML stays initialised for the lane's life)."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def attempt(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def sample() -> HealthSample:
        procs = attempt(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
        return HealthSample(
            processes=tuple(int(p.pid) for p in procs),
            temperature_c=attempt(lambda: int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))),
            slowdown_c=attempt(lambda: int(pynvml.nvmlDeviceGetTemperatureThreshold(
                handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))),
            clock_reasons=attempt(lambda: int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)))
            or attempt(lambda: int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))) or 0,
        )

    return sample


def lane_gate(index: int, max_wait_s: float, root: int | None = None) -> HealthGate | None:
    """The gate of the lane on GPU ``index`` (None where NVML cannot be used). The grader's own
    processes are those ``root`` started (default: this lane's): a class's process, whose lanes
    on one GPU hold contexts there that take turns with each timing (:mod:`grader.host.gputurns`)."""
    try:
        sampler = nvml_sampler(index)
    except Exception:
        return None
    return HealthGate(sampler, descendant_of(root or os.getpid()), max_wait_s)
