"""Shared memory filled with a pattern before each student call.

Shared memory is zero for the first kernel of a fresh CUDA context and keeps what the context's
earlier kernels left (measured on an H100: a histogram that never zeroed its shared bins was right
on the first call of a process and wrong on 9 of 10 later ones). So a kernel that reads shared
memory it never wrote is right or wrong by what ran before it. Filling every SM's shared memory
before the call (two blocks per SM, each with half the SM's shared memory) makes such a read
return the pattern every time: as a float a quiet NaN, as an integer above two billion, so it
cannot pass for a zero or a small count. Repeated calls get different patterns.
"""

from __future__ import annotations

from typing import Any

_SOURCE = r"""
extern "C" __global__ void grader_shared_fill(unsigned int pattern, unsigned int words) {
    extern __shared__ unsigned int fill[];
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x)
        fill[i] = 0x7FC00000u | ((pattern + i * 2654435761u) & 0x003FFFFFu);
}
"""
# cudaDeviceAttr values (stable across CUDA releases)
_SMS, _PER_SM, _OPTIN, _RESERVED = 16, 81, 97, 111
THREADS = 1024

_fill: dict[str, Any] = {}


def _prepared(cp: Any) -> tuple[Any, int, int]:
    """The fill kernel, the dynamic shared memory per block and the grid (for this device)."""
    if not _fill:
        rt = cp.cuda.runtime
        dev = cp.cuda.Device().id
        per_sm, optin = rt.deviceGetAttribute(_PER_SM, dev), rt.deviceGetAttribute(_OPTIN, dev)
        reserved = rt.deviceGetAttribute(_RESERVED, dev)
        per_block = min(optin, per_sm // 2 - reserved) // 16 * 16
        kernel = cp.RawKernel(_SOURCE, "grader_shared_fill")
        kernel.max_dynamic_shared_size_bytes = per_block
        kernel.preferred_shared_memory_carveout = 100
        _fill.update(kernel=kernel, bytes=per_block, blocks=2 * rt.deviceGetAttribute(_SMS, dev))
    return _fill["kernel"], int(_fill["bytes"]), int(_fill["blocks"])


def fill_shared(cp: Any, pattern: int) -> None:
    """Write ``pattern``'s words over every SM's shared memory (queued on the current stream)."""
    kernel, per_block, blocks = _prepared(cp)
    kernel((blocks,), (THREADS,), (cp.uint32(pattern & 0xFFFFFFFF), cp.uint32(per_block // 4)), shared_mem=per_block)
