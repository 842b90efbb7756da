"""Building a submission into a shared object with nvcc: cached, time-limited, errors trimmed."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import filelock

from ..cachedirs import default_cache_dir
from ..errors import GraderError
from ..host import toolchain
from ..host.hostdirs import check_private_dir, open_private, private_dir, read_private
from ..host.procgroup import run_capped
from ..host.safeio import SOURCE_LIMIT_BYTES, read_file, write_whole
from ..labspec.spec import LabSpec
from ..outcome import KernelResources, SourceLocation
from ..textutil import CappedOutput
from .compilerlog import error_location, offered_names, own_names, parse_ptxas, student_log, summarize_errors
from .sandbox import Sandbox, confined_env

SUPPORT_SOURCE = Path(__file__).parent.parent / "cuda" / "support.cu"
SUPPORT_NAME = "grader-support.cu"
#: How the build cache's folder is named in messages, and the most of a build record read back.
CACHE_WHAT = "the grader's cache folder"
META_LIMIT_BYTES = 1 << 20
CACHE_VERSION = "2"
# Address space for nvcc and its children: a template bomb fails instead of swapping the machine.
# (Only the compiler: CUDA programs reserve huge virtual ranges and break under RLIMIT_AS.)
COMPILE_MEMORY_LIMIT_BYTES = 8 << 30
# The largest file the compiler may write (a student's #include of a huge file, a runaway
# template): far above any real shared object.
COMPILE_FILE_LIMIT_BYTES = 512 << 20
# What is kept of the compiler's output: its start (the first errors) and its end.
COMPILE_OUTPUT_HEAD_BYTES = 256 << 10
COMPILE_OUTPUT_TAIL_BYTES = 32 << 10
#: The runtime's launch functions, wrapped so that the support file records which kernels ran.
WRAPPED_LAUNCHES = ("__cudaLaunchKernel", "__cudaLaunchKernel_ptsz", "cudaLaunchKernel", "cudaLaunchKernel_ptsz",
                    "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernel_ptsz", "cudaLaunchKernelExC",
                    "cudaLaunchKernelExC_ptsz")
#: The calls the support file records for the grader's replayer (``grader/checks/counters/replay/record.py``), or
#: marks as making a record incomplete (graphs, managed memory, the driver API).
RECORDED_CALLS = ("__cudaRegisterVar", "cudaMalloc", "cudaFree", "cudaMemset", "cudaMemset_ptds", "cudaMemsetAsync",
                  "cudaMemsetAsync_ptsz", "cudaMemcpy", "cudaMemcpy_ptds", "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz",
                  "cudaMemcpyToSymbol", "cudaMemcpyToSymbol_ptds", "cudaMemcpyToSymbolAsync",
                  "cudaMemcpyToSymbolAsync_ptsz", "cudaGraphLaunch", "cudaGraphLaunch_ptsz", "cudaStreamBeginCapture",
                  "cudaStreamBeginCapture_ptsz", "cudaMallocManaged", "cudaMallocAsync", "cudaMallocAsync_ptsz",
                  "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion")


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    library: Path | None
    message: str  # one line for the student
    log: str  # trimmed compiler output, paths shown as the student knows them
    kernels: tuple[KernelResources, ...]
    archs: tuple[str, ...]
    cached: bool
    seconds: float
    timed_out: bool = False
    error_at: SourceLocation | None = None  # the first error in the student's own file


def gencode_flags(archs: tuple[str, ...]) -> list[str]:
    flags = []
    for arch in archs:
        num = arch.removeprefix("sm_")
        flags += ["-gencode", f"arch=compute_{num},code=sm_{num}"]
    return flags


def build(
    source: Path,
    header: Path,
    archs: tuple[str, ...],
    *,
    flags: tuple[str, ...] = ("-O3",),
    cache_dir: Path | None = None,
    time_limit_s: float = 120.0,
    display_name: str | None = None,
    exports: tuple[str, ...] = (),
    sandbox: Sandbox | None = None,
    on_compile: Callable[[], None] | None = None,
) -> BuildResult:
    """Compile ``source`` with ``header`` force-included into a shared object.

    ``exports`` are symbols the object must define (the launcher): a file without them is a
    link error that names the missing function, not a failure at run time.
    """
    started = time.monotonic()
    nvcc = toolchain.find("nvcc")
    if nvcc is None:
        raise GraderError("nvcc not found: install the CUDA toolkit or set CUDA_HOME (or GRADER_NVCC)")
    display = display_name or source.name
    src_bytes, unusable = _read_source(source, display)
    if unusable:  # the student's own file: said as a compile error is, never as the grader's failure
        return BuildResult(ok=False, library=None, message=unusable, log="", kernels=(), archs=archs, cached=False,
                           seconds=time.monotonic() - started)
    header_bytes, support_bytes = header.read_bytes(), SUPPORT_SOURCE.read_bytes()
    # a name the header offers (NUM_BINS) that the student declares too is the student's own
    cmd_flags = [
        *flags,
        *(f"-DGRADER_OWN_{name}" for name in own_names(src_bytes, offered_names(header_bytes))),
        *gencode_flags(archs),
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-Xptxas",
        "-v",
        "-Xptxas",
        "-warn-spills",
        "-Xptxas",
        "-warn-lmem-usage",
        "-lineinfo",
        "-Xlinker",
        "--no-undefined",
        *(f for name in (*WRAPPED_LAUNCHES, *RECORDED_CALLS) for f in ("-Xlinker", f"--wrap={name}")),
        *(f for name in exports for f in ("-Xlinker", f"--require-defined={name}")),
    ]
    key = hashlib.sha256()
    for part in (
        CACHE_VERSION.encode(),
        src_bytes,
        header_bytes,
        support_bytes,
        json.dumps(cmd_flags).encode(),
        toolchain.nvcc_version().encode(),
        display.encode(),
        b"sandboxed" if sandbox is not None and sandbox.active else b"open",
    ):
        key.update(hashlib.sha256(part).digest())
    digest = key.hexdigest()[:32]
    cache = private_dir(private_dir(cache_dir or default_cache_dir(), CACHE_WHAT) / "builds", "the build cache")
    final = cache / digest
    hit = _cached(final, display, source, started)
    if hit is not None:
        return hit
    if on_compile is not None:
        on_compile()  # (no build of this code is cached: it is about to be compiled)
    with _one_builder(cache, digest, time_limit_s):
        hit = _cached(final, display, source, started)  # another grader built it while this one waited
        if hit is not None:
            return hit
        work = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
        try:
            # Compile a copy named as the student knows it, so messages carry the right file name.
            rel = _compiled_name(display, source)
            local_src = work / rel
            local_src.parent.mkdir(parents=True, exist_ok=True)
            local_src.write_bytes(src_bytes)
            (work / header.name).write_bytes(header_bytes)
            (work / SUPPORT_NAME).write_bytes(support_bytes)
            # "./": a file named like an option (-DX.cu) is still a file to nvcc
            cmd = [str(nvcc), *cmd_flags, "-include", header.name, "-o", "lib.so", f"./{rel}", SUPPORT_NAME]
            prlimit = shutil.which("prlimit")
            if prlimit:
                cmd = [prlimit, f"--as={COMPILE_MEMORY_LIMIT_BYTES}", f"--fsize={COMPILE_FILE_LIMIT_BYTES}", "--", *cmd]
            if sandbox is not None:
                # the toolkit by its real folder: for an nvcc wrapper in /usr/local/bin, not all of /usr/local
                cmd = sandbox.wrap(cmd, read_only=(toolchain.toolkit_root(nvcc),), writable=(work,), cwd=work)
            output, rc = _run_compiler(cmd, work, time_limit_s)
            timed_out = rc is None
            output = output.replace(str(work) + "/", "").replace(f"./{rel}", str(rel))
            ok = rc == 0 and (work / "lib.so").exists()
            kernels = parse_ptxas(output, archs[0] if archs else None) if ok else ()
            if timed_out:
                message = f"compilation of {display} took longer than {time_limit_s:g} s and was stopped"
            elif ok:
                message = f"compiled for {', '.join(archs)}"
            else:
                message = summarize_errors(output, display)
            meta = {
                "ok": ok,
                "message": message,
                "log": student_log(output),
                "kernels": [k.__dict__ for k in kernels],
                "archs": list(archs),
                "timed_out": timed_out,
            }
            if timed_out:  # do not cache a timeout: the machine may just have been busy
                shutil.rmtree(work, ignore_errors=True)
                return _result_from_meta(work, meta, str(rel), cached=False, seconds=time.monotonic() - started)
            write_whole(work / "build.json", json.dumps(meta, indent=1))  # (the compile could write in work/)
            try:
                os.rename(work, final)  # publish atomically
            except OSError:  # someone else published the same build first
                shutil.rmtree(work, ignore_errors=True)
            return _result_from_meta(final, meta, str(rel), cached=False, seconds=time.monotonic() - started)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise


def _cached(final: Path, display: str, source: Path, started: float) -> BuildResult | None:
    """The build published at ``final``, if there is a readable one (a broken one is removed).

    An entry this user did not make (another owner, a link, a folder others can write) is
    refused, never loaded: the baselines' shared objects run in the grader's trusted worker."""
    if not os.path.lexists(final):
        return None
    check_private_dir(final, "a build cache entry")
    try:
        text = read_private(final / "build.json", META_LIMIT_BYTES, "a build cache entry's record")
        if text is None:
            return None
        meta = json.loads(text)
        if meta["ok"]:
            _check_library(final / "lib.so")
        return _result_from_meta(final, meta, str(_compiled_name(display, source)), cached=True,
                                 seconds=time.monotonic() - started)
    except (OSError, ValueError, KeyError):
        shutil.rmtree(final, ignore_errors=True)
        return None


def _check_library(lib: Path) -> None:
    """Refuse a cached shared object that is not a regular file of this user's."""
    fd = open_private(lib, "a cached shared object", remove=lib.parent)
    if fd is not None:
        os.close(fd)


