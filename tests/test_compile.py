"""Building submissions with the real nvcc: the cache, error messages, bad files, time limits, ptxas."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_sources import LOCAL_ARRAY

from grader.engine.grade import grade
from grader.isolation.build import BuildResult, build
from grader.isolation.compilerlog import parse_ptxas, student_log, summarize_errors
from grader.isolation.options import GradeOptions
from grader.labspec.specload import load_lab
from grader.outcome import Outcome

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "labs" / "tiled_matmul"
HEADER = LAB / "interface.h"
REFERENCE = ROOT / "reference" / "tiled_matmul" / "reference.cu"
WRONG_PROTOTYPE = LAB / "solutions" / "wrong" / "wrong_prototype.cu"
ARCHS = ("sm_90",)

SYNTAX_ERROR = """\
// a launcher with a missing semicolon on line 4
extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    int x = width
    P[0] = x;
}
"""

KERNEL_ONLY = """\
__global__ void scale(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= 2.0f;
}
"""



@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build-cache")


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sources")
    (folder / "syntax_error.cu").write_text(SYNTAX_ERROR)
    (folder / "kernel_only.cu").write_text(KERNEL_ONLY)
    (folder / "local_array.cu").write_text(LOCAL_ARRAY)
    return folder


@pytest.fixture(scope="module")
def reference(cache) -> BuildResult:
    return build(REFERENCE, HEADER, ARCHS, cache_dir=cache)


# ------------------------------------------------------------------ good builds and the cache


def test_reference_builds(reference, cache):
    assert reference.ok, reference.log
    assert reference.message == "compiled for sm_90"
    assert reference.archs == ARCHS
    assert not reference.timed_out
    assert reference.library is not None and reference.library.is_file()
    assert reference.library.name == "lib.so"
    assert cache in reference.library.parents
    # the shared object is an ELF file
    assert reference.library.read_bytes()[:4] == b"\x7fELF"


def test_reference_kernel_resources(reference):
    assert len(reference.kernels) == 1
    (kernel,) = reference.kernels
    assert "matmul_tiled" in kernel.name
    assert kernel.registers > 0
    assert kernel.smem_bytes == 2048  # two 16x16 float tiles
    assert kernel.stack_bytes == 0
    assert kernel.spill_store_bytes == 0 and kernel.spill_load_bytes == 0
    assert kernel.barriers >= 1


def test_reference_log_shows_ptxas_info(reference, cache):
    assert "Compiling entry function '_Z12matmul_tiled" in reference.log
    assert "2048 bytes smem" in reference.log
    assert str(cache) not in reference.log  # the build folder is cut from every path


def test_second_build_is_cached(reference, cache):
    again = build(REFERENCE, HEADER, ARCHS, cache_dir=cache)
    assert reference.cached is False
    assert again.cached is True
    assert again.ok
    assert again.library == reference.library
    assert again.kernels == reference.kernels
    assert again.message == reference.message


def test_a_build_says_before_compiling_that_its_code_is_new(tmp_path, cache):
    """(A repository starts its profiler session then: nothing of new code can have been kept.)"""
    told: list[str] = []
    source = tmp_path / "new.cu"
    source.write_text(REFERENCE.read_text() + "\n__device__ int one_more_try;\n")
    first = build(source, HEADER, ARCHS, cache_dir=cache, on_compile=lambda: told.append("compiling"))
    again = build(source, HEADER, ARCHS, cache_dir=cache, on_compile=lambda: told.append("again"))
    assert first.ok and not first.cached and again.cached and told == ["compiling"]


# ------------------------------------------------------------------ compile errors


def test_two_graders_that_need_one_build_at_once_compile_it_once(tmp_path):
    """A class's CPU pool and a lane (or two graders sharing a cache) building the same file: the
    second waits for the first's build instead of compiling it beside it."""
    from concurrent.futures import ThreadPoolExecutor

    shared = tmp_path / "cache"
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: build(REFERENCE, HEADER, ARCHS, cache_dir=shared), range(2)))
    assert all(r.ok for r in results)
    assert sorted(r.cached for r in results) == [False, True]
    assert results[0].library == results[1].library
    assert [p.name for p in (shared / "builds").iterdir() if p.name.startswith("build-")] == []


