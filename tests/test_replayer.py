"""The counter replayer's groundwork (``--counters replay``): the launch recorder compiled into every
graded library, the record parsed as hostile input, the device code taken out of a real build, the
pointer mapping, the task and answers, and the replayer program built with the real nvcc and CUPTI.
What needs a GPU is marked ``gpu`` (and run whole by ``benchmarks/replayer_check.py``)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace as dataclasses_replace
from pathlib import Path

import numpy as np
import pytest

from grader.checks.correctness import launcher_spec
from grader.checks.counters.replay import cubin, service
from grader.checks.counters.replay import record as rec
from grader.checks.counters.replay.collect import array_slots
from grader.checks.counters.replay.plan import Alloc, ArraySlot, Copy, Free, Launch, Memset, Patch, SymbolCopy, Unreplayable, find, plan_call
from grader.checks.counters.replay.record import CopyRecord, LaunchRecord, MalformedRecord, SymbolRecord, parse
from grader.checks.counters.replay.task import BadAnswer, CaseTask, case_result, parse_line, task_text
from grader.cli import _options, _parser
from grader.host import toolchain
from grader.isolation.build import RECORDED_CALLS, WRAPPED_LAUNCHES, lab_build
from grader.isolation.options import GradeOptions
from grader.isolation.sandbox import Sandbox
from grader.labspec.labs import find_lab, lab_ids
from grader.worker.buffers import Slot, layout
from grader.worker.protocol import Kind, record_task, tool_case_task

# ---------------------------------------------------------------- a record as the support file writes one

MASK = "0000803f" * 3  # three 1.0f
M_ADDR, P_ADDR, MASK_ADDR, SCRATCH = 0x7F0000000000, 0x7F0000100000, 0x55550000, 0x7F0000200000
ARRAYS = (ArraySlot("in", 4096, "input", False), ArraySlot("out", 4096, "output", False, b"\x00\x00\xc0\x7f"),
          ArraySlot("mask", 12, "input", True))


def ptr(value: int) -> str:
    return "8:" + value.to_bytes(8, "little").hex()


def i32(value: int) -> str:
    return "4:" + value.to_bytes(4, "little").hex()


GOOD = "\n".join([
    f"symbol mask_c 0 12 h2d {MASK_ADDR} 0 {MASK}",
    f"malloc {SCRATCH} 4096",
    f"memset {SCRATCH} 0 4096 0",
    f"copy d2d {SCRATCH} {M_ADDR} 4096 0 -",
    f"launch plain _Z4convPKfPfi 4 1 1 256 1 1 0 0 {ptr(SCRATCH + 16)} {ptr(P_ADDR)} {i32(1024)}",
    f"free {SCRATCH}",
    "",
])
MODULE = cubin.Module(Path("/x/module.cubin"), {"_Z4convPKfPfi": cubin.Kernel("_Z4convPKfPfi", (8, 8, 4))},
                      {"mask_c": cubin.Variable("mask_c", 128)})


def reply(text: object = GOOD, **arrays: object) -> dict[str, object]:
    return {"text": text, "arrays": arrays or {"in": M_ADDR, "out": P_ADDR, "mask": MASK_ADDR}}


def test_a_record_parses_into_typed_operations_in_order():
    record = parse(reply(), ["in", "out", "mask"])
    assert [type(op).__name__ for op in record.ops] == ["SymbolRecord", "AllocRecord", "MemsetRecord", "CopyRecord",
                                                         "LaunchRecord", "FreeRecord"]
    launch = record.launches[0]
    assert launch == LaunchRecord("_Z4convPKfPfi", (4, 1, 1), (256, 1, 1), 0,
                                  ((SCRATCH + 16).to_bytes(8, "little"), P_ADDR.to_bytes(8, "little"), (1024).to_bytes(4, "little")))
    assert record.ops[0] == SymbolRecord("mask_c", 0, 12, False, MASK_ADDR, bytes.fromhex(MASK))
    assert record.ops[3] == CopyRecord("d2d", SCRATCH, M_ADDR, 4096, None)
    assert record.unsupported == () and record.arrays["mask"] == MASK_ADDR


@pytest.mark.parametrize("value,needle", [
    ("not a dict", "exactly text and arrays"),
    ({"text": GOOD, "arrays": {}, "extra": 1}, "exactly text and arrays"),
    (reply(GOOD, **{"in": M_ADDR, "out": P_ADDR}), "does not name exactly"),
    (reply(GOOD, **{"in": "0x7f", "out": P_ADDR, "mask": 1}), "address of in"),
    (reply(GOOD, **{"in": True, "out": P_ADDR, "mask": 1}), "address of in"),
    (reply(GOOD, **{"in": -1, "out": P_ADDR, "mask": 1}), "address of in"),
    (reply(GOOD, **{"in": 1 << 64, "out": P_ADDR, "mask": 1}), "address of in"),
    (reply(12345), "ASCII"),
    (reply("launch plain k 1 1 1 1 1 1 0 0\nlaunch plain é 1 1 1 1 1 1 0 0\n"), "ASCII"),
    (reply("x" * (rec.TEXT_LIMIT + 1)), "ASCII of at most"),
    (reply("free 0\n" * 4097), "more than 4096 lines"),
    (reply(GOOD[: GOOD.index(" 256 1 1")]), "line 5"),  # truncated mid-launch
    (reply("launch plain k 1 1 1 32 1 1 0 0 8:00\n"), "size's worth of hex"),
    (reply("launch plain k 1 1 1 32 1 1 0 0 4:0000zz00\n"), "size's worth of hex"),
    (reply("launch plain k 1 1 1 32 1 1 0 0 4:-\n"), "no bytes"),
    (reply("launch plain k 1 1 1 32 1 1 0 0 " + " ".join(["4:00000000"] * 257) + "\n"), "more than 256 parameters"),
    (reply("launch plain k 1 1 1 32 1 1 0 0 " + " ".join(["4096:" + "00" * 4096] * 2) + "\n"), "bytes of parameters"),
    (reply("launch plain k; 1 1 1 32 1 1 0 0\n"), "not a symbol name"),
    (reply("launch cooperative k 1 1 1 32 1 1 0 0\n"), "not a launch"),
    (reply("launch plain k 1 70000 1 32 1 1 0 0\n"), "below 65536"),
    (reply("malloc -5 16\n"), "not a count"),
    (reply("malloc 007 16\n"), "not a count"),
    (reply("malloc 1 16 7\n"), "fields"),
    (reply("memset 1 256 16 0\n"), "below 256"),
    (reply("memset 1 0 16 2\n"), "stream"),
    (reply("copy up 1 2 4 0 -\n"), "unknown kind"),
    (reply("symbol mask_c 0 4 d2d 1 0 00000000\n"), "host bytes for a copy from the device"),
    (reply("unsupported teleport\n"), "unknown call"),
    (reply("exec /bin/sh\n"), "unknown operation"),
])
def test_hostile_records_are_refused_with_the_reason(value, needle):
    """A worker's reply is the student's to write: anything but what the support file writes is
    refused (the case then goes to the profiler), never half-read."""
    with pytest.raises(MalformedRecord) as caught:
        parse(value, ["in", "out", "mask"])
    assert needle in str(caught.value)


@pytest.mark.parametrize("text,reason", [
    (None, rec.TOO_LONG),
    ("launch plain k 1 1 1 32 1 1 0 1\n", rec.NON_DEFAULT_STREAM),
    ("memset 1 0 16 1\n", rec.NON_DEFAULT_STREAM),
    ("launch plain ? 1 1 1 32 1 1 0 0\n", rec.NAMELESS),
    ("symbol ? 0 4 h2d 1 0 00000000\n", rec.NAMELESS),
    ("launch plain k 1 1 1 32 1 1 0 0 ?\n", "would not describe"),
    ("launch plain k 0 1 1 32 1 1 0 0\n", "invalid launch configuration"),
    ("launch plain k 1 1 1 64 64 1 0 0\n", "invalid launch configuration"),
    ("unsupported graph\n", "CUDA graph"),
    ("unsupported driver-api\n", "driver API"),
    ("unsupported managed-memory\n", "managed memory"),
])
def test_well_formed_records_of_what_cannot_be_replayed_say_why(text, reason):
    record = parse(reply(text), ["in", "out", "mask"])
    assert any(reason in why for why in record.unsupported), record.unsupported
    with pytest.raises(Unreplayable, match="the launcher uses"):
        plan_call(record, ARRAYS, MODULE)


# ---------------------------------------------------------------- the mapping of recorded addresses

def test_find_maps_an_address_to_the_buffer_it_falls_in_or_ends():
    from grader.checks.counters.replay.plan import _Region

    regions = [_Region(0, 1000, 100, False), _Region(1, 1100, 50, False), _Region(2, 5000, 10, False, live=False)]
    assert find(1000, regions)[0].buffer == 0 and find(1099, regions)[1] == 99
    assert find(1100, regions)[0].buffer == 1  # the next buffer's start, not the first one's end
    assert find(1150, regions) == (regions[1], 50)  # one past the end of the last
    assert find(999, regions) is None and find(5003, regions) is None  # before any; a freed one


def test_a_recorded_call_is_planned_onto_the_replays_own_buffers():
    plan = plan_call(parse(reply(), ["in", "out", "mask"]), ARRAYS, MODULE)
    kinds = [(b.index, b.kind, b.name, b.host) for b in plan.buffers]
    assert kinds == [(0, "input", "in", False), (1, "output", "out", False), (2, "input", "mask", True), (3, "scratch", "", False)]
    assert plan.buffers[1].fill == b"\x00\x00\xc0\x7f"
    assert plan.steps == (
        SymbolCopy("mask_c", 0, 2, 0, 12),  # from the launcher's own host array, not the recorded bytes
        Alloc(3), Memset(3, 0, 0, 4096), Copy(3, 0, 0, 0, 4096),
        Launch("_Z4convPKfPfi", (4, 1, 1), (256, 1, 1), 0, plan.steps[4].params, (Patch(0, 0, 3, 16), Patch(1, 0, 1, 0))),
        Free(3),
    )
    assert plan.kernels == ("_Z4convPKfPfi",) and plan.launches == 1


def _plan(text: str, module: cubin.Module = MODULE):
    return plan_call(parse(reply(text), ["in", "out", "mask"]), ARRAYS, module)


def launch_line(*params: str, kernel: str = "_Z4convPKfPfi") -> str:
    return f"launch plain {kernel} 4 1 1 256 1 1 0 0 {' '.join(params)}\n"


@pytest.mark.parametrize("text,needle", [
    (launch_line(ptr(0x7F00DEAD0000), ptr(P_ADDR), i32(1)), "parameter 1 of _Z4convPKfPfi holds an address"),  # pointer to nowhere
    (launch_line(ptr(M_ADDR), ptr(MASK_ADDR), i32(1)), "parameter 2 of _Z4convPKfPfi points to host memory"),
    (f"malloc {SCRATCH} 64\nfree {SCRATCH}\n" + launch_line(ptr(SCRATCH), ptr(P_ADDR), i32(1)), "holds an address"),  # freed
    (launch_line(ptr(M_ADDR), ptr(P_ADDR)), "do not fit its parameters"),
    (launch_line(ptr(M_ADDR), ptr(P_ADDR), ptr(1)), "do not fit its parameters"),
    (launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1), kernel="_Z5otherv"), "does not define"),
    (f"free {M_ADDR}\n" + launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1)), "did not allocate"),
    (f"malloc {M_ADDR + 64} 64\n" + launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1)), "overlap"),
    (f"memset {P_ADDR + 4000} 0 200 0\n" + launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1)), "memset of device memory"),
    (f"copy h2d {M_ADDR} 4660 16 0 -\n" + launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1)), "copy from host memory"),
    (f"copy d2d {M_ADDR} 4660 16 0 -\n" + launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1)), "copy from device memory"),
    (f"symbol other_c 0 4 h2d {MASK_ADDR} 0 -\n" + launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1)), "does not have (other_c)"),
    (f"symbol mask_c 126 4 h2d {MASK_ADDR} 0 -\n" + launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1)), "does not have"),
    (f"malloc {SCRATCH} {(16 << 30) + 1}\n" + launch_line(ptr(M_ADDR), ptr(P_ADDR), i32(1)), "allocates more than"),
    ("memset 0 0 0 0\n", "ran no kernel"),
])
def test_what_cannot_be_mapped_is_not_replayed_and_says_why(text, needle):
    with pytest.raises(Unreplayable) as caught:
        _plan(text)
    assert needle in str(caught.value)


def test_values_and_end_pointers_stay_as_they_were_recorded():
    small = (12345).to_bytes(8, "little").hex()
    plan = _plan(f"copy h2d {M_ADDR} 4660 16 0 {'ab' * 16}\n" + launch_line(f"8:{small}", ptr(P_ADDR + 4096), i32(7)))
    data = plan.buffers[3]
    assert (data.kind, data.host, data.data, data.size) == ("data", True, b"\xab" * 16, 16)  # bytes recorded inline
    launch = plan.steps[1]
    assert isinstance(launch, Launch) and launch.patches == (Patch(1, 0, 1, 4096),)  # a value, then P's end
    assert plan.steps[0] == Copy(0, 0, 3, 0, 16)


def test_words_inside_a_struct_parameter_are_mapped_too():
    module = cubin.Module(Path("/m"), {"k": cubin.Kernel("k", (16,))}, {})
    struct = "16:" + (P_ADDR + 8).to_bytes(8, "little").hex() + (3).to_bytes(8, "little").hex()
    plan = _plan(launch_line(struct, kernel="k"), module)
    assert plan.steps[0].patches == (Patch(0, 0, 1, 8),)


def test_array_slots_carry_the_workers_fill_of_each_output():
    spec = find_lab("histogram")
    slots = tuple(s for s in layout(launcher_spec(spec), {"n": 100, "text": "english"}, 0) if isinstance(s, Slot))
    by_name = {a.name: a for a in array_slots(slots)}
    assert by_name["bins"] == ArraySlot("bins", 28, "output", False, b"\x00" * 4)  # init: zero
    assert by_name["text"] == ArraySlot("text", 100, "input", False, b"")
    spec = find_lab("tiled_matmul")
    slots = tuple(s for s in layout(launcher_spec(spec), {"width": 16}, 0) if isinstance(s, Slot))
    assert array_slots(slots)[2].fill == np.array([np.nan], dtype=np.float32).tobytes()


def test_a_record_task_asks_for_the_record_and_leaves_the_case_as_it_was():
    case = tool_case_task("/lib.so", launcher_spec(find_lab("tiled_matmul")), {"width": 16}, {}, fill=3)
    recorded = record_task(case)
    assert recorded["record"] is True and recorded["kind"] == Kind.CASE.value and recorded["fill"] == 3
    assert "record" not in case


# ---------------------------------------------------------------- the task and the replayer's answers

def test_a_task_names_buffers_by_number_and_code_by_its_checked_symbols(tmp_path):
    plan = plan_call(parse(reply(), ["in", "out", "mask"]), ARRAYS, MODULE)
    case = CaseTask("c0", ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",), plan,
                    {0: tmp_path / "in0.bin", 2: tmp_path / "in2.bin"}, {1: tmp_path / "out1.bin"})
    lines = task_text("t", tmp_path / "module.cubin", MODULE, [case]).splitlines()
    assert lines[:4] == [f"task t {tmp_path}/module.cubin", "global mask_c", "case c0",
                         "metrics 1 l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]
    assert lines[4:8] == [f"buffer 0 4096 device input file {tmp_path}/in0.bin", "buffer 1 4096 device output pattern 0000c07f",
                          f"buffer 2 12 host input file {tmp_path}/in2.bin", "buffer 3 4096 device scratch none -"]
    params = f"{(SCRATCH + 16).to_bytes(8, 'little').hex()} {P_ADDR.to_bytes(8, 'little').hex()} 00040000"
    assert lines[8:] == ["symbol mask_c 0 2 0 12", "alloc 3", "memset 3 0 0 4096", "copy 3 0 0 0 4096",
                         f"launch _Z4convPKfPfi 4 1 1 256 1 1 0 3 {params}", "patch 0 0 3 16", "patch 1 0 1 0", "free 3",
                         f"output 1 {tmp_path}/out1.bin", "run", "end"]
    with pytest.raises(ValueError, match="not a token"):
        task_text("t", Path("/a folder/module.cubin"), MODULE, [case])


METRICS = {"c0": ("a.sum", "b.sum")}


def test_a_case_s_inputs_are_written_in_c_order_whatever_the_array_s_layout(tmp_path):
    """The replayer reads each input file as the buffer's bytes: a transposed or sliced array is
    written as the contiguous array it stands for, and an empty one as an empty file."""
    from types import SimpleNamespace

    from grader.checks.counters.replay.collect import _case_task

    base = np.arange(48, dtype=np.float32).reshape(6, 8)
    inputs = {"a": base.T, "b": base[:, ::2], "c": np.zeros(0, np.int32), "d": base, "e": np.float16(3.5) * np.ones((), np.float16)}
    buffers = [SimpleNamespace(index=i, kind="input", name=n) for i, n in enumerate(inputs)]
    buffers.append(SimpleNamespace(index=9, kind="output", name="out"))
    case = SimpleNamespace(metrics=("m",))
    task = _case_task("c0", case, SimpleNamespace(buffers=buffers), inputs, tmp_path)
    assert sorted(task.inputs) == [0, 1, 2, 3, 4] and task.outputs == {9: tmp_path / "c0-out9.bin"}
    for i, name in enumerate(inputs):
        assert task.inputs[i].read_bytes() == np.ascontiguousarray(inputs[name]).tobytes(), name
    assert not (tmp_path / "c0-out9.bin").exists()


def test_a_case_answer_is_believed_only_in_its_exact_shape():
    ok = {"case": "c0", "status": "ok", "values": {"a.sum": 524288.0, "b.sum": 0}, "passes": 2, "planned": 2, "ranges": 1,
          "seconds": 0.16}
    result = case_result(ok, METRICS)
    assert result.ok and result.values == {"a.sum": 524288.0, "b.sum": 0.0} and result.passes == 2
    failed = case_result({"case": "c0", "status": "failed", "reason": "launch: cudaErrorIllegalAddress"}, METRICS)
    assert not failed.ok and "cudaErrorIllegalAddress" in failed.reason
    bad = [
        {**ok, "case": "c1"}, {**ok, "status": "great"}, {**ok, "extra": 1}, {**ok, "values": {"a.sum": 1}},
        {**ok, "values": {"a.sum": 1, "b.sum": -1}}, {**ok, "values": {"a.sum": 1, "b.sum": float("nan")}},
        {**ok, "values": {"a.sum": 1, "b.sum": 1e300}}, {**ok, "values": {"a.sum": "1", "b.sum": 1}},
        {**ok, "passes": 0}, {**ok, "passes": True}, {**ok, "planned": 65},
        {"case": "c0", "status": "failed", "reason": 3},
    ]
    for answer in bad:
        with pytest.raises(BadAnswer):
            case_result(answer, METRICS)
    for line in ("x" * (65 << 10), "[1, 2]", "{not json"):
        with pytest.raises(BadAnswer):
            parse_line(line)


# ---------------------------------------------------------------- real builds: the recorder and the device code

@pytest.fixture(scope="module")
def memory_types_build(tmp_path_factory):
    spec = find_lab("memory_types")
    result = lab_build(spec, spec.files.reference, ("sm_90",), tmp_path_factory.mktemp("replayer-cache"))
    assert result.ok and result.library is not None, result.message
    return spec, result.library


def test_every_graded_library_carries_the_recorder_and_its_wrappers(memory_types_build):
    _, library = memory_types_build
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True).stdout
    for name in ("cudalab_grader_record", "cudalab_grader_recorded", "cudalab_grader_launched"):
        assert f" T {name}\n" in symbols
    for name in (*WRAPPED_LAUNCHES, *RECORDED_CALLS):
        assert f" T __wrap_{name}\n" in symbols, name
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True, check=True).stdout
    launcher = code[code.index("<conv1d>:"):]
    launcher = launcher[: launcher.index("\n\n")]
    assert "__wrap_cudaMemcpyToSymbol" in launcher  # the student's call goes through the recorder


def test_the_device_code_is_taken_out_of_a_real_build_with_its_parameter_layout(memory_types_build, tmp_path):
    spec, library = memory_types_build
    modules = cubin.extract(library, tmp_path / "cubins", "sm_90")
    assert len(modules) >= 2  # the student's file and the support file
    module = cubin.module_of(modules, ["_Z12conv1d_tiledPKfPfii"])
    assert isinstance(module, cubin.Module)
    assert module.kernels["_Z12conv1d_tiledPKfPfii"].params == (8, 8, 4, 4)
    assert module.variables["mask_c"].size == 4 * 15  # MAX_MASK_WIDTH floats
    assert cubin.read_cubin(module)[:4] == b"\x7fELF"
    assert "does not define" in cubin.module_of(modules, ["_Z5otherv"])
    assert cubin.module_of(modules, ["_Z5otherv", "_Z12conv1d_tiledPKfPfii"]) == module  # (the case with _Z5otherv is refused by its plan)
    with pytest.raises(cubin.CubinError, match=r"no sm_80 device code \(cuobjdump -xelf wrote .*reference\.sm_90\.cubin"):
        cubin.extract(library, tmp_path / "none", "sm_80")


def test_the_cubin_is_read_as_an_elf_file_not_from_cuobjdumps_listing(tmp_path):
    """Kernels are the entries (a device function is not), a struct parameter keeps its size, and a
    ``__device__`` array is a variable; a file that is not an ELF is refused by name."""
    source = tmp_path / "k.cu"
    source.write_text("""
