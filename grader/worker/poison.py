"""Shared memory filled with a pattern before each student call.

Shared memory is zero for the first kernel of a fresh CUDA context and keeps what the context's
earlier kernels left (measured on an H100: a histogram that never zeroed its shared bins was right
on the first call of a process and wrong on 9 of 10 later ones). So a kernel that reads shared
memory it never wrote is right or wrong by what ran before it. Filling every SM's shared memory
(two blocks per SM, each with half the SM's shared memory) makes such a read return the pattern:
as a float a quiet NaN, as an integer above two billion, so it cannot pass for a zero or a small
count. Repeated calls get different patterns.

Filled once before the call, another context's kernels can run between the fill and the
student's kernel, and the GPU clears shared memory when it switches contexts: while Nsight
Compute profiled another process, the unzeroed histogram passed some cases. So the fill also runs
from the support file's launch wrappers, on each launch's stream right before it (``arm``). Even
then a switch can fall between the fill and the kernel: right after each launch of a kernel that
uses shared memory, a check kernel counts the words that still hold a pattern, and where next to
none do (``cleared``) the grader runs the call again with other patterns.
"""

from __future__ import annotations

from typing import Any

_SOURCE = r"""
extern "C" __global__ void grader_shared_fill(unsigned int pattern, unsigned int words) {
    extern __shared__ unsigned int fill[];
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x)
        fill[i] = 0x7FC00000u | ((pattern + i * 2654435761u) & 0x003FFFFFu);
}

extern "C" __global__ void grader_shared_check(unsigned int words, unsigned int* found) {
    extern __shared__ unsigned int fill[];
    unsigned int n = 0;
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x)
        n += (fill[i] & 0xFFC00000u) == 0x7FC00000u;
    n = __reduce_add_sync(0xFFFFFFFFu, n);
    if ((threadIdx.x & 31) == 0 && n) atomicAdd(found, n);
}
"""
# cudaDeviceAttr values (stable across CUDA releases)
_SMS, _PER_SM, _OPTIN, _RESERVED = 16, 81, 97, 111
THREADS = 1024
#: Launches of a call checked (``cleared``); later ones go unchecked.
CHECKED_LAUNCHES = 256
#: A launch ran after a switch where fewer than this share of the filled words held a pattern after it.
CLEARED_BELOW = 1 / 64

_fill: dict[str, Any] = {}


def _prepared(cp: Any) -> tuple[Any, int, int]:
    """The fill kernel, the dynamic shared memory per block and the grid (for this device)."""
    if not _fill:
        rt = cp.cuda.runtime
        dev = cp.cuda.Device().id
        per_sm, optin = rt.deviceGetAttribute(_PER_SM, dev), rt.deviceGetAttribute(_OPTIN, dev)
        reserved = rt.deviceGetAttribute(_RESERVED, dev)
        per_block = min(optin, per_sm // 2 - reserved) // 16 * 16
        kernel, check = cp.RawKernel(_SOURCE, "grader_shared_fill"), cp.RawKernel(_SOURCE, "grader_shared_check")
        for k in (kernel, check):
            k.max_dynamic_shared_size_bytes = per_block
            k.preferred_shared_memory_carveout = 100
        _fill.update(kernel=kernel, check=check, bytes=per_block, blocks=2 * rt.deviceGetAttribute(_SMS, dev),
                     slots=cp.zeros(CHECKED_LAUNCHES, dtype=cp.uint32))
    return _fill["kernel"], int(_fill["bytes"]), int(_fill["blocks"])


def seed_kernels(cp: Any) -> None:
    """Compile this module's kernels (in a trusted worker, into the kernel cache that sandboxed
    workers start from a copy of: each of them runs the fill before its first call)."""
    _prepared(cp)


def arm(cp: Any, lib: Any, pattern: int | None) -> None:
    """Have the support file fill shared memory before each of the student's launches, on the
    launch's stream (``pattern``; None: no more), with this module's kernel."""
    if pattern is None:
        lib.fill_shared(None, 0, 0, 0, 0)
        lib.check_shared(None, None, 0)
        return
    kernel, per_block, blocks = _prepared(cp)
    if lib.fill_shared(kernel.kernel.ptr, blocks, THREADS, per_block, pattern & 0xFFFFFFFF) != 0:
        raise RuntimeError("the support file could not reach cuLaunchKernel to fill shared memory")
    slots = _fill["slots"]
    slots.fill(0)
    lib.check_shared(_fill["check"].kernel.ptr, slots.data.ptr, CHECKED_LAUNCHES)


def cleared(checked: int) -> int:
    """How many of the call's ``checked`` launches (``lib.shared_checks()`` before ``arm(..., None)``)
    ran on shared memory another context had cleared; read once the device is synchronized."""
    used = min(checked, CHECKED_LAUNCHES)
    if not used or not _fill:
        return 0
    found = _fill["slots"][:used].get()
    filled = int(_fill["blocks"]) * int(_fill["bytes"]) // 4
    return int((found < filled * CLEARED_BELOW).sum())


def fill_shared(cp: Any, pattern: int) -> None:
    """Write ``pattern``'s words over every SM's shared memory (queued on the current stream)."""
    kernel, per_block, blocks = _prepared(cp)
    kernel((blocks,), (THREADS,), (cp.uint32(pattern & 0xFFFFFFFF), cp.uint32(per_block // 4)), shared_mem=per_block)
