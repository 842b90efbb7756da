"""What GPU is here (from NVML or nvidia-smi, never from a CUDA context in the parent)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..worker.protocol import first_visible_device


@dataclass(frozen=True)
class GpuInfo:
    name: str
    compute_capability: tuple[int, int]
    driver: str
    index: int = 0
    uuid: str = ""  # "" where the driver did not say

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


def gpu_key(uuid: str) -> str:
    """A GPU's UUID as a file name: the same in every process on the machine ("" for none)."""
    return re.sub(r"[^A-Za-z0-9-]", "", uuid)[:64]


def key_of(gpu: GpuInfo | None) -> str:
    """``gpu_key`` of ``gpu``'s UUID ("" for no GPU, or one whose UUID is not known)."""
    return gpu_key(gpu.uuid) if gpu is not None else ""


@dataclass(frozen=True)
class GpuProbe:
    gpu: GpuInfo | None
    reason: str = ""  # why there is no GPU


def probe() -> GpuProbe:
    """Find the GPU that will be graded on; say why when there is none (or it cannot be used).

    A GPU found is remembered by the process (for the devices it may see): each probe started
    NVML (20-75 ms on an H200 host, under a profiler), and a repository's grade probed a dozen times. Where none was
    found, the next probe looks again. What changes as it runs is read by ``health``."""
    key = (os.getpid(), os.environ.get("GRADER_NO_GPU", ""), os.environ.get("CUDA_VISIBLE_DEVICES"))
    with _FOUND_LOCK:
        found = _FOUND.get(key)
    if found is not None:
        return found
    found = _probe_device()
    if found.gpu is not None and importlib.util.find_spec("cupy") is None:
        return GpuProbe(None, f"{found.gpu.name} found, but CuPy is not installed (pip install 'cuda-lab-grader[gpu]')")
    if found.gpu is not None:
        with _FOUND_LOCK:
            _FOUND[key] = found
    return found


_FOUND: dict[tuple[int, str, str | None], GpuProbe] = {}  # (process, $GRADER_NO_GPU, $CUDA_VISIBLE_DEVICES) -> the GPU found
_FOUND_LOCK = threading.Lock()


def _probe_device() -> GpuProbe:
    if os.environ.get("GRADER_NO_GPU"):
        return GpuProbe(None, "GPU checks disabled by GRADER_NO_GPU")
    index = first_visible_device(os.environ.get("CUDA_VISIBLE_DEVICES"))
    try:
        return _probe_nvml(index)
    except ImportError:
        pass
    except Exception as exc:  # NVML present but no driver or no device
        return GpuProbe(None, f"no CUDA GPU found (NVML: {exc})")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuProbe(None, "no CUDA GPU found (no NVIDIA driver: nvidia-smi is not installed)")
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,compute_cap,driver_version,uuid", "--format=csv,noheader", f"--id={index}"],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuProbe(None, f"no CUDA GPU found (nvidia-smi failed: {exc})")
    line = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    parts = [p.strip() for p in line.split(",")]
    if out.returncode != 0 or len(parts) != 4:
        return GpuProbe(None, f"no CUDA GPU found (nvidia-smi: {(out.stderr or out.stdout).strip()[:200]})")
    major, _, minor = parts[1].partition(".")
    return GpuProbe(GpuInfo(parts[0], (int(major), int(minor or 0)), parts[2], index, parts[3]))


def _probe_nvml(index: int) -> GpuProbe:
    import pynvml  # from nvidia-ml-py; optional

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else name
        cc = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        return GpuProbe(GpuInfo(name, (int(cc[0]), int(cc[1])), driver, index, uuid))
    finally:
        pynvml.nvmlShutdown()


@contextlib.contextmanager
def nvml() -> Iterator[Any]:
    """pynvml, started for the block and shut down after it; None where it is not installed or
    cannot start (no driver)."""
    try:
        import pynvml  # from nvidia-ml-py; optional

        pynvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def health(gpu: GpuInfo) -> dict[str, object]:
    """``gpu``'s clocks, temperature, throttle reasons and other processes now, recorded with each
    lab's grade; nothing where NVML cannot say."""
    with nvml() as pynvml:
        if pynvml is None:
            return {}
        try:
            return _health(pynvml, pynvml.nvmlDeviceGetHandleByIndex(gpu.index))
        except Exception:
            return {}


def _health(pynvml: Any, handle: Any) -> dict[str, object]:
    info: dict[str, object] = {}

    def attempt(key: str, fn: Callable[[], object]) -> None:
        try:
            info[key] = fn()
        except Exception:
            pass

    attempt("sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    attempt("max_sm_clock_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    attempt("mem_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM))
    attempt("temperature_c", lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
    attempt("utilization_pct", lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    attempt("other_processes", lambda: len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle)))

    def throttle() -> str:
        reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        names = [n for n in dir(pynvml) if n.startswith("nvmlClocksEventReason") and n != "nvmlClocksEventReasonNone"]
        active = sorted(
            n.replace("nvmlClocksEventReason", "")
            for n in names
            if isinstance(getattr(pynvml, n), int) and not n.endswith("All") and reasons & getattr(pynvml, n)
        )
        return ",".join(active) or "none"

    attempt("clock_event_reasons", throttle)
    return info