def test_syntax_error_names_student_file_and_line(sources, cache):
    result = build(sources / "syntax_error.cu", HEADER, ARCHS, cache_dir=cache)
    assert not result.ok
    assert result.library is None
    assert result.kernels == ()
    assert result.message.startswith("compile error: ")
    assert "syntax_error.cu:4: error" in result.message
    assert "syntax_error.cu(4)" not in result.message
    # the name as the student knows it, not the grader's temporary build folder
    assert str(sources) not in result.message
    assert str(cache) not in result.message
    assert "/" not in result.message.split(":")[0].removeprefix("compile error")
    assert "syntax_error.cu:4: error" in result.log
    assert str(cache) not in result.log
    assert "syntax_error.cu(4)" not in result.log


def test_failed_build_is_cached_too(sources, cache):
    first = build(sources / "syntax_error.cu", HEADER, ARCHS, cache_dir=cache)
    assert first.cached is True  # built by the previous test
    assert not first.ok and "syntax_error.cu:4: error" in first.message


def test_wrong_prototype_is_a_compile_error(cache):
    result = build(WRONG_PROTOTYPE, HEADER, ARCHS, cache_dir=cache)
    assert not result.ok
    assert result.library is None
    assert '"C" linkage' in result.message
    assert '"matmul"' in result.message
    assert "wrong_prototype.cu:6: error" in result.message
    assert "extern \"C\" void matmul(float* M" in result.log


def test_missing_launcher_is_a_link_error(sources, cache):
    spec = load_lab(LAB)
    report = grade(spec, sources / "kernel_only.cu", GradeOptions(gpu=False, cache_dir=cache))
    compile_check = report.checks[0]
    assert compile_check.id == "compile"
    assert compile_check.outcome is Outcome.ERROR, compile_check.message
    assert "matmul" in compile_check.message


def test_summarize_errors_for_link_errors():
    log = "/usr/bin/ld: lib.o: in function `f':\nx.cu:(.text+0x1): undefined reference to `matmul'\ncollect2: error: ld returned 1 exit status\n"
    message = summarize_errors(log, "student.cu")
    assert message.startswith("link error: student.cu does not define `matmul`")
    assert "prototype" in message


def test_summarize_errors_counts_more_errors_and_falls_back_to_the_last_line():
    out = 'a.cu(3): error: identifier "x" is undefined\na.cu(9): error: expected a ";"\n'
    assert summarize_errors(out, "a.cu") == 'compile error: a.cu:3: error: identifier "x" is undefined (and 1 more)'
    assert summarize_errors("something odd\nnvcc fatal   : bad things\n", "a.cu") == "compile failed: nvcc fatal   : bad things"
    assert "printed nothing" in summarize_errors("", "a.cu")


def test_student_log_rewrites_locations_and_strips_escapes():
    out = "\x1b[1ma.cu(12): warning #177-D: variable \"y\" was declared but never referenced\x1b[0m\r\n"
    log = student_log(out)
    assert log == 'a.cu:12: warning #177-D: variable "y" was declared but never referenced'
    capped = student_log("\n".join(f"line {i}" for i in range(100)), max_lines=10)
    assert capped.splitlines()[-1] == "[... 90 lines omitted]"
    assert len(capped.splitlines()) == 11


# ------------------------------------------------------------------ bad input files


def test_empty_file(tmp_path, cache):
    path = tmp_path / "empty.cu"
    for text in ("", "  \n\t\n"):
        path.write_text(text)
        result = build(path, HEADER, ("sm_90",), cache_dir=cache, display_name="labs/tiled_matmul/student.cu")
        assert not result.ok and result.message == "labs/tiled_matmul/student.cu is empty: write the lab's launcher in it"


def test_non_utf8_file_compiles_as_nvcc_compiles_it(tmp_path, cache):
    path = tmp_path / "latin1.cu"
    path.write_bytes(b"// ok\n// caf\xe9\n__global__ void k() {}\n")
    result = build(path, HEADER, ("sm_90",), cache_dir=cache)
    assert result.ok, result.message


def test_directory(tmp_path, cache):
    folder = tmp_path / "folder.cu"
    folder.mkdir()
    result = build(folder, HEADER, ARCHS, cache_dir=cache, display_name="labs/x/student.cu")
    assert not result.ok and result.message == "labs/x/student.cu is a directory, expected a .cu file"


def test_missing_file(tmp_path, cache):
    result = build(tmp_path / "missing.cu", HEADER, ARCHS, cache_dir=cache, display_name="labs/x/student.cu")
    assert not result.ok and result.message == "labs/x/student.cu: file not found"


# ------------------------------------------------------------------ time limit


@pytest.fixture(scope="module")
def timeout_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("timeout-cache")


@pytest.fixture(scope="module")
def timed_out(timeout_cache) -> BuildResult:
    return build(REFERENCE, HEADER, ARCHS, cache_dir=timeout_cache, time_limit_s=0.001)


