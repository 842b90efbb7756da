"""The profiler-cost benchmark: how it splits a student's session, and where there is no GPU."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmark_modules import BENCHMARKS, load

from grader.checks.counters.batch import Request

SCRIPT = BENCHMARKS / "profiler_cost.py"


def _bench():
    return load("profiler_cost")


def _request(lab: str, *metrics: str) -> Request:
    return Request(lab, ("case", lab, metrics), metrics, {}, None, 60.0, None, None, None)  # type: ignore[arg-type]


def test_the_session_splits_into_counter_cases_and_timed_cases_measured_for_dram_bytes_only():
    bench = _bench()
    loads = _request("tiled_matmul", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    traffic = _request("tiled_matmul", "dram__bytes_read.sum", "dram__bytes_write.sum")
    atomics = _request("histogram", "smsp__sass_inst_executed_op_global_red.sum", "dram__bytes_read.sum")
    counted, timed = bench.split_by_traffic([loads, traffic, atomics])
    assert counted == [loads, atomics] and timed == [traffic]  # a case with DRAM bytes among others is a counter case
    plans = {label: (cases, metrics) for label, cases, metrics in bench.arrangements([loads, traffic, atomics])}
    union = ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
             "smsp__sass_inst_executed_op_global_red.sum")
    assert plans["every case, every lab's metrics"] == ([loads, traffic, atomics], union)
    assert plans["every case, one metric"] == ([loads, traffic, atomics], ("gpu__time_duration.sum",))
    assert plans["counter cases, their metrics"] == ([loads, atomics], (union[0], union[3], union[1]))
    assert plans["timed cases, every lab's metrics"] == ([traffic], union)
    assert plans["timed cases, DRAM bytes only"] == ([traffic], ("dram__bytes_read.sum", "dram__bytes_write.sum"))


def test_a_session_without_timed_cases_has_no_timed_arrangements():
    bench = _bench()
    labels = [label for label, _, _ in bench.arrangements([_request("corner_turning", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")])]
    assert labels == ["every case, every lab's metrics", "every case, one metric", "counter cases, their metrics"]


def test_the_profiler_cost_benchmark_says_it_needs_a_gpu_where_none_is_visible():
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "1"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 1 and done.stdout.startswith("needs a CUDA GPU") and "Traceback" not in done.stderr
