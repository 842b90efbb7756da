"""How processes share one GPU: what a class's seats find when they grade side by side.

    python benchmarks/gpu_sharing.py [--at-once 1,2,4,8] [--calls 400] [--spin-ms 20] [--host-only]

Three questions, each answered with small CUDA programs built here with the toolkit's nvcc:

- **Tool runs side by side.** N copies at once of a small program (20 launches of a kernel that
  uses shared memory), plain and under each compute-sanitizer tool the grader runs: the wall time
  and each copy's. (On an H100, racecheck took 2.4 s alone and 10.0 s for 8 at once, memcheck
  and synccheck 0.8 and 0.5 s alone and 1.8 s for 8: racecheck's runs largely go one at a time.)
- **A chatty process beside a busy one.** The round trip of a tiny kernel and a device
  synchronize (what each step of a correctness case pays, many times), alone, beside a process
  whose kernels spin on one SM for ``--spin-ms`` each, and beside racecheck runs of the small
  program. Kernels of separate processes take turns on a GPU without MPS: if a class's seats
  slow one another by time-slicing, the round trip beside a busy process grows from
  microseconds towards the other process's kernel time. (On an H100: 10.4 us alone, 2.38 ms
  beside 20 ms kernels, 2.40 ms beside racecheck runs. Run again with the GPU's multi-process
  service started by hand, ``nvidia-cuda-mps-control -d``: 10.1, 10.8 and 11.7 us.)
- **GPUs of one host** (where more than one is visible). The same N copies on the first GPU
  alone, then spread over every GPU (each copy's ``CUDA_VISIBLE_DEVICES`` naming one), and the
  chatty program's round trip on the first GPU beside racecheck runs on another. Where spreading
  does not shorten the wall time, the host runs them one at a time (its driver or its CPUs), and a
  class's lanes on separate GPUs slow one another (``context_starts.py`` times the contexts'
  starts alone).

Needs a CUDA GPU; without one it says so and exits 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.host import gpu, gpus, toolchain  # noqa: E402
from grader.host.procgroup import kill_group  # noqa: E402

TOOLS = ("memcheck", "synccheck", "racecheck")

SMALL = r"""
#include <cstdio>
__global__ void k(float* a, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? a[i] : 0.f;
  __syncthreads();
  if (i < n) a[i] = s[255 - threadIdx.x] + 1.f;
}
int main() {
  int n = 1 << 20; float* a;
  cudaMalloc(&a, n * sizeof(float)); cudaMemset(a, 0, n * sizeof(float));
  for (int r = 0; r < 20; ++r) k<<<(n + 255) / 256, 256>>>(a, n);
  cudaError_t e = cudaDeviceSynchronize();
  cudaFree(a);
  return e == cudaSuccess ? 0 : 1;
}
"""

CHATTY = r"""
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
__global__ void tiny(int* x) { if (threadIdx.x == 0) x[0] += 1; }
int main(int argc, char** argv) {
  int calls = argc > 1 ? atoi(argv[1]) : 400; int* x;
  cudaMalloc(&x, sizeof(int)); tiny<<<1, 32>>>(x); cudaDeviceSynchronize();
  std::vector<double> us(calls);
  for (int i = 0; i < calls; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    tiny<<<1, 32>>>(x);
    cudaDeviceSynchronize();
    us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  std::sort(us.begin(), us.end());
  printf("%.1f %.1f %.1f\n", us[calls / 2], us[calls * 9 / 10], us[calls - 1]);
  return 0;
}
"""

SPIN = r"""
#include <chrono>
#include <cstdlib>
__global__ void spin(long long cycles) { long long t = clock64(); while (clock64() - t < cycles) {} }
int main(int argc, char** argv) {
  double seconds = atof(argv[1]); long long cycles = atoll(argv[2]);
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) { spin<<<1, 32>>>(cycles); cudaDeviceSynchronize(); }
  return 0;
}
"""


def build(folder: Path, arch: str) -> dict[str, Path]:
    """The three programs, compiled for ``arch``."""
    nvcc = toolchain.find("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc not found: the programs cannot be built")
    out = {}
    for name, source in (("small", SMALL), ("chatty", CHATTY), ("spin", SPIN)):
        (folder / f"{name}.cu").write_text(source)
        subprocess.run([str(nvcc), "-O2", f"-arch={arch}", "-o", str(folder / name), str(folder / f"{name}.cu")], check=True)
        out[name] = folder / name
    return out


def on_gpu(index: int | None) -> dict[str, str] | None:
    """The environment of a process that sees only GPU ``index`` (NVML's numbering), or None: this one's."""
    if index is None:
        return None
    return {**os.environ, **gpus.seeing_only(index)}


def at_once(command: list[str], n: int, over: list[int] | None = None) -> tuple[float, list[float]]:
    """``n`` copies of ``command`` started together (spread over the GPUs ``over`` in turn, where given):
    the wall time, and each one's seconds."""
    started = time.monotonic()
    procs = [(time.monotonic(), subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                 env=on_gpu(over[k % len(over)] if over else None)))
             for k in range(n)]
    each = []
    for began, proc in procs:
        if proc.wait(timeout=600) != 0:
            raise SystemExit(f"{' '.join(command)} failed (exit {proc.returncode})")
        each.append(time.monotonic() - began)
    return time.monotonic() - started, sorted(each)


