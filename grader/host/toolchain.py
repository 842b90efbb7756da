"""Finding the CUDA tools: nvcc, cuobjdump (with nvdisasm) and ncu."""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


def _candidates(name: str) -> list[Path]:
    dirs: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "bin")
    dirs += [Path("/usr/local/cuda/bin")]
    # pip wheels such as nvidia-cuda-cuobjdump install their binaries under nvidia/cu*/bin
    for entry in sys.path:
        dirs += [Path(p) for p in glob.glob(os.path.join(entry, "nvidia", "cu*", "bin"))]
    if name == "ncu":
        dirs += [Path(p) for p in sorted(glob.glob("/opt/nvidia/nsight-compute/*"), reverse=True)]
        dirs += [Path(p) for p in sorted(glob.glob("/usr/local/cuda/nsight-compute*"), reverse=True)]
    return [d / name for d in dirs]


@functools.lru_cache(maxsize=None)
def find(name: str) -> Path | None:
    """Path of a CUDA tool, or None. ``GRADER_<NAME>`` overrides (e.g. GRADER_NCU=/path/ncu)."""
    override = os.environ.get(f"GRADER_{name.upper().replace('-', '_')}")
    if override:
        return Path(override) if Path(override).exists() else None
    found = shutil.which(name)
    if found:
        return Path(found)
    for cand in _candidates(name):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def tool_env() -> dict[str, str]:
    """Environment for cuobjdump: it needs nvdisasm on PATH for SASS."""
    env = dict(os.environ)
    nvdisasm = find("nvdisasm")
    if nvdisasm is not None:
        env["PATH"] = f"{nvdisasm.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str:
    nvcc = find("nvcc")
    if nvcc is None:
        return "none"
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


@functools.lru_cache(maxsize=None)
def toolkit_root(nvcc: Path) -> Path:
    """The CUDA toolkit's own folder, by its real path, for ``nvcc`` (which may be a link or a
    wrapper script such as ``/usr/local/bin/nvcc``): what nvcc itself reports as its home
    (``-dryrun`` prints ``_HERE_=<toolkit>/bin``), else the folder above the resolved program."""
    fallback = nvcc.resolve().parent.parent
    try:
        done = subprocess.run([str(nvcc), "-dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return fallback
    m = re.search(r"^#\$ _HERE_=(.+)$", done.stdout + done.stderr, re.MULTILINE)
    here = Path(m.group(1).strip()).resolve() if m else None
    return here.parent if here is not None and (here / "nvcc").is_file() else fallback


def identity(name: str) -> str | None:
    """What tells one build of tool ``name`` from another, for results kept between runs: its
    path, size and modification time (None where it is missing)."""
    exe = find(name)
    try:
        stat = exe.resolve().stat() if exe is not None else None
    except OSError:
        return None
    return f"{exe}|{stat.st_size}|{stat.st_mtime_ns}" if stat is not None else None
