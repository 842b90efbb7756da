"""A student's own names never clash with what a lab's interface header declares.

Students copy ``NUM_BINS``, ``TILE_WIDTH``, ``MAX_MASK_WIDTH`` and ``BLOCK_SIZE`` from lectures and
textbooks, as macros or as constants. The header is force-included ahead of their file, so a name
it declared as a macro turned their ``constexpr int NUM_BINS = 7;`` into ``constexpr int 7 = 7;``.
Each lab's file declaring all four of its own compiles with the real nvcc; one relying on the
header's names compiles too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.engine.plan import launcher_prototype
from grader.isolation.build import build
from grader.isolation.compilerlog import offered_names, own_names
from grader.labspec.specload import load_lab

ROOT = Path(__file__).resolve().parent.parent
LABS = sorted(p.name for p in (ROOT / "labs").iterdir() if (p / "lab.yaml").is_file())
ARCHS = ("sm_90",)

CONSTANTS = """\
constexpr int NUM_BINS = 7;
constexpr int TILE_WIDTH = 16;
const int MAX_MASK_WIDTH = 15;
static const int BLOCK_SIZE{256};
"""
MACROS = """\
#define NUM_BINS 7
#define TILE_WIDTH 16
#define MAX_MASK_WIDTH 15
#define BLOCK_SIZE 256
"""


def _student(prototype: str, own: str) -> str:
    """A launcher with the lab's prototype whose kernel uses all four names."""
    signature = prototype.removeprefix('extern "C"').strip().rstrip(";")
    return f"""{own}
__global__ void uses_names(int* out) {{
    __shared__ int tile[TILE_WIDTH][TILE_WIDTH];
    __shared__ int bins[NUM_BINS];
    tile[threadIdx.y % TILE_WIDTH][threadIdx.x % TILE_WIDTH] = MAX_MASK_WIDTH;
    if (threadIdx.x < NUM_BINS) bins[threadIdx.x] = BLOCK_SIZE;
    __syncthreads();
    out[threadIdx.x] = tile[0][0] + bins[0];
}}

extern "C" {signature} {{
    uses_names<<<1, BLOCK_SIZE>>>(nullptr);
}}
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build-cache")


@pytest.mark.parametrize("style", ["constants", "macros"])
@pytest.mark.parametrize("lab", LABS)
def test_a_student_file_declaring_the_common_names_compiles(lab, style, tmp_path, cache):
    spec = load_lab(ROOT / "labs" / lab)
    src = tmp_path / "student.cu"
    src.write_text(_student(launcher_prototype(spec), CONSTANTS if style == "constants" else MACROS))
    result = build(src, spec.files.header, ARCHS, cache_dir=cache, exports=(spec.launcher.name,))
    assert result.ok, result.message + "\n" + result.log


@pytest.mark.parametrize("lab, name", [("histogram", "NUM_BINS"), ("memory_types", "MAX_MASK_WIDTH")])
def test_a_student_file_may_use_the_name_the_header_provides(lab, name, tmp_path, cache):
    spec = load_lab(ROOT / "labs" / lab)
    assert offered_names(spec.files.header.read_bytes()) == (name,)
    own = "".join(line + "\n" for line in CONSTANTS.splitlines() if name not in line)
    src = tmp_path / "student.cu"
    src.write_text(_student(launcher_prototype(spec), own))
    result = build(src, spec.files.header, ARCHS, cache_dir=cache, exports=(spec.launcher.name,))
    assert result.ok, result.message + "\n" + result.log


def test_own_names_finds_declarations_not_uses():
    names = ("NUM_BINS", "MAX_MASK_WIDTH", "TILE")
    code = b"""
    // constexpr int TILE = 4;   (a comment declares nothing)
    const char* s = "NUM_BINS = 3";
    if (n == MAX_MASK_WIDTH) {}
    int bins[NUM_BINS] = {0};
    """
    assert own_names(code, names) == ()
    assert own_names(b"#  define NUM_BINS 7\n", names) == ("NUM_BINS",)
    assert own_names(b"enum { TILE = 16, MAX_MASK_WIDTH = 9 };", names) == ("MAX_MASK_WIDTH", "TILE")
    assert own_names(b"constexpr unsigned NUM_BINS{7};", names) == ("NUM_BINS",)


def test_a_clash_the_header_cannot_step_aside_for_names_the_headers_line(tmp_path, cache):
    """A declaration the build cannot see as one (a function named like the constant) still fails,
    and the message points at the header's own line."""
    spec = load_lab(ROOT / "labs" / "histogram")
    src = tmp_path / "student.cu"
    src.write_text("int NUM_BINS() { return 7; }\n" + _student(launcher_prototype(spec), ""))
    result = build(src, spec.files.header, ARCHS, cache_dir=cache, exports=(spec.launcher.name,))
    assert not result.ok
    assert "interface.h" in result.message + result.log
