"""Which GPUs a class run may use: those NVML lists, narrowed by ``CUDA_VISIBLE_DEVICES`` and by
``--gpus``. Each gets a lane of its own; the lane's processes see only that GPU.

Indices are NVML's (PCI bus order); a lane sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA
numbers the GPUs the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GraderError
from .gpu import gpu_key, nvml


@dataclass(frozen=True)
class GpuSlot:
    index: int  # NVML index
    uuid: str
    name: str
    compute_capability: tuple[int, int]

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    @property
    def key(self) -> str:
        """A name for this GPU that stays the same across processes (for its lock folder)."""
        return gpu_key(self.uuid) or f"index{self.index}"

    @property
    def lane(self) -> str:
        return f"gpu{self.index}"


def seeing_only(index: int) -> dict[str, str]:
    """The environment that makes CUDA in a process see only GPU ``index`` (NVML's numbering)."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(index)}


def nvml_devices() -> list[GpuSlot]:
    """Every GPU the driver reports ([] without NVML or a driver)."""
    with nvml() as pynvml:
        if pynvml is None:
            return []
        try:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name, uuid = pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h)
                cc = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                out.append(GpuSlot(i, uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                                   name.decode() if isinstance(name, bytes) else str(name), (int(cc[0]), int(cc[1]))))
            return out
        except Exception:
            return []


def visible(devices: list[GpuSlot], cuda_visible: str | None) -> list[GpuSlot]:
    """The devices ``CUDA_VISIBLE_DEVICES`` leaves visible, in its order (indices or UUID prefixes;
    like CUDA, the list ends at the first entry that names no device)."""
    if cuda_visible is None:
        return list(devices)
    out: list[GpuSlot] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        if entry.isdigit():
            found = [d for d in devices if d.index == int(entry)]
        elif entry.startswith("GPU-"):
            found = [d for d in devices if d.uuid.startswith(entry)]
        else:
            found = []
        if len(found) != 1 or found[0] in out:
            break
        out.append(found[0])
    return out


def select(devices: list[GpuSlot], wanted: str | None) -> list[GpuSlot]:
    """``--gpus``: ``all`` (default), ``none`` (grade on the CPU only), or positions among the
    visible GPUs (``0,2``)."""
    if wanted is None or wanted.strip().lower() == "all":
        return list(devices)
    if wanted.strip().lower() == "none":
        return []
    picked: list[GpuSlot] = []
    for part in wanted.split(","):
        part = part.strip()
        if not part.isdigit():
            raise GraderError(f"--gpus: expected all, none or GPU numbers such as 0,1, got {wanted!r}")
        k = int(part)
        if k >= len(devices):
            raise GraderError(f"--gpus: there is no GPU {k} here ({len(devices)} visible)")
        if devices[k] not in picked:
            picked.append(devices[k])
    return picked