#: Where the locks live that let one grader build a given digest while others wait for it.
LOCKS = ".locks"


@contextlib.contextmanager
def _one_builder(cache: Path, digest: str, time_limit_s: float) -> Iterator[None]:
    """Hold the build lock of ``digest`` in ``cache``: a class's CPU pool and a lane (or two graders
    sharing a cache) that need the same build compile it once; the other waits, then finds it
    cached. A lock that cannot be had in time (or made at all) is gone without: both compile."""
    path = private_dir(cache / LOCKS, "the build locks' folder") / digest
    lock = filelock.FileLock(str(path), mode=0o600, thread_local=False)
    try:
        lock.acquire(timeout=time_limit_s + 10, poll_interval=0.05)
    except (OSError, filelock.Timeout):
        yield
        return
    try:
        yield
    finally:
        lock.release()


def _compiled_name(display: str, source: Path) -> Path:
    """The path the copy is compiled under (and so the one nvcc's messages name): the display
    name where it is a path inside the build folder, else the file's own name."""
    rel = Path(display)
    return Path(source.name) if rel.is_absolute() or ".." in rel.parts else rel


def _run_compiler(cmd: list[str], work: Path, time_limit_s: float) -> tuple[str, int | None]:
    """Run nvcc with no standard input and an allow-listed environment; its output capped.

    Returns the output and the exit status, None if it was stopped at the time limit (with its
    children: cudafe++, cicc, ptxas)."""
    output = CappedOutput(COMPILE_OUTPUT_HEAD_BYTES, COMPILE_OUTPUT_TAIL_BYTES)
    rc = run_capped(cmd, output, time_limit_s, cwd=work, env=confined_env({"TMPDIR": "/tmp"}))
    return output.text(), rc


