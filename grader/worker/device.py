"""What the worker reports about its GPU: name, capability, peaks and achieved copy bandwidth."""

from __future__ import annotations

import os
from typing import Any

from .protocol import first_visible_device

FP32_CORES_PER_SM = {(7, 5): 64, (8, 0): 64}  # every later architecture has 128


def device_info(cp: Any) -> dict[str, Any]:
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
            h = pynvml.nvmlDeviceGetHandleByIndex(first_visible_device(os.environ.get("CUDA_VISIBLE_DEVICES")))
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


def measure_copy_bandwidth(cp: Any) -> float:
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
    return round(2 * n * 4 / (float(best) / 1e3) / 1e9, 1)
