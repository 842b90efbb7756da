"""Shared fixtures: a build cache per test session and the GPU marker's skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.host import gpu

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    if not os.environ.get("GRADER_CACHE_DIR"):
        os.environ["GRADER_CACHE_DIR"] = str(tmp_path_factory.mktemp("grader-cache"))
    yield


_PROBE = None


def gpu_probe():
    global _PROBE
    if _PROBE is None:
        _PROBE = gpu.probe()
    return _PROBE


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    probe = gpu_probe()
    if probe.gpu is None:
        skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {probe.reason}")
        for item in gpu_items:
            item.add_marker(skip)