def _read_source(source: Path, display: str) -> tuple[bytes, str]:
    """The source's bytes, or why it cannot be compiled, named as ``display`` (the path as the
    student knows it, never the grader's folders). Any bytes nvcc takes are taken: a Latin-1
    comment compiles, as it does for the student."""
    try:
        if source.is_dir() and not source.is_symlink():
            return b"", f"{display} is a directory, expected a .cu file"
        data = read_file(source, SOURCE_LIMIT_BYTES, "a submitted source file")
    except GraderError as exc:
        return b"", f"{display}: {str(exc).removeprefix(f'{exc.path}: ')}"
    if not data.strip():
        return b"", f"{display} is empty: write the lab's launcher in it"
    return data, ""


def _result_from_meta(folder: Path, meta: dict[str, Any], compiled_as: str, *, cached: bool, seconds: float) -> BuildResult:
    lib = folder / "lib.so"
    return BuildResult(
        ok=bool(meta["ok"]),
        library=lib if meta["ok"] and lib.exists() else None,
        message=meta["message"],
        log=meta["log"],
        kernels=tuple(KernelResources(**k) for k in meta["kernels"]),
        archs=tuple(meta["archs"]),
        cached=cached,
        seconds=seconds,
        timed_out=bool(meta.get("timed_out")),
        error_at=None if meta["ok"] else error_location(meta["log"], compiled_as),
    )


def lab_build(spec: LabSpec, source: Path, archs: tuple[str, ...], cache_dir: Path | None = None,
              display_name: str | None = None, sandbox: Sandbox | None = None,
              on_compile: Callable[[], None] | None = None) -> BuildResult:
    """Any build for a lab: its header, flags and time limit, and its launcher required.

    Students' files compile in the ``sandbox``; the course's own baselines do not need it.
    ``on_compile`` is called where no build of the file is cached, before it is compiled.
    """
    return build(
        source, spec.files.header, archs, flags=spec.compile.flags, cache_dir=cache_dir,
        time_limit_s=spec.compile.time_limit_s, exports=(spec.launcher.name,), display_name=display_name,
        sandbox=sandbox, on_compile=on_compile,
    )


def baseline_library(spec: LabSpec, name: str, archs: tuple[str, ...], cache_dir: Path | None = None) -> Path:
    """The shared object of one of the lab's baselines (``reference``, ``naive``, ...)."""
    result = lab_build(spec, spec.baseline_source(name), archs, cache_dir)
    if not result.ok or result.library is None:
        raise RuntimeError(f"baseline {name!r} of lab {spec.id} does not compile: {result.message}")
    return result.library
