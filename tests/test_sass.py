"""What the SASS of real builds says about memory use, and the parsers of cuobjdump's output."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_sources import LOCAL_ARRAY

from grader.checks import sass
from grader.isolation.build import build

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "labs" / "tiled_matmul" / "interface.h"
REFERENCE = ROOT / "reference" / "tiled_matmul" / "reference.cu"
NAIVE = ROOT / "reference" / "tiled_matmul" / "naive.cu"

CONSTANT = """\
__constant__ float c[16];

__global__ void use_constant(float* out) {
    out[threadIdx.x] = c[threadIdx.x % 16] * 2.0f;
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    use_constant<<<1, 32>>>(P);
}
"""

ATOMIC = """\
__global__ void total(const float* in, float* sum, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(sum, in[i]);  // result unused: a RED instruction
}

extern "C" void matmul(const float* M, const float* N, float* P, int width) {
    total<<<width, 256>>>(M, P, width * width);
}
"""


REQUIREMENTS = ("shared_memory", "constant_memory", "no_local_memory", "global_atomics", "shared_atomics", "atomics")


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> dict[str, Path]:
    """Each source built once for the module, by name."""
    cache = tmp_path_factory.mktemp("sass-cache")
    src = tmp_path_factory.mktemp("sass-src")
    sources = {"reference": REFERENCE, "naive": NAIVE}
    for name, text in (("constant", CONSTANT), ("atomic", ATOMIC), ("local_array", LOCAL_ARRAY)):
        sources[name] = src / f"{name}.cu"
        sources[name].write_text(text)
    out = {}
    for name, path in sources.items():
        result = build(path, HEADER, ("sm_90",), cache_dir=cache)
        assert result.ok, f"{name}: {result.message}\n{result.log}"
        assert result.library is not None
        out[name] = result.library
    return out


@pytest.fixture(scope="module")
def facts(libraries) -> dict[str, sass.CodeFacts]:
    return {name: sass.inspect(lib) for name, lib in libraries.items()}


def met(facts: sass.CodeFacts, requirement: str) -> bool:
    ok, evidence = sass.requirement_met(facts, requirement)
    assert isinstance(evidence, str) and evidence
    return ok


def test_reference_uses_shared_memory(facts):
    ref = facts["reference"]
    assert met(ref, "shared_memory")
    assert ref.count("LDS") > 0 and ref.count("STS") > 0
    assert ref.count("FFMA") > 0
    assert met(ref, "no_local_memory")
    assert not met(ref, "constant_memory")
    assert not met(ref, "global_atomics")
    assert not met(ref, "shared_atomics")
    names = [f.name for f in ref.functions]
    assert any("matmul_tiled" in n for n in names)
    # the grader's support code has no kernels
    assert len(ref.functions) == 1
    ok, evidence = sass.requirement_met(ref, "shared_memory")
    assert evidence.startswith(f"{ref.count(*sass.SHARED_OPS)} shared-memory instructions")


def test_reference_resource_usage(facts):
    ref = facts["reference"]
    (name,) = [n for n in ref.resources if "matmul_tiled" in n]
    assert ref.resources[name]["REG"] > 0
    assert ref.resources[name]["STACK"] == 0
    assert ref.resources[name]["SHARED"] >= 2048
    assert ref.constant_bytes == 0


def test_naive_has_no_shared_memory(facts):
    naive = facts["naive"]
    assert not met(naive, "shared_memory")
    assert naive.count(*sass.SHARED_OPS) == 0
    assert naive.count("LDG") > 0
    assert met(naive, "no_local_memory")
    ok, evidence = sass.requirement_met(naive, "shared_memory")
    assert evidence.startswith("0 shared-memory instructions")


def test_constant_memory(facts):
    const = facts["constant"]
    assert met(const, "constant_memory")
    assert const.constant_bytes == 64  # 16 floats
    (func,) = const.functions
    assert "use_constant" in func.name
    assert func.constant_bank3
    ok, evidence = sass.requirement_met(const, "constant_memory")
    assert "64 bytes of __constant__ data" in evidence and "use_constant" in evidence
    # the other kernels read no user constants
    assert not facts["reference"].functions[0].constant_bank3


def test_global_atomics(facts):
    atomic = facts["atomic"]
    assert met(atomic, "global_atomics")
    assert met(atomic, "atomics")
    assert not met(facts["reference"], "atomics")
    assert atomic.count("RED", "REDG") >= 1  # result unused: a reduction, not ATOMG
    assert atomic.count("ATOMG") == 0
    assert not met(atomic, "shared_atomics")
    assert not met(atomic, "shared_memory")


def test_local_array_uses_local_memory(facts):
    local = facts["local_array"]
    assert not met(local, "no_local_memory")
    assert local.count("STL") > 0
    ok, evidence = sass.requirement_met(local, "no_local_memory")
    assert evidence.startswith(f"{local.count('LDL', 'STL')} local-memory instructions")
    (name,) = local.resources
    assert local.resources[name]["STACK"] > 0


def test_unknown_requirement_raises(facts):
    with pytest.raises(ValueError, match="unknown static requirement"):
        sass.requirement_met(facts["reference"], "tensor_cores")


def test_inspect_result_is_cached_beside_the_library(libraries, facts):
    library = libraries["reference"]
    first = facts["reference"]
    cached = library.with_name("lib.so.sass.json")
    assert cached.is_file()
    cached.unlink()
    fresh = sass.inspect(library)
    assert cached.is_file()
    assert fresh.functions == first.functions
    again = sass.inspect(library)
    assert again.functions == first.functions
    assert again.constant_bytes == first.constant_bytes
    assert {k: dict(v) for k, v in again.resources.items()} == {k: dict(v) for k, v in first.resources.items()}
    # a corrupt cache file is ignored and rewritten
    cached.write_text("{not json")
    assert sass.inspect(library).functions == first.functions
    assert cached.read_text().startswith("{\"functions\"")


def test_requirement_names_match_the_spec():
    import typing

    from grader.labspec.spec import StaticRequirement

    assert set(typing.get_args(StaticRequirement)) == set(REQUIREMENTS)
    empty = sass.CodeFacts(())
    for requirement in REQUIREMENTS:
        ok, _ = sass.requirement_met(empty, requirement)
        assert ok is (requirement == "no_local_memory")


# ------------------------------------------------------------------ parsers on literal samples

SASS_SAMPLE = """\

