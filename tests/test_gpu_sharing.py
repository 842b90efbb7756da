"""The GPU-sharing benchmark: its programs build with the real nvcc, and without a GPU it says why."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchmark_modules import BENCHMARKS, load

from grader.host import toolchain

SCRIPT = BENCHMARKS / "gpu_sharing.py"


def _bench():
    return load("gpu_sharing")


def test_its_programs_build_for_an_h100_with_the_real_nvcc(tmp_path):
    if toolchain.find("nvcc") is None:
        pytest.skip("needs nvcc")
    programs = _bench().build(tmp_path, "sm_90")
    assert set(programs) == {"small", "chatty", "spin"}
    assert all(p.is_file() and os.access(p, os.X_OK) for p in programs.values())


def test_copies_started_at_once_are_timed_each_and_together():
    wall, each = _bench().at_once([sys.executable, "-c", "import time; time.sleep(0.3)"], 3)
    assert len(each) == 3 and all(0.3 <= s <= wall for s in each) and wall < 0.3 * 3


def test_without_a_gpu_it_says_why_and_fails():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GRADER_NO_GPU": "1"})
    assert done.returncode == 1 and done.stdout.startswith("needs a CUDA GPU: GPU checks disabled by GRADER_NO_GPU"), done


def test_a_malformed_count_is_refused_with_the_option_named():
    done = subprocess.run([sys.executable, str(SCRIPT), "--at-once", "1,two"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--at-once: expected numbers separated by commas, got '1,two'" in done.stderr


def test_round_trips_are_read_beside_a_busy_process_that_is_stopped_with_its_children_after(tmp_path):
    """(Stand-ins for the CUDA programs: the real ones run on a GPU.) The busy process's own
    children (the loop of racecheck runs) are stopped with it."""
    chatty = tmp_path / "chatty"
    chatty.write_text(f"#!{sys.executable}\nimport sys\nassert sys.argv[1] == '7'\nprint('12.5 20.0 300.0')\n")
    chatty.chmod(0o755)
    bench = _bench()
    assert bench.round_trips(chatty, 7) == "median     12.5 us, 90th percentile     20.0 us, slowest     300.0 us"
    pids = tmp_path / "pids"
    busy = ["bash", "-c", f"while true; do sleep 30 & echo $! >> {pids}; wait; done"]
    assert bench.beside(busy, chatty, 7).startswith("median     12.5 us")
    child = int(pids.read_text().split()[0])

    def running() -> bool:  # (a killed child not yet reaped is a zombie: not running)
        try:
            return Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running()


def test_copies_spread_over_gpus_each_see_one_in_turn_by_the_bus_order(tmp_path):
    seen = tmp_path / "seen"
    record = f"import os; open({str(seen)!r}, 'a').write(os.environ['CUDA_DEVICE_ORDER'] + ' ' + os.environ['CUDA_VISIBLE_DEVICES'] + '\\n')"
    _bench().at_once([sys.executable, "-c", record], 5, [3, 1])
    lines = seen.read_text().splitlines()
    assert sorted(lines) == ["PCI_BUS_ID 1", "PCI_BUS_ID 1", "PCI_BUS_ID 3", "PCI_BUS_ID 3", "PCI_BUS_ID 3"]


def test_the_round_trip_beside_another_gpu_runs_the_two_programs_on_the_two_gpus(tmp_path):
    """(Stand-ins: each program writes the GPU it was given.)"""
    chatty = tmp_path / "chatty"
    chatty.write_text(f"#!{sys.executable}\nimport os\nopen({str(tmp_path / 'chatty.gpu')!r}, 'w')"
                      ".write(os.environ['CUDA_VISIBLE_DEVICES'])\nprint('11.0 12.0 13.0')\n")
    chatty.chmod(0o755)
    busy = ["bash", "-c", f"echo $CUDA_VISIBLE_DEVICES > {tmp_path / 'busy.gpu'}; sleep 30"]
    assert _bench().beside(busy, chatty, 5, (0, 2)).startswith("median     11.0 us")
    assert (tmp_path / "chatty.gpu").read_text() == "0" and (tmp_path / "busy.gpu").read_text().strip() == "2"


def test_with_fewer_than_two_gpus_the_host_question_says_it_was_not_measured(capsys, monkeypatch):
    bench = _bench()
    monkeypatch.setattr(bench.gpus, "nvml_devices", lambda: [])
    bench.host_gpus({}, None, [2, 4], 10)
    assert capsys.readouterr().out == "GPUs of one host: not measured (0 visible)\n"
