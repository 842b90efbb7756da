"""A tool run's buffers: under every tool but memcheck, each device buffer has room after it, so a
stray store just past it lands in the worker's own memory on every run (under synccheck, memory
the tool allocated next took such a store and the process crashed: by layout, not by the code)."""

from types import SimpleNamespace

import numpy as np

from grader.checks.correctness import STRAY_PAD_BYTES, case_tool_task, launcher_spec
from grader.isolation.launch import RunDirs
from grader.labspec.labs import find_lab, load_problem
from grader.worker.buffers import Buffers, Slot, layout
from grader.worker.protocol import tool_case_task


class _Device(np.ndarray):
    """A numpy array that copies like a CuPy one."""

    def set(self, host):
        self[...] = host

    def get(self):
        return np.array(self)


FAKE_CP = SimpleNamespace(empty=lambda n, dtype: np.zeros(n, dtype).view(_Device), asarray=lambda a: np.array(a).view(_Device),
                          uint8=np.uint8)


def test_every_tool_but_memcheck_runs_with_room_after_each_buffer(tmp_path):
    spec = find_lab("memory_types")
    problem = load_problem(spec)
    pads = {}
    for check in (*spec.sanitizers, *spec.counters):
        task = case_tool_task(spec, problem, check, RunDirs(tmp_path / check.id, tmp_path / "out" / check.id), tmp_path / "lib.so", None)
        pads[getattr(check, "tool", "counters")] = task.get("pad", 0)
    assert pads["memcheck"] == 0  # (it must see the store past the buffer)
    assert {tool: pad for tool, pad in pads.items() if tool != "memcheck"} == dict.fromkeys(set(pads) - {"memcheck"}, STRAY_PAD_BYTES)
    assert STRAY_PAD_BYTES >= 64 << 10  # (memory_types' write_past_end stores 16 KiB past its output)


def test_a_padded_buffer_keeps_its_layout_and_its_fill():
    spec = find_lab("tiled_matmul")
    launcher, params = launcher_spec(spec), {"width": 16}
    assert tool_case_task("/lib.so", launcher, params, {}, pad=4096)["pad"] == 4096
    assert "pad" not in tool_case_task("/lib.so", launcher, params, {})
    slots = [s for s in layout(launcher, params, 0) if isinstance(s, Slot)]
    inputs = {s.name: np.arange(s.elements, dtype=s.dtype).reshape(s.shape) for s in slots if s.role == "input"}
    plain = Buffers(FAKE_CP, launcher, params, inputs, 0, memcpy_only=True)
    padded = Buffers(FAKE_CP, launcher, params, inputs, 0, memcpy_only=True, pad=4096)
    assert set(padded.outputs) == {"P"} and set(padded.inputs) == {"M", "N"}
    for name in plain.outputs:
        assert padded.raw[name].size == plain.raw[name].size + 4096
        assert np.array_equal(padded.outputs[name], plain.outputs[name], equal_nan=True)  # (the fill, where the kernel finds it)
    for name in plain.inputs:
        assert np.array_equal(padded.inputs[name], inputs[name])
    assert padded.guard_violations() == plain.guard_violations() == {}