def round_trips(chatty: Path, calls: int, device: int | None = None) -> str:
    """The chatty program's round trips (on GPU ``device``, where given): median, 90th percentile and
    slowest, in microseconds."""
    done = subprocess.run([str(chatty), str(calls)], capture_output=True, text=True, timeout=600, check=True, env=on_gpu(device))
    median, p90, slowest = (float(x) for x in done.stdout.split())
    return f"median {median:8.1f} us, 90th percentile {p90:8.1f} us, slowest {slowest:9.1f} us"


def beside(busy: list[str], chatty: Path, calls: int, pair: tuple[int, int] | None = None) -> str:
    """``round_trips`` while ``busy`` runs (started first; it and its children stopped after);
    with ``pair``, the chatty program on the first GPU and the busy one on the second."""
    proc = subprocess.Popen(busy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=on_gpu(pair[1] if pair else None))
    try:
        time.sleep(1.0)  # (its context made, its kernels running)
        return round_trips(chatty, calls, pair[0] if pair else None)
    finally:
        kill_group(proc.pid)  # (and waits for them to be gone: their contexts off the GPU before the next figure)
        proc.wait()


def commands(programs: dict[str, Path], sanitizer: Path | None) -> list[tuple[str, list[str]]]:
    """The small program, plain and under each tool (where compute-sanitizer is found)."""
    tools = TOOLS if sanitizer is not None else ()
    return [("plain", [str(programs["small"])]),
            *((tool, [str(sanitizer), "--tool", tool, str(programs["small"])]) for tool in tools)]


def racecheck_loop(programs: dict[str, Path], sanitizer: Path) -> list[str]:
    return ["bash", "-c", f"while true; do {sanitizer} --tool racecheck {programs['small']}; done"]


def one_gpu(programs: dict[str, Path], sanitizer: Path | None, counts: list[int], args: argparse.Namespace) -> None:
    """The first two questions, on the GPU this process sees first."""
    print("tool runs side by side: a small program, N copies at once (wall; each copy's seconds)")
    for tool, command in commands(programs, sanitizer):
        for n in counts:
            wall, each = at_once(command, n)
            print(f"  {tool:<9} {n:>2} at once: wall {wall:6.2f} s; each {each[0]:.2f}-{each[-1]:.2f} s "
                  f"(median {statistics.median(each):.2f})")
    if sanitizer is None:
        print("  (compute-sanitizer not found: its tools not measured)")
    cycles = int(args.spin_ms * 1e-3 * 1.5e9)  # (about --spin-ms at 1.5 GHz)
    print(f"a chatty process's round trip (a tiny kernel and a synchronize, {args.calls} times)")
    print(f"  alone                      {round_trips(programs['chatty'], args.calls)}")
    spin = [str(programs["spin"]), str(args.seconds), str(cycles)]
    print(f"  beside {args.spin_ms:g} ms kernels      {beside(spin, programs['chatty'], args.calls)}")
    if sanitizer is not None:
        print(f"  beside racecheck runs      {beside(racecheck_loop(programs, sanitizer), programs['chatty'], args.calls)}")


def host_gpus(programs: dict[str, Path], sanitizer: Path | None, counts: list[int], calls: int) -> None:
    """The third question: the same copies on one GPU and spread over the host's."""
    indices = [d.index for d in gpus.visible(gpus.nvml_devices(), os.environ.get("CUDA_VISIBLE_DEVICES"))]
    if len(indices) < 2:
        print(f"GPUs of one host: not measured ({len(indices)} visible)")
        return
    print(f"GPUs of one host: N copies on GPU {indices[0]} alone, then spread over GPUs {', '.join(map(str, indices))}")
    for tool, command in commands(programs, sanitizer):
        for n in (c for c in counts if c >= 2):
            one, _ = at_once(command, n, indices[:1])
            spread, _ = at_once(command, n, indices)
            print(f"  {tool:<9} {n:>2} at once: wall {one:6.2f} s on one GPU, {spread:6.2f} s spread ({one / spread:.2f}x)")
    if sanitizer is not None:
        print(f"  round trip on GPU {indices[0]} beside racecheck runs on GPU {indices[1]}: "
              f"{beside(racecheck_loop(programs, sanitizer), programs['chatty'], calls, (indices[0], indices[1]))}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--at-once", default="1,2,4,8", help="how many copies at once, comma-separated (default 1,2,4,8)")
    p.add_argument("--calls", type=int, default=400, help="round trips of the chatty program (default 400)")
    p.add_argument("--seconds", type=float, default=60.0, help="how long the busy process runs at most (default 60)")
    p.add_argument("--spin-ms", type=float, default=20.0, help="each busy kernel's time on its SM (default 20)")
    p.add_argument("--host-only", action="store_true", help="only the question of the host's GPUs (needs two or more)")
    args = p.parse_args()
    try:
        counts = [int(x) for x in args.at_once.split(",")]
    except ValueError:
        p.error(f"--at-once: expected numbers separated by commas, got {args.at_once!r}")
    found = gpu.probe()
    if found.gpu is None:
        print(f"needs a CUDA GPU: {found.reason}")
        return 1
    sanitizer = toolchain.find("compute-sanitizer")
    with tempfile.TemporaryDirectory(prefix="gpu-sharing-") as tmp:
        programs = build(Path(tmp), found.gpu.arch)
        print(f"{found.gpu.name}, driver {found.gpu.driver}")
        if not args.host_only:
            one_gpu(programs, sanitizer, counts, args)
        host_gpus(programs, sanitizer, counts, args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