struct Box { double lo, hi; int n; };
__device__ float table_d[16];
__constant__ int consts_c[3];
__device__ __noinline__ float helper(float x) { return x * table_d[1]; }
__global__ void scaled(Box box, const float* in, float* out, char flag) { out[0] = helper(in[0]) + box.lo + consts_c[flag]; }
__global__ void empty() {}
""")
    subprocess.run([str(toolchain.find("nvcc")), "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.sm_90.cubin"), str(source)],
                   check=True, capture_output=True)
    module = cubin.parse_elf((tmp_path / "k.sm_90.cubin").read_bytes(), tmp_path / "k.sm_90.cubin")
    assert {k: v.params for k, v in module.kernels.items()} == {"_Z6scaled3BoxPKfPfc": (24, 8, 8, 1), "_Z5emptyv": ()}
    assert {v.name: v.size for v in module.variables.values()} == {"table_d": 64, "consts_c": 12}
    with pytest.raises(cubin.CubinError, match=r"^k\.cu is not a readable cubin"):
        cubin.parse_elf(source.read_bytes(), source)


# ---------------------------------------------------------------- the replayer program

#: A host program around the real support file: its wrappers called as a launcher would call
#: them, with the runtime's allocation, free and copy stood in for (no GPU here).
HELD_PROGRAM = r"""
#include <cuda_runtime.h>
#include <stdio.h>
extern "C" cudaError_t __wrap_cudaMalloc(void** p, size_t n);
extern "C" cudaError_t __wrap_cudaFree(void* p);
extern "C" cudaError_t __wrap_cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k);
extern "C" cudaError_t __wrap_cudaMemset(void* p, int v, size_t n);
extern "C" void cudalab_grader_record(int on);
extern "C" long cudalab_grader_recorded(char* buf, long len);
static char device[1 << 16];
static size_t used = 0;
extern "C" cudaError_t __real_cudaMalloc(void** p, size_t n) { *p = device + used; used += n; return cudaSuccess; }
extern "C" cudaError_t __real_cudaFree(void*) { return cudaSuccess; }
extern "C" cudaError_t __real_cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind) { return cudaSuccess; }
extern "C" cudaError_t __real_cudaMemset(void*, int, size_t) { return cudaSuccess; }
static float* mask_d = NULL;  // kept between calls, as the global-memory baseline keeps its mask
static void call(const float* mask, int width) {
    if (mask_d == NULL) __wrap_cudaMalloc((void**)&mask_d, 64 * sizeof(float));
    __wrap_cudaMemcpy(mask_d, mask, width * sizeof(float), cudaMemcpyHostToDevice);
}
static void recorded(const char* title) {
    static char text[1 << 16];
    cudalab_grader_recorded(text, sizeof text);
    printf("== %s\n%s", title, text);
}
int main() {
    const float mask[3] = {1.0f, 1.0f, 1.0f};
    call(mask, 3);  // the process's first call: not recorded
    printf("at %llu\n", (unsigned long long)(size_t)mask_d);
    cudalab_grader_record(1);
    call(mask, 3);
    __wrap_cudaMemset(mask_d + 1, 0, 4);  // (written once per record)
    cudalab_grader_record(0);
    recorded("held");
    cudalab_grader_record(1);
    void* scratch = NULL;
    __wrap_cudaMalloc(&scratch, 32);
    __wrap_cudaMemset(scratch, 0, 32);
    __wrap_cudaFree(mask_d);
    cudalab_grader_record(0);
    recorded("freed");
    cudalab_grader_record(1);
    __wrap_cudaMemset(mask_d, 0, 4);  // freed: not held any more
    __wrap_cudaMemset(scratch, 0, 4);  // allocated in an earlier record and held since
    cudalab_grader_record(0);
    recorded("after");
    return 0;
}
"""


def test_memory_a_launcher_allocated_in_an_earlier_call_is_recorded_as_allocated_where_a_record_first_uses_it(tmp_path):
    """The course's global-memory baseline allocates its mask once, in a static pointer, then copies
    into it on every call. A record made after the process's first call (by the correctness worker,
    once its cases are over) named memory the replay never saw allocated, and the case went to
    Nsight Compute. Must: such memory is written as allocated right before the record's first
    operation on it, once per record; memory freed is not; and the record plans onto the replay's
    own buffers. (The real support file, built with the real nvcc; the runtime's calls stood in for.)"""
    from grader.isolation.build import SUPPORT_SOURCE

    nvcc = toolchain.find("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    program, others, exe = tmp_path / "held.cu", tmp_path / "others.c", tmp_path / "held"
    program.write_text(HELD_PROGRAM)
    stood_in = ("cudaMalloc", "cudaFree", "cudaMemcpy", "cudaMemset")
    others.write_text("".join(f"void __real_{name}(void) {{}}\n" for name in (*WRAPPED_LAUNCHES, *RECORDED_CALLS)
                              if name not in stood_in))  # (the wrapped calls the program never makes)
    built = subprocess.run([str(nvcc), "-o", str(exe), str(program), str(SUPPORT_SOURCE), str(others)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout
    at = int(out.split("\n")[0].removeprefix("at "))
    held, freed, after = (part.strip().splitlines() for part in out.split("== ")[1:])
    assert held == ["held", f"malloc {at} 256", f"copy h2d {at} {held[2].split()[3]} 12 0 {MASK}", f"memset {at + 4} 0 4 0"]
    scratch = int(freed[1].split()[1])
    assert freed == ["freed", f"malloc {scratch} 32", f"memset {scratch} 0 32 0", f"malloc {at} 256", f"free {at}"]
    assert after == ["after", f"memset {at} 0 4 0", f"malloc {scratch} 32", f"memset {scratch} 0 4 0"]
    launch = f"launch plain _Z4convPKfPfi 4 1 1 256 1 1 0 0 {ptr(at)} {ptr(P_ADDR)} {i32(3)}"  # (as the kernel would be)
    record = parse({"text": "\n".join([*held[1:], launch]) + "\n", "arrays": {"in": M_ADDR, "out": P_ADDR, "mask": MASK_ADDR}},
                   ["in", "out", "mask"])
    plan = plan_call(record, ARRAYS, MODULE)
    assert [type(step).__name__ for step in plan.steps] == ["Alloc", "Copy", "Memset", "Launch"]
    alloc, launched = plan.steps[0], plan.steps[-1]
    assert isinstance(alloc, Alloc) and isinstance(launched, Launch) and launched.patches[0].buffer == alloc.buffer


@pytest.fixture(scope="module")
def replayer(tmp_path_factory) -> Path:
    try:
        service.find_cupti()
    except service.ServiceError as exc:
        pytest.skip(f"no CUPTI here: {exc}")
    return service.replayer_binary(("sm_90",), tmp_path_factory.mktemp("replayer-build"))


#: Replay passes per metric set on GH100 (H100, H200), as the Profiler Host API plans them (the probe's table).
L1REQ, L1SEC = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
UNION = (L1REQ, L1SEC, "smsp__sass_data_bytes_mem_global_op_ld.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "smsp__sass_inst_executed_op_shared_ld.sum",
         "smsp__sass_inst_executed_op_shared_st.sum", "smsp__sass_inst_executed_op_global_red.sum",
         "smsp__sass_inst_executed_op_global_atom.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")


def test_the_replayer_builds_with_the_real_nvcc_and_links_cupti_but_not_the_driver(replayer):
    linked = subprocess.run(["ldd", str(replayer)], capture_output=True, text=True).stdout
    assert "libcupti" in linked and "libcuda.so" not in linked  # (the driver is the runtime's to load, on a GPU)
    again = service.replayer_binary(("sm_90",), replayer.parent.parent.parent)
    assert again == replayer  # cached


def test_a_batch_builds_the_replayer_beside_its_submissions_and_only_where_it_will_replay(replayer, tmp_path, monkeypatch):
    """On a cold cache every lab's counters waited for one 8 s nvcc build of the replayer: a batch's
    prebuild now builds it with the submissions (real nvcc), and not for `--counters ncu` or
    without a GPU."""
    from grader.checks.families import counters as family
    from grader.engine.repo import prebuild
    from grader.host.gpu import GpuInfo, GpuProbe

    h100 = GpuProbe(GpuInfo("NVIDIA H100 80GB HBM3", (9, 0), "580.65", 0, "GPU-1111aaaa"))
    spec = find_lab("memory_types")
    items = [(spec, spec.files.stub, "student.cu")]
    assert family.CounterFamily().helpers(GradeOptions(cache_dir=tmp_path)) == []  # (no GPU here)
    monkeypatch.setattr(family, "probe_for", lambda options: h100)
    assert family.CounterFamily().helpers(GradeOptions(cache_dir=tmp_path, counter_source="ncu")) == []
    assert family.CounterFamily().helpers(GradeOptions(cache_dir=tmp_path, counters=False)) == []
    prebuild(items, GradeOptions(cache_dir=tmp_path, gpu=False, archs=("sm_90",)))
    assert list((tmp_path / "helpers").glob("replay-*/replay")) == [tmp_path / "helpers" / replayer.parent.name / "replay"]


def test_the_pass_planner_gives_the_probes_pass_counts_without_a_gpu(replayer):
    sets = [UNION, (L1REQ,), (L1REQ, L1SEC), ("dram__bytes_read.sum", "dram__bytes_write.sum"), ("gpu__time_duration.sum",),
            ("no_such_metric.sum",)]
    assert service.planned_passes(replayer, sets, "GH100")[:5] == [4, 1, 2, 1, 1]
    assert "not available" in str(service.planned_passes(replayer, sets, "GH100")[5])


def test_each_labs_counter_cases_plan_into_the_passes_the_probe_measured(replayer):
    from grader.checks.counters import launched

    expected = {"tiled_matmul": [1, 1], "boundary_checks": [1, 1], "corner_turning": [3, 1], "histogram": [2],
                "memory_types": [1, 1]}
    for lab in lab_ids():
        sets = list(launched.profiles_for(find_lab(lab)).metrics.values())
        assert service.planned_passes(replayer, sets, "GH100") == expected[lab], lab


def test_the_replayer_answers_on_a_pipe_of_its_own_never_on_standard_output(replayer):
    """A student's kernel can printf, and what it prints reaches the replayer's standard output: a
    forged answer line there must not be read. The replayer answers on the descriptor it is given."""
    import os

    read, write = os.pipe()
    try:
        done = subprocess.run([str(replayer), "--answers", str(write)], input=b"quit\n", capture_output=True, timeout=60,
                              pass_fds=(write,))
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as answers:
        first = json.loads(answers.readline())
    assert done.stdout == b"" and first["status"] in ("ready", "unavailable")
    assert subprocess.run([str(replayer)], capture_output=True, timeout=60).returncode == 2  # (no answers' pipe: no service)


def test_a_replayer_without_a_gpu_says_so_and_every_case_goes_to_the_profiler(replayer, tmp_path):
    from grader.host import gpu

    if gpu.probe().gpu is not None:
        pytest.skip("this machine has a GPU")
    from grader.isolation import sandbox

    for confined in {Sandbox(None, reason="off"), sandbox.detect()}:  # (answers come through the sandbox too)
        runner = service.Replayer(replayer, tmp_path, confined)
        results = runner.run("task t /x\nend\n", {"c0": ("a.sum",), "c1": ("b.sum",)}, 30.0)
        assert {r.id for r in results.values()} == {"c0", "c1"}
        assert all("unavailable here: no CUDA device" in r.reason for r in results.values()), (confined, results)
        runner.close()


STAND_IN = """#!PYTHON
# speaks the replayer's protocol; notes whether the profiling lock was held when it prepared and profiled
import fcntl, json, os, sys, time
answers = os.fdopen(int(sys.argv[2]), "w")
def say(obj):
    answers.write(json.dumps(obj) + "\\n"); answers.flush()
def lock_held():
    with open(LOCK, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False
open(STARTS, "a").write(json.dumps({"lock_held": lock_held()}) + "\\n")
if os.path.exists(STARTS + ".busy"):  # (another profiler has the counters, once)
    os.remove(STARTS + ".busy")
    say({"status": "unavailable", "reason": "the GPU's counters are not available: CUPTI_ERROR_HARDWARE_BUSY"})
    sys.exit(0)
if os.path.exists(STARTS + ".none"):
    say({"status": "unavailable", "reason": "no CUDA device"})
    sys.exit(0)
say({"status": "ready", "chip": "GH100"})
for line in sys.stdin:
    if line.startswith("quit"):
        break
    task = line.split()[1]
    cases = []
    for line in sys.stdin:
        if line.startswith("case "):
            cases.append(line.split()[1])
        if line.startswith("end"):
            break
    notes = {"prepared": lock_held()}
    slow = task.startswith("slow")  # (prepares for 0.3 s, profiles for 0.2 s, answers for 0.1 s)
    time.sleep(0.3 if slow else 0)
    say({"task": task, "status": "prepared", "seconds": 0.1})
    assert sys.stdin.readline() == "go\\n"
    notes["profiled"] = lock_held()
    if task == "hang":
        time.sleep(600)
    time.sleep(0.2 if slow else 0)
    say({"task": task, "status": "profiled", "seconds": 0.2})
    open(NOTES, "a").write(json.dumps(notes) + "\\n")
    for case in cases:
        if task == "forged":
            say({"case": case, "status": "ok", "values": {"a.sum": 1}, "passes": 1, "planned": 1, "ranges": 1, "seconds": 0, "extra": 1})
        else:
            say({"case": case, "status": "ok", "values": {"a.sum": 7}, "passes": 1, "planned": 1, "ranges": 1, "seconds": 0.1})
    time.sleep(0.1 if slow else 0)
    say({"task": task, "status": "done", "seconds": 0.3})
"""


def stand_in_locks(tmp_path, monkeypatch):
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    monkeypatch.setenv("GRADER_LOCK_DIR", str(locks))
    return locks


def write_stand_in(tmp_path, locks):
    """STAND_IN at ``tmp_path / "replay"``: its notes in ``notes``, its starts in ``starts``."""
    import sys

    stand_in = tmp_path / "replay"
    stand_in.write_text(STAND_IN.replace("PYTHON", sys.executable).replace("LOCK", repr(str(locks / "grader-ncu.lock")), 1)
                        .replace("NOTES", repr(str(tmp_path / "notes")), 1).replace("STARTS", repr(str(tmp_path / "starts"))))
    stand_in.chmod(0o755)
    return stand_in


def test_a_replayer_starts_holding_the_profiling_lock_and_a_busy_gpu_is_tried_again(tmp_path, monkeypatch):
    """Its start asks whether the counters are free, so it holds the GPU's profiling lock (two
    seats of a class started their replayers while the other profiled: CUDA said the counters were
    busy, and every student went to Nsight Compute). Where they are busy all the same, the cases
    of that task say so and the next task starts it again; any other reason stands."""
    locks = stand_in_locks(tmp_path, monkeypatch)
    stand_in = write_stand_in(tmp_path, locks)
    (tmp_path / "starts.busy").touch()
    stage = tmp_path / "stage"
    stage.mkdir()
    runner = service.Replayer(stand_in, stage, Sandbox(None, reason="off"))
    asked = {"c0": ("a.sum",)}
    text = "task t /x.cubin\ncase c0\nrun\nend\n"
    try:
        busy = runner.run(text, asked, 30.0)
        assert busy["c0"].reason == ("the counter replayer is unavailable here: the GPU's counters are not available: "
                                     "CUPTI_ERROR_HARDWARE_BUSY") and runner.proc is None and not runner.unavailable
        assert runner.run(text, asked, 30.0)["c0"].values == {"a.sum": 7.0}
        starts = [json.loads(line) for line in (tmp_path / "starts").read_text().splitlines()]
        assert starts == [{"lock_held": True}, {"lock_held": True}]
    finally:
        runner.close()

    (tmp_path / "starts.none").touch()
    for _ in range(2):
        none = runner.run(text, asked, 30.0)
        assert none["c0"].reason == "the counter replayer is unavailable here: no CUDA device" and runner.proc is None
    assert len((tmp_path / "starts").read_text().splitlines()) == 3  # (not started again)


def test_a_task_is_prepared_outside_the_profiling_lock_and_profiled_inside_it(tmp_path, monkeypatch):
    """The replayer's protocol, against a stand-in that speaks it (the real one runs in the GPU tests):
    only the profiling holds the GPU's profiling lock; an answer out of shape, or a replayer that
    stops answering, fails every case of the task with the reason and ends the process."""
    locks = stand_in_locks(tmp_path, monkeypatch)
    stand_in = write_stand_in(tmp_path, locks)
    stage = tmp_path / "stage"
    stage.mkdir()
    runner = service.Replayer(stand_in, stage, Sandbox(None, reason="off"))
    asked = {"c0": ("a.sum",), "c1": ("a.sum",)}
    text = "task {} /x.cubin\ncase c0\nrun\ncase c1\nrun\nend\n"
    try:
        results = runner.run(text.format("ok"), asked, 30.0)
        assert {k: (r.values, r.reason) for k, r in results.items()} == {"c0": ({"a.sum": 7.0}, ""), "c1": ({"a.sum": 7.0}, "")}
        assert json.loads((tmp_path / "notes").read_text()) == {"prepared": False, "profiled": True}
        assert runner.profiled_seconds > 0 and runner.proc is not None  # (kept for the next task)

        results = runner.run(text.format("forged"), asked, 30.0)
        assert all("a malformed answer (its keys are" in r.reason for r in results.values()), results
        assert runner.proc is None  # (ended: the next task starts a fresh one)

        results = runner.run(text.format("hang"), asked, 2.0)
        assert all(r.reason == "the replayer stopped: no answer within 2 s" for r in results.values()), results
        assert runner.proc is None
        assert not any(json.loads(line).get("hang") for line in (tmp_path / "notes").read_text().splitlines())
    finally:
        runner.close()
    import fcntl

    with open(locks / "grader-ncu.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (let go after the hung task)


def test_a_tasks_phases_are_told_with_the_wait_for_the_task_before_it(tmp_path, monkeypatch):
    """Each phase of a task (the seconds a lab's report keeps as ``counters.*``): its wait for the
    process while another task holds it, the preparing, the wait for the profiling lock, the
    profiling and the answers. Two labs' tasks sent at once: the second waits out the first."""
    import threading
    import time

    stand_in = write_stand_in(tmp_path, stand_in_locks(tmp_path, monkeypatch))
    stage = tmp_path / "stage"
    stage.mkdir()
    runner = service.Replayer(stand_in, stage, Sandbox(None, reason="off"))
    runner.warm()  # (its start is not a task's)
    told: list[dict[str, float]] = [{}, {}]

    def task(k: int) -> None:
        results = runner.run(f"task slow{k} /x.cubin\ncase c0\nrun\nend\n", {"c0": ("a.sum",)}, 30.0,
                             lambda name, s: told[k].__setitem__(name, told[k].get(name, 0.0) + s))
        assert results["c0"].values == {"a.sum": 7.0}

    try:
        first = threading.Thread(target=task, args=(0,))
        first.start()
        time.sleep(0.1)  # (the first holds the process)
        task(1)
        first.join(10)
    finally:
        runner.close()
    phases = ["counters.queue", "counters.prepare", "counters.lock", "counters.profile", "counters.finish"]
    assert list(told[0]) == list(told[1]) == phases, told
    for spent in told:
        assert 0.3 <= spent["counters.prepare"] < 2.0 and 0.2 <= spent["counters.profile"] < 2.0, spent
        # (the finish is counted from when the grader reads "profiled", which may come a little after
        # the stand-in said it, so it can fall short of the stand-in's own 0.1 s)
        assert 0.05 <= spent["counters.finish"] < 2.0 and spent["counters.lock"] < 0.5, spent
    assert told[0]["counters.queue"] < 0.2 and 0.4 <= told[1]["counters.queue"] < 3.0, told  # (0.6 s of the first, less 0.1 s)


def test_phases_are_told_end_to_end_and_a_moment_given_is_bounded_by_the_last_phase_and_now():
    import time

    told: list[tuple[str, float]] = []
    phase = service.Phases(lambda name, seconds: told.append((name, seconds)), time.monotonic() - 1.0)
    phase("record")
    phase.until("cases", time.monotonic() - 60)  # (before the last phase ended: nothing)
    time.sleep(0.05)
    phase.until("wait", time.monotonic() + 60)  # (not yet come: up to now)
    time.sleep(0.05)
    phase.skip()
    phase("plan")
    (first, a), (second, b), (third, c), (fourth, d) = told
    assert (first, second, third, fourth) == ("counters.record", "counters.cases", "counters.wait", "counters.plan")
    assert 1.0 <= a < 1.5 and b == 0.0 and 0.05 <= c < 0.5 and d < 0.04, told


def test_without_a_gpu_every_case_goes_to_the_profiler_with_the_reason(memory_types_build, replayer, tmp_path):
    """The whole replay path, run where it cannot succeed: the recording worker finds no GPU, and
    each case, the student's and the baselines', is left to the profiler with that reason; nothing
    is settled, and nothing is kept for the baselines."""
    import time

    from grader.checks.counters import launched
    from grader.checks.counters.replay import collect
    from grader.host import gpu
    from grader.isolation.launch import Isolation
    from grader.isolation.submission import Submission
    from grader.labspec.labs import load_problem

    if gpu.probe().gpu is not None:
        pytest.skip("this machine has a GPU (the GPU tests replay for real)")
    spec, library = memory_types_build
    sub = Submission(spec, "reference.cu", library, (), ("sm_90",), load_problem(spec), Isolation(Sandbox(None, reason="off")),
                     replayer.parent.parent.parent, tmp_path / "work", time.monotonic() + 300, 300.0, "secret",
                     gpu.GpuInfo("none", (9, 0), "0"))
    profiles = launched.profiles_for(spec)
    notes: list[str] = []
    told: list[str] = []
    assert collect.replayed(sub, profiles, notes.append, spent=lambda name, seconds: told.append(name)) == {}
    # the phases that ran are told (the student's and each baseline's: record, extract, plan), and none of the replayer's
    assert sorted(set(told)) == ["counters.ahead", "counters.extract", "counters.plan", "counters.record"], told
    assert told.count("counters.record") == 3 and told.count("counters.ahead") == 1, told
    mine = [n for n in notes if "baseline:" not in n]
    baselines = [n for n in notes if "baseline:" in n]
    assert len(mine) == len(profiles.metrics) == 2
    assert all("reference.cu: counters of" in n and "instead of the replayer, if every correctness case passes "
               "(the recording run failed" in n for n in mine), notes  # (only then does the profiler count them)
    assert sorted(n.split(":")[0] for n in baselines) == ["[memory_types] the global baseline", "[memory_types] the reference baseline"]
    assert all("by Nsight Compute instead of the replayer, if the student's correctness cases all pass (the recording run failed" in n
               for n in baselines), notes
    assert not any("your code" in n for n in baselines), notes  # (a baseline's run is the grader's own code)
    assert not (replayer.parent.parent.parent / "counters").exists() or not any((replayer.parent.parent.parent / "counters").iterdir())
    assert set(profiles.refused) == set(profiles.metrics)  # (each case's reason goes into its checks' report)
    assert all(r.startswith("the recording run failed") for r in profiles.refused.values()), profiles.refused
    # the lab's cases ended badly (its worker may run nothing more): the replay records in a worker of its own
    import threading

    from grader.checks.counters.replay.handoff import Recorder

    recorder, again = Recorder(), []
    lab = threading.Thread(target=recorder.serve, args=(None,))
    lab.start()
    phases: dict[str, float] = {}
    assert collect.replayed(sub, launched.profiles_for(spec), again.append, recorder, phases.__setitem__) == {}
    lab.join(5)
    assert phases["counters.cases"] == 0.0 and "counters.record" in phases  # (served before it was asked: no wait)
    assert not lab.is_alive() and [n for n in again if "baseline:" not in n] == mine


def test_a_counter_check_reports_what_counted_it_and_why_the_replayer_did_not(tmp_path):
    """``counted_by`` in a counter check's measured figures says which tool's counts it was judged
    on, and ``replayer_refused`` why the replayer left its case to Nsight Compute."""
    import time

    from grader.checks.counters import ncu as counters
    from grader.checks.counters.ncu import CounterRun, Profiles
    from grader.host import gpu
    from grader.isolation.launch import Isolation
    from grader.isolation.submission import Submission
    from grader.labspec.labs import load_problem

    spec = find_lab("tiled_matmul")
    built = lab_build(spec, spec.files.reference, ("sm_90",), tmp_path / "cache")
    assert built.ok and built.library is not None, built.message
    sub = Submission(spec, "reference.cu", built.library, (), ("sm_90",), load_problem(spec), Isolation(Sandbox(None, reason="off")),
                     tmp_path / "cache", tmp_path / "work", time.monotonic() + 300, 300.0, "secret", gpu.GpuInfo("none", (9, 0), "0"))
    check = spec.counters[0]
    metric = check.metric_names[0]
    results = []
    for replayed, refused in ((True, ""), (False, "the launcher uses work on a stream other than the default stream")):
        profiles = Profiles(spec.counters)
        key = profiles.case(check)
        profiles.settle("student", key, CounterRun({metric: 524288.0}, ("matmul_tiled",), replayed=replayed))
        profiles.settle(f"baseline {check.baseline}", key, CounterRun({metric: 8388608.0}, ("matmul_naive",)))
        if refused:
            profiles.refused[key] = refused
        results.append(counters.grade(sub, check, profiles))
    by_replayer, by_ncu = results
    assert by_replayer.outcome is by_ncu.outcome and by_replayer.points == by_ncu.points and by_replayer.message == by_ncu.message
    assert by_replayer.measured["counted_by"] == "replayer" and "replayer_refused" not in by_replayer.measured
    assert by_ncu.measured["counted_by"] == "ncu"
    assert by_ncu.measured["replayer_refused"] == "the launcher uses work on a stream other than the default stream"


def test_a_replayed_case_is_kept_for_the_next_grade_of_the_same_code(tmp_path):
    """A regrade of unchanged code replays nothing again: the replayer's run is kept beside the
    profiler's (keyed on the library, the GPU and the case) and still says it was the replayer's."""
    import time

    from grader.checks.counters import batch
    from grader.checks.counters.ncu import CounterRun, Profiles
    from grader.host import gpu
    from grader.isolation.launch import Isolation
    from grader.isolation.submission import Submission
    from grader.labspec.labs import load_problem

    spec = find_lab("tiled_matmul")
    built = lab_build(spec, spec.files.reference, ("sm_90",), tmp_path / "cache")
    assert built.ok and built.library is not None, built.message
    sub = Submission(spec, "reference.cu", built.library, (), ("sm_90",), load_problem(spec), Isolation(Sandbox(None, reason="off")),
                     tmp_path / "cache", tmp_path / "work", time.monotonic() + 300, 300.0, "secret", gpu.GpuInfo("none", (9, 0), "0"))
    asked: list[int] = []

    def replay(sub, profiles):
        asked.append(len(profiles.metrics))
        return {("student", key): CounterRun({m: 1.0 for m in metrics}, ("matmul_tiled",), replayed=True)
                for key, metrics in profiles.metrics.items() if ("student", key) not in profiles.runs}

    profiles = Profiles(spec.counters)
    batch.counted(sub, None, lambda: True, profiles, replay=replay)
    assert asked == [len(profiles.metrics)] and all(run.replayed and not run.cached for run in profiles.runs.values()
                                                    if run.kernels == ("matmul_tiled",))
    again = Profiles(spec.counters)
    for key in again.metrics:  # (the baselines' runs are not the student's: settled here as kept elsewhere)
        again.settle(f"baseline {spec.counters[0].baseline}", key, CounterRun({m: 2.0 for m in again.metrics[key]}, ("matmul_naive",)))
    batch.counted(sub, None, lambda: True, again, replay=replay)
    assert asked == [len(profiles.metrics)] * 2  # (asked again, it found nothing of the student's to replay)
    kept = [again.runs[("student", key)] for key in again.metrics]
    assert kept and all(run.cached and run.replayed for run in kept)
    # with --counters ncu the replayer's kept runs are not taken: Nsight Compute counts the case again
    by_ncu = Profiles(spec.counters)
    batch.counted(sub, None, lambda: True, by_ncu)
    assert not any(run.replayed for run in by_ncu.runs.values())


# ---------------------------------------------------------------- the option

def test_counters_come_from_the_replayer_unless_ncu_is_asked_for(tmp_path):
    for command in (["grade", "tiled_matmul"], ["grade-repo", str(tmp_path)], ["grade-class", str(tmp_path), "--out", str(tmp_path / "out")]):
        common = [*command, "--cache-dir", str(tmp_path / "cache"), "--no-gpu"]
        plain, asked = _parser().parse_args(common), _parser().parse_args([*common, "--counters", "ncu"])
        assert (_options(plain).counter_source, _options(asked).counter_source) == ("replay", "ncu"), command
    assert GradeOptions().counter_source == "replay"
    with pytest.raises(SystemExit):
        _parser().parse_args(["grade", "tiled_matmul", "--counters", "nsight"])


# ---------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.parametrize("lab_id", lab_ids())
def test_replayed_counters_equal_the_profilers_and_every_verdict_is_the_same(lab_id):
    """Every known solution of the lab graded with ``--counters replay`` and with ``--counters ncu``:
    every exact count equal, every counter verdict the same, and no case left to the profiler."""
    from benchmark_modules import load

    table, problems = load("replayer_check").compare_lab(lab_id)
    assert not problems, table + "\n" + "\n".join(problems)


def test_replies_record_field_stays_out_of_the_reply_check():
    """A worker's ``record`` is judged by the replay path alone (a malformed one sends the case to the
    profiler): the reply check does not turn it into a verdict."""
    from grader.isolation import replies

    task = record_task(tool_case_task("/lib.so", launcher_spec(find_lab("tiled_matmul")), {"width": 16}, {}, fill=3))
    ok = {"status": "ok", "seconds": 0.1, "kernels_launched": ["k"], "record": {"text": "garbage", "arrays": 3}}
    assert replies.problem(task, ok) == ""
    assert json.loads(json.dumps(ok)) == ok


def test_each_cases_recording_is_read_from_its_typed_reply(tmp_path, monkeypatch):
    """The recording run's marked replies, typed: a failed case says why, a case never reached says
    so, and a record the replayer cannot read is named as such (never a verdict)."""
    from types import SimpleNamespace

    from worker_replies import tool_result

    from grader.checks.counters import launched
    from grader.checks.counters.replay import collect
    from grader.isolation.launch import Isolation, RunDirs
    from grader.isolation.toolrun import ToolRun
    from grader.labspec.labs import load_problem

    spec = find_lab("corner_turning")
    cases = [collect._Case(((), k), check, (), tuple(SimpleNamespace(name=n) for n in "MNP"))  # type: ignore[arg-type]
             for k, check in enumerate(launched.profiles_for(spec).checks[:3])]
    assert len({case.check.id for case in cases}) == 3
    results = [{"status": "ok", "seconds": 0.1, "kernels_launched": ["k"], "record": {"text": "garbage", "arrays": 3}},
               {"status": "cuda_error", "error": "an illegal memory access", "sticky": True}]
    monkeypatch.setattr(collect, "run_under_tool", lambda *args: ToolRun(0, "", "", tool_result({"status": "ok", "results": results}), 0.1))
    sub = SimpleNamespace(spec=spec, problem=load_problem(spec), library=tmp_path / "lib.so", cache_dir=None,
                          isolation=Isolation(Sandbox(None, reason="off")), time_left=lambda limit: limit,
                          tool_dirs=lambda name: RunDirs(tmp_path / "in" / name, tmp_path / "out" / name))
    out = collect.recorded(sub, cases)  # type: ignore[arg-type]
    first, second, third = (out[case.check.id] for case in cases)
    assert isinstance(first, str) and first.startswith("a malformed record")
    assert second == "the recording run failed: an illegal memory access"
    assert third == "the recording run failed: no reply"


def _served(status: str, record: object = None, reason: str = ""):
    from grader.isolation.replies import Reply
    from grader.isolation.runner import TaskResult
    from grader.worker.protocol import Status

    reply = Reply(Status(status), record=record) if status == "ok" else None
    return TaskResult(status, reply, reason, "", 0.1)


def test_the_correctness_worker_runs_what_the_replay_asked_in_order_and_stops_at_a_failure():
    from grader.checks.counters.replay.handoff import Recorder

    recorder, ran = Recorder(), []

    def run(task, limit):
        ran.append((task["n"], limit))
        return _served("crashed" if task["n"] == 2 else "ok", reason="killed by signal 11")

    assert recorder.ask([({"n": 1}, 10.0), ({"n": 2}, 20.0), ({"n": 3}, 30.0)])
    assert not recorder.ask([({"n": 9}, 1.0)])  # (one ask a lab)
    recorder.serve(run)
    assert ran == [(1, 10.0), (2, 20.0)]  # (the worker may be gone after a crash: the third is not run in it)
    assert [r.status for r in recorder.answer(0)] == ["ok", "crashed"]
    recorder.serve(run)  # (once)
    assert len(ran) == 2


def test_a_lab_whose_cases_are_over_first_waits_for_the_ask_or_the_word_that_none_comes():
    import threading

    from grader.checks.counters.replay.handoff import Recorder

    ran: list[int] = []
    early = Recorder()
    server = threading.Thread(target=early.serve, args=(lambda task, limit: (ran.append(task["n"]), _served("ok", {}))[1], 30.0))
    server.start()
    server.join(0.2)
    assert server.is_alive()  # (a fast lab's cases are over before its counters ask)
    assert early.ask([({"n": 1}, 1.0)])
    server.join(10)
    assert not server.is_alive() and ran == [1] and len(early.answer(0)) == 1
    declined = Recorder()
    server = threading.Thread(target=declined.serve, args=(lambda task, limit: pytest.fail("nothing was asked"), 30.0))
    server.start()
    declined.decline()  # (every case kept, or no replayer)
    server.join(5)
    assert not server.is_alive() and declined.answer(0) == []
    assert not declined.ask([({"n": 1}, 1.0)])


def test_a_recorder_served_before_it_is_asked_or_with_no_worker_runs_nothing():
    from grader.checks.counters.replay.handoff import Recorder

    late = Recorder()
    late.serve(lambda task, limit: pytest.fail("nothing was asked"), 0.05)  # (no ask within the wait)
    assert not late.ask([({"n": 1}, 1.0)])  # (the replay records in a worker of its own)
    ended = Recorder()
    assert ended.ask([({"n": 1}, 1.0)])
    ended.serve(None)  # (the cases hung or failed: nothing more runs in their worker)
    assert ended.answer(0) == []
    unserved = Recorder()
    assert unserved.ask([({"n": 1}, 1.0)]) and unserved.answer(0.05) == []  # (the cases are not over yet)


@pytest.mark.parametrize("stop", ["timeout", "crashed"])
def test_records_the_correctness_worker_made_are_taken_and_only_the_rest_get_a_worker_of_their_own(stop, tmp_path, monkeypatch):
    """The replay's records come from the lab's correctness worker once its cases are over: an ok
    reply is taken; a call killed at its limit is not run again; a crashed one, and every case
    after either, are recorded in one worker of their own, as before."""
    import threading
    from types import SimpleNamespace

    from worker_replies import tool_result

    from grader.checks.counters import launched
    from grader.checks.counters.replay import collect
    from grader.checks.counters.replay.handoff import Recorder
    from grader.isolation.launch import Isolation, RunDirs
    from grader.isolation.toolrun import ToolRun
    from grader.labspec.labs import load_problem

    spec = find_lab("corner_turning")
    checks = [c for c in launched.profiles_for(spec).checks]
    checks = [*checks, *checks][:4]
    cases = [collect._Case(((), k), check, (), tuple(SimpleNamespace(name=n) for n in "MNP"))  # type: ignore[arg-type]
             for k, check in enumerate(checks)]
    cases = [dataclasses_replace(case, check=dataclasses_replace(case.check, id=f"case{k}")) for k, case in enumerate(cases)]
    separate = []

    def own_worker(tool, task, dirs, limit, isolation):
        separate.append(task["tasks"])
        return ToolRun(0, "", "", tool_result({"status": "ok", "results": [
            {"status": "ok", "seconds": 0.1, "kernels_launched": ["k"], "record": {"text": "garbage", "arrays": 3}}] * len(task["tasks"])}), 0.1)

    monkeypatch.setattr(collect, "run_under_tool", own_worker)
    sub = SimpleNamespace(spec=spec, problem=load_problem(spec), library=tmp_path / "lib.so", cache_dir=None,
                          isolation=Isolation(Sandbox(None, reason="off")), time_left=lambda limit=1e9: limit,
                          tool_dirs=lambda name: RunDirs(tmp_path / "in" / name, tmp_path / "out" / name))
    recorder, asked = Recorder(), threading.Event()
    real_ask = recorder.ask
    given: list = []
    monkeypatch.setattr(recorder, "ask", lambda tasks: (given.extend(t for t, _ in tasks), real_ask(tasks), asked.set())[1])
    served = iter([_served("ok", {"text": "garbage", "arrays": 3}), _served(stop, reason=f"{stop}: the reason")])
    limits = []

    def serve():
        asked.wait(10)
        recorder.serve(lambda task, limit: (limits.append(limit), next(served))[1])

    server = threading.Thread(target=serve)
    server.start()
    out = collect.recorded(sub, cases, recorder=recorder)  # type: ignore[arg-type]
    server.join(10)
    assert limits == [c.check.time_limit_s for c in cases[:2]]  # (each with its case's limit; none after a failure)
    assert str(out["case0"]).startswith("a malformed record")  # (taken from the correctness worker: parsed, never a verdict)
    if stop == "timeout":  # (it would time out again: not run again)
        assert out["case1"] == "the recording run failed: timeout: the reason"
    assert separate == [given[1 if stop == "crashed" else 2:]]  # (one worker of their own for the rest)
    assert all(str(out[f"case{k}"]).startswith("a malformed record") for k in range(1 if stop == "crashed" else 2, 4))


def test_a_baselines_case_is_replayed_once_kept_apart_and_never_taken_by_the_profiler_path(memory_types_build, replayer, tmp_path):
    """The replayer measures the baselines' cases too, so that a cold grade needs no profiler
    session for them: a case Nsight Compute's run of is kept is left to it; one the replayer kept
    is taken as kept (still "replayed"); the rest are replayed (here, with no GPU, each is left to
    the profiler with the reason). `--counters ncu` never takes a run the replayer kept."""
    import dataclasses
    import time

    from grader.checks.counters import batch, launched
    from grader.checks.counters import ncu as counters
    from grader.checks.counters.ncu import CounterRun
    from grader.checks.counters.replay import collect
    from grader.host import gpu
    from grader.isolation.build import baseline_library
    from grader.isolation.launch import Isolation
    from grader.isolation.submission import Submission
    from grader.labspec.labs import load_problem

    if gpu.probe().gpu is not None:
        pytest.skip("this machine has a GPU (the GPU tests replay for real)")
    spec = find_lab("tiled_matmul")
    cache = replayer.parent.parent.parent
    built = lab_build(spec, spec.files.reference, ("sm_90",), cache)
    assert built.ok and built.library is not None, built.message
    h100 = gpu.GpuInfo("NVIDIA H100 80GB HBM3", (9, 0), "580.65", 0, "GPU-1111aaaa")
    sub = Submission(spec, "reference.cu", built.library, (), ("sm_90",), load_problem(spec), Isolation(Sandbox(None, reason="off")),
                     cache, tmp_path / "work", time.monotonic() + 300, 300.0, "secret", h100)

    def fresh():
        profiles = launched.profiles_for(spec)
        for key, metrics in profiles.metrics.items():  # (the student's runs settled: only the baselines' are asked for)
            profiles.settle("student", key, CounterRun({m: 1.0 for m in metrics}, ("matmul_tiled",)))
        return profiles

    profiles = fresh()
    by_id = {c.id: c for c in profiles.checks}
    naive_small, naive_big, reference_big = by_id["global_load_reduction"], by_id["dram_traffic_naive"], by_id["dram_traffic_reference"]
    reference = baseline_library(spec, "reference", ("sm_90",), cache)
    naive = baseline_library(spec, "naive", ("sm_90",), cache)
    key_of = profiles.case
    profiled = CounterRun({m: 3.0 for m in profiles.metrics[key_of(reference_big)]}, ("matmul_tiled",))
    counters.store(counters.cache_path(counters.baseline_key(h100, profiles.metrics[key_of(reference_big)], reference_big, spec), cache,
                                       reference), profiled, profiles.metrics[key_of(reference_big)])
    base = dataclasses.replace(sub, library=naive)
    case = collect._Case(key_of(naive_small), naive_small, profiles.metrics[key_of(naive_small)], ())
    kept = CounterRun({m: 5.0 for m in case.metrics}, ("matmul_naive",), replayed=True)
    counters.store(collect.kept_baseline_file(base, case), kept, case.metrics)

    notes: list[str] = []
    runs = collect.replayed(sub, profiles, notes.append)
    assert set(runs) == {("baseline naive", key_of(naive_small))}
    assert runs[("baseline naive", key_of(naive_small))].replayed and runs[("baseline naive", key_of(naive_small))].cached
    assert len(notes) == 1 and notes[0].startswith("[tiled_matmul] the naive baseline: its case of dram_traffic_naive by Nsight Compute")
    assert key_of(naive_big) != key_of(naive_small)

    ncu_path = fresh()  # `--counters ncu`: the replayer's kept run is not taken; Nsight Compute (none here) is asked
    batch.counted(sub, None, lambda: True, ncu_path, replay=None)
    assert not ncu_path.runs[("baseline naive", key_of(naive_small))].replayed
    assert "not installed" in ncu_path.runs[("baseline naive", key_of(naive_small))].skipped
    assert ncu_path.runs[("baseline reference", key_of(reference_big))].values == profiled.values  # (the profiler's own kept run)


def test_the_baselines_cases_are_replayed_ahead_and_the_labs_wait_for_them(replayer, tmp_path, monkeypatch):
    """A batch's baselines' cases are replayed in the background before the labs reach their
    counters: every case of every lab given that no earlier grade kept, once (here, with no GPU,
    each fails and is said so); one kept is left alone, and a lab's replay waits for the ahead run
    before it picks its own baselines' cases."""
    import threading

    from grader.checks.counters import launched
    from grader.checks.counters import ncu as counters
    from grader.checks.counters.ncu import CounterRun
    from grader.checks.counters.replay import collect
    from grader.host import gpu
    from grader.isolation.build import baseline_library
    from grader.isolation.options import GradeOptions

    if gpu.probe().gpu is not None:
        pytest.skip("this machine has a GPU (the GPU tests replay for real)")
    cache = replayer.parent.parent.parent
    h100 = gpu.GpuInfo("NVIDIA H100 80GB HBM3", (9, 0), "580.66", 0, "GPU-2222bbbb")  # (a driver of its own: no run kept by other tests)
    monkeypatch.setattr(collect, "probe_for", lambda options: gpu.GpuProbe(h100))
    monkeypatch.setattr(collect, "archs_for", lambda options, probe: ("sm_90",))
    options = GradeOptions(cache_dir=cache, sandbox=False)
    specs = [find_lab("tiled_matmul"), find_lab("corner_turning")]
    tiled = launched.profiles_for(specs[0])
    kept_check = next(c for c in tiled.checks if c.id == "global_load_reduction")
    naive = baseline_library(specs[0], "naive", ("sm_90",), cache)
    metrics = tiled.metrics[tiled.case(kept_check)]
    (cache / "counters").mkdir(mode=0o700, exist_ok=True)
    counters.store(counters.cache_path("replayed|" + counters.baseline_key(h100, metrics, kept_check, specs[0]), cache, naive),
                   CounterRun({m: 5.0 for m in metrics}, ("matmul_naive",), replayed=True), metrics)
    released, notes = threading.Event(), []
    real = collect._replayed_baseline

    def held(*args):
        released.wait(30)  # (the ahead run holds until the test lets it go)
        return real(*args)

    monkeypatch.setattr(collect, "_replayed_baseline", held)
    collect.replay_baselines_ahead(specs, options, notes.append)
    the = collect.service.replayer_for(h100, ("sm_90",), collect.sandbox_for(options), cache)
    assert the.ahead is not None and the.ahead.is_alive()
    waiter = threading.Thread(target=the.ahead_done, args=(30,))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # (a lab waits for the ahead run)
    released.set()
    waiter.join(30)
    assert not waiter.is_alive() and not the.ahead.is_alive()
    expected = {f"[{spec.id}] the {c.baseline} baseline: its case of {c.id}" for spec in specs
                for c in launched.profiles_for(spec).checks if c.baseline} - {f"[tiled_matmul] the naive baseline: its case of {kept_check.id}"}
    told = [n for n in notes if "its case of" in n]
    assert {n.split(" by Nsight Compute")[0] for n in told} == expected, notes
    assert all("the counter replayer is unavailable here" in n or "the recording run failed" in n for n in told), notes
    assert notes[0].startswith(f"replaying the baselines' {len(expected)} cases"), notes


def test_the_counter_family_serves_its_recorder_with_the_worker_that_ran_the_cases():
    """Once the cases are over, the counters' recorder runs what the replay asked in that worker,
    each call within what is left of the submission's time; where the cases ended badly, nothing."""
    from types import SimpleNamespace

    from grader.checks.counters.replay.handoff import Recorder
    from grader.checks.families.counters import RECORDER, CounterFamily

    calls = []
    worker = SimpleNamespace(run=lambda task, limit: (calls.append((task["n"], limit)), _served("ok", {}))[1])
    for given, expected in ((worker, [(1, 7.0)]), (None, [])):
        calls.clear()
        recorder = Recorder()
        assert recorder.ask([({"n": 1}, 30.0)])
        tools = SimpleNamespace(sub=SimpleNamespace(time_left=lambda limit: min(limit, 7.0)), found={RECORDER: recorder})
        CounterFamily().cases_over(tools, given)  # type: ignore[arg-type]
        assert calls == expected and len(recorder.answer(0)) == len(expected)


@pytest.mark.gpu
def test_the_students_calls_are_recorded_by_the_worker_that_ran_the_correctness_cases(tmp_path, monkeypatch):
    """On a GPU, a lab's replayed counters start no recording worker for the student: the records
    come from the correctness worker, and every counter check is counted by the replayer."""
    from grader.checks.counters.replay import collect
    from grader.engine.grade import grade
    from grader.host import gpu

    if gpu.probe().gpu is None:
        pytest.skip("needs a CUDA GPU")
    own: list[str] = []
    real = collect.run_under_tool

    def counted(tool, task, dirs, limit, isolation):
        own.append(str(dirs.outbox))
        return real(tool, task, dirs, limit, isolation)

    monkeypatch.setattr(collect, "run_under_tool", counted)
    spec = find_lab("tiled_matmul")
    report = grade(spec, spec.files.reference, GradeOptions(cache_dir=tmp_path / "cache", sanitizers=False, timing=False,
                                                             reuse_tool_runs=False))
    counter_checks = [c for c in report.checks if c.stage.value == "counters"]
    assert counter_checks and all(c.measured.get("counted_by") == "replayer" for c in counter_checks), counter_checks
    assert not [d for d in own if "/runs/" in d], own  # (the baselines' trusted recordings may run: not the student's)