def test_timeout_is_reported(timed_out):
    assert timed_out.timed_out is True
    assert timed_out.ok is False
    assert timed_out.library is None
    assert "reference.cu" in timed_out.message
    assert "took longer than 0.001 s and was stopped" in timed_out.message


def test_timeout_is_not_cached(timed_out, timeout_cache):
    again = build(REFERENCE, HEADER, ARCHS, cache_dir=timeout_cache, time_limit_s=0.001)
    assert again.cached is False
    assert again.timed_out is True


def test_timeout_leaves_no_work_folder(timed_out, timeout_cache):
    leftovers = [p.name for p in (timeout_cache / "builds").iterdir() if p.name.startswith("build-")]
    assert leftovers == []


# ------------------------------------------------------------------ ptxas output

PTXAS_SAMPLE = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'
ptxas info    : Function properties for _Z3fooPf
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 5.313 ms
ptxas info    : Compiling entry function 'bar_kernel' for 'sm_90'
ptxas info    : Function properties for bar_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 352 bytes cmem[0], 400 bytes cmem[3]
"""

# nvcc runs ptxas once per arch, in the order of the -gencode flags
SECOND_ARCH = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_80'
ptxas info    : Function properties for _Z3fooPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 99 registers, used 0 barriers, 4096 bytes smem
"""


def test_parse_ptxas_sample():
    kernels = {k.name: k for k in parse_ptxas(PTXAS_SAMPLE, "sm_90")}
    assert len(kernels) == 2
    foo = next(k for name, k in kernels.items() if "foo" in name)
    assert foo.name in ("foo(float*)", "_Z3fooPf")  # demangled where c++filt exists
    assert foo.registers == 40
    assert foo.barriers == 1
    assert foo.smem_bytes == 1024
    assert foo.stack_bytes == 8
    assert foo.spill_store_bytes == 4
    assert foo.spill_load_bytes == 4
    bar = kernels["bar_kernel"]  # extern "C" names are left as they are
    assert bar.registers == 12
    assert bar.barriers == 0
    assert bar.smem_bytes == 0
    assert bar.cmem_bytes == 400
    assert bar.stack_bytes == 0
    assert parse_ptxas(PTXAS_SAMPLE, None) == parse_ptxas(PTXAS_SAMPLE, "sm_90")
    assert parse_ptxas("", "sm_90") == ()


def test_parse_ptxas_picks_the_arch():
    assert parse_ptxas(PTXAS_SAMPLE, "sm_75") == ()
    (foo,) = parse_ptxas(SECOND_ARCH, "sm_80")
    assert "foo" in foo.name
    assert foo.registers == 99
    assert foo.smem_bytes == 4096
    assert foo.spill_store_bytes == 0
    # the graded arch compiled first: its figures come before the other arch's
    assert {k.registers for k in parse_ptxas(SECOND_ARCH + PTXAS_SAMPLE, "sm_90")} == {40, 12}


def test_parse_ptxas_ignores_a_later_arch():
    foo = next(k for k in parse_ptxas(PTXAS_SAMPLE + SECOND_ARCH, "sm_90") if "foo" in k.name)
    assert foo.registers == 40
    assert foo.smem_bytes == 1024
    assert foo.stack_bytes == 8


# real ptxas output (nvcc 13.0): a __noinline__ device function's properties follow the kernel
DEVICE_FUNCTION = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z2k2Pf' for 'sm_90'
ptxas info    : Function properties for _Z2k2Pf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 1.765 ms
ptxas info    : Compiling entry function '_Z2k1Pf' for 'sm_90'
ptxas info    : Function properties for _Z2k1Pf
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 256 bytes cumulative stack size
ptxas info    : Compile time = 12.035 ms
ptxas info    : Function properties for _Z6helperPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""


def test_parse_ptxas_device_function_frame_is_not_the_kernels():
    kernels = {k.name: k for k in parse_ptxas(DEVICE_FUNCTION, "sm_90")}
    assert len(kernels) == 2
    k1 = next(k for name, k in kernels.items() if "k1" in name)
    assert k1.registers == 32
    assert k1.stack_bytes == 256


def test_local_array_kernel_uses_stack(sources, cache):
    result = build(sources / "local_array.cu", HEADER, ARCHS, cache_dir=cache)
    assert result.ok, result.log
    (kernel,) = result.kernels
    assert "local_array" in kernel.name
    assert kernel.stack_bytes > 0
    assert "Local memory used" in result.log or kernel.spill_store_bytes > 0