Fatbin elf code:
================
arch = sm_90
code version = [1,8]
host = linux
compile_size = 64bit

	code for sm_90
		Function : _Z5tiledPKfS0_Pfi
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
                                                                           /* 0x000fe20000000800 */
        /*0010*/                   S2R R5, SR_TID.X ;                      /* 0x0000000000057919 */
        /*0020*/                   STS [R0], R2 ;                          /* 0x0000000200007388 */
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;           /* 0x0000000000007b1d */
        /*0040*/                   LDS.128 R8, [R0+0x10] ;                 /* 0x0000100000087984 */
        /*0050*/                   LDS R9, [R0] ;                          /* 0x0000000000097984 */
        /*0060*/               @P0 EXIT ;                                  /* 0x000000000000094d */
        /*0070*/                   STG.E desc[UR4][R2.64], R9 ;            /* 0x0000000902007986 */
        /*0080*/                   BRA 0x80;                               /* 0xfffffffc00fc7947 */
		..........


		Function : scale_c
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
        /*0010*/                   LDC R4, c[0x3][R0] ;                    /* 0x00c0000000047b82 */
        /*0020*/              @!P1 REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R4 ;  /* 0x000000040200798e */
        /*0030*/                   STL [R1], R4 ;                          /* 0x0000000401007387 */
        /*0040*/                   EXIT ;                                  /* 0x000000000000794d */
		..........
"""


def test_parse_sass_sample():
    funcs = sass.parse_sass(SASS_SAMPLE)
    assert len(funcs) == 2
    tiled, scale = funcs
    assert tiled.name in ("tiled(float const*, float const*, float*, int)", "_Z5tiledPKfS0_Pfi")
    assert tiled.opcodes == {"LDC": 1, "S2R": 1, "STS": 1, "BAR": 1, "LDS": 2, "EXIT": 1, "STG": 1, "BRA": 1}
    assert tiled.constant_bank3 is False
    assert scale.name == "scale_c"
    assert scale.opcodes == {"LDC": 2, "REDG": 1, "STL": 1, "EXIT": 1}
    assert scale.constant_bank3 is True

    facts = sass.CodeFacts(funcs, constant_bytes=64)
    assert facts.count("LDS") == 2
    assert facts.count("LDC") == 3
    assert facts.count("EXIT", "BRA") == 3
    assert met(facts, "shared_memory")
    assert met(facts, "constant_memory")
    assert met(facts, "global_atomics")
    assert not met(facts, "no_local_memory")
    assert not met(facts, "shared_atomics")
    # no __constant__ data in the module: reading bank 3 alone is not enough
    assert not met(sass.CodeFacts(funcs, constant_bytes=0), "constant_memory")


def test_parse_sass_ignores_text_before_the_first_function():
    text = "        /*0000*/                   LDS R1, [R0] ;\n" + SASS_SAMPLE
    assert sass.parse_sass(text)[0].opcodes.get("LDS") == 2
    assert sass.parse_sass("") == ()


RESOURCE_SAMPLE = """\

Fatbin elf code:
================
arch = sm_90
identifier = student.cu grader-support.cu

Resource usage:
 Common:
  GLOBAL:0

Fatbin elf code:
================
arch = sm_90
identifier = student.cu

Resource usage:
 Common:
  GLOBAL:0 CONSTANT[3]:64
 Function _Z8useconstPf:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function plain_c:
  REG:40 STACK:16 SHARED:2048 LOCAL:0 CONSTANT[0]:556 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_parse_resource_usage_sample():
    constant, funcs = sass.parse_resource_usage(RESOURCE_SAMPLE)
    assert constant == 64
    assert set(funcs) in ({"useconst(float*)", "plain_c"}, {"_Z8useconstPf", "plain_c"})
    assert funcs["plain_c"] == {
        "REG": 40, "STACK": 16, "SHARED": 2048, "LOCAL": 0, "CONSTANT[0]": 556, "TEXTURE": 0, "SURFACE": 0, "SAMPLER": 0,
    }
    assert sass.parse_resource_usage("") == (0, {})
