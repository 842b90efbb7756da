"""How long a CUDA context takes to start, alone and with others starting at once, on one GPU and
spread over every GPU: the driver starts a host's contexts largely one at a time, and each student
a lane grades starts about ten (a worker per lab, a compute-sanitizer run per tool, the profiler's
worker), so lanes on different GPUs wait for one another's starts.

    python benchmarks/context_starts.py [--at-once 8] [--rounds 2] [--env NAME=VALUE ...] [--driver]

Each process sees one GPU (``CUDA_VISIBLE_DEVICES``), imports CuPy, then times its first
allocation and synchronize (the context's start). Prints, per arrangement, the seconds each
process's start took: min, median and max over the processes of every round. Where
compute-sanitizer is found, a last arrangement starts the processes spread over the GPUs beside
one racecheck run of the same program on each GPU (as a student's workers start beside its tool
runs) and times the plain ones.

What a start costs, and what shortens it: ``--driver`` times the driver's own calls instead
(``cuInit``, the primary context, a first allocation and synchronize, through ``ctypes``: no
CuPy), and each ``--env NAME=VALUE`` (repeatable; ``NAME=`` unsets it) runs every arrangement
again with that setting in each process's environment, on its own row: a setting that makes the
starts of 8 at once shorter is one a class's workers could take. The plain rows use this shell's
environment as it is, so they time the driver's default unless it sets otherwise; the grader's own
processes get ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (``grader.isolation.sandbox.CONTEXT_QUEUES``), which
``--env CUDA_DEVICE_MAX_CONNECTIONS=1`` times beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.host import toolchain  # noqa: E402
from grader.host.gpus import nvml_devices, seeing_only, visible  # noqa: E402

PROBE = ("import time, cupy\nt = time.perf_counter()\ncupy.zeros(1)\ncupy.cuda.Device().synchronize()\n"
         "print(time.perf_counter() - t)")
#: The driver's own calls, timed from ``cuInit`` to a first allocation's synchronize (no CuPy; the library
#: loaded first, as importing CuPy loads it before the other probe's clock starts).
DRIVER_PROBE = ("import ctypes, time\ncuda = ctypes.CDLL('libcuda.so.1')\nt = time.perf_counter()\n"
                "dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()\n"
                "calls = [('cuInit', (0,)), ('cuDeviceGet', (ctypes.byref(dev), 0)),\n"
                "         ('cuDevicePrimaryCtxRetain', (ctypes.byref(ctx), dev)), ('cuCtxSetCurrent', (ctx,)),\n"
                "         ('cuMemAlloc_v2', (ctypes.byref(ptr), ctypes.c_size_t(1))), ('cuCtxSynchronize', ())]\n"
                "for name, args in calls:\n"
                "    if getattr(cuda, name)(*args) != 0:\n"
                "        raise SystemExit(name + ' failed')\n"
                "print(time.perf_counter() - t)")


def environment(settings: list[str]) -> dict[str, str | None]:
    """``NAME=VALUE`` settings as a mapping (``NAME=``: unset); a setting without ``=`` is refused."""
    out: dict[str, str | None] = {}
    for item in settings:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueError(f"--env {item!r}: give NAME=VALUE (NAME= to unset it)")
        out[name] = value or None
    return out


def with_env(base: dict[str, str], extra: dict[str, str | None]) -> dict[str, str]:
    """``base`` with ``extra``'s settings made and its ``None`` ones removed."""
    env = {k: v for k, v in base.items() if k not in extra}
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def starts(gpus: list[int], beside: list[int] | None = None, tool: list[str] | None = None, probe: str = PROBE,
           env: dict[str, str | None] | None = None) -> list[float]:
    """Start one process per entry of ``gpus`` (the GPU it sees) at once; each one's seconds. With
    ``beside``, a process under ``tool`` (compute-sanitizer and its tool) starts on each of those
    GPUs at the same moment; only the plain processes' seconds are returned. ``env``: settings
    made (``None``: removed) in every process's environment."""
    launched = [([sys.executable, "-c", probe], g, True) for g in gpus]
    launched += [([*(tool or []), sys.executable, "-c", probe], g, False) for g in beside or []]
    procs = [(subprocess.Popen(cmd, env=with_env({**os.environ, **seeing_only(g)}, env or {}), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True), g, plain) for cmd, g, plain in launched]
    out = []
    for p, gpu, plain in procs:
        stdout, stderr = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"a context start failed on GPU {gpu}{'' if plain else ' under ' + ' '.join(tool or [])}: "
                             f"{(stderr or stdout).strip()[-300:]}")
        if plain:
            out.append(float(stdout.strip()))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at-once", type=int, default=8, help="processes started together (default 8)")
    p.add_argument("--rounds", type=int, default=2, help="times each arrangement is repeated (default 2)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="run every arrangement again with this setting (repeatable; NAME= unsets it)")
    p.add_argument("--driver", action="store_true", help="time the driver's calls (ctypes) instead of CuPy's first allocation")
    args = p.parse_args()
    variants: list[tuple[str, dict[str, str | None]]] = [("", {})]
    try:
        variants += [(f" [{item}]", environment([item])) for item in args.env]
    except ValueError as exc:
        p.error(str(exc))
    probe = DRIVER_PROBE if args.driver else PROBE
    gpus = [d.index for d in visible(nvml_devices(), os.environ.get("CUDA_VISIBLE_DEVICES"))]
    if not gpus:
        print("needs a CUDA GPU: NVML lists none (no driver, or CUDA_VISIBLE_DEVICES hides them all)")
        return 1
    n = args.at_once
    def spread(count: int) -> list[int]:
        return [gpus[k % len(gpus)] for k in range(count)]

    # (label, the GPUs of the plain starts, those of the racecheck starts beside them)
    arrangements: list[tuple[str, list[int], list[int] | None]] = [
        ("1 alone", [gpus[0]], None), (f"{n} at once on GPU {gpus[0]}", [gpus[0]] * n, None)]
    if len(gpus) > 1:
        arrangements += [(f"{n} at once over {len(gpus)} GPUs", spread(n), None), (f"{2 * n} at once over {len(gpus)} GPUs", spread(2 * n), None)]
    sanitizer = toolchain.find("compute-sanitizer")
    racecheck = [str(sanitizer), "--tool", "racecheck"] if sanitizer else None
    if racecheck:  # a student's tool runs start beside its workers: does a racecheck start hold the others up?
        arrangements.append((f"{n} over {len(gpus)} GPU(s) + racecheck", spread(n), gpus))
    print(f"CUDA context starts{' (the driver alone)' if args.driver else ''}, seconds per process; {len(gpus)} GPU(s) visible"
          + ("" if racecheck else "; no compute-sanitizer, so no starts beside racecheck"))
    for label, placed, beside in arrangements:
        for setting, env in variants:
            seconds = [s for _ in range(args.rounds) for s in starts(placed, beside, racecheck, probe, env)]
            print(f"{label + setting:<28} min {min(seconds):5.2f}  median {statistics.median(seconds):5.2f}  "
                  f"max {max(seconds):5.2f}  ({len(seconds)} starts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
