"""Shared fixtures: a build cache per test session, the GPU marker's skip, and a watch on the
grader's own file descriptors (none closed twice)."""

from __future__ import annotations

import errno
import os
import threading
import traceback
from pathlib import Path

import pytest

from grader.host import gpu

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    if not os.environ.get("GRADER_CACHE_DIR"):
        os.environ["GRADER_CACHE_DIR"] = str(tmp_path_factory.mktemp("grader-cache"))
    yield


@pytest.fixture(autouse=True)
def _no_descriptor_closed_twice(monkeypatch):
    """Fail a test in which the grader's code closes a descriptor number that is not open. A
    number closed twice is usually open again by the second close, as another thread's file (a
    worker's reply pipe, once), and the second close takes that file away; where it is not, the
    close fails with EBADF, which code that suppresses OSError hides: this makes it seen."""
    real, closed_twice, lock = os.close, [], threading.Lock()

    def close(fd: int) -> None:
        try:
            real(fd)
        except OSError as exc:
            stack = traceback.extract_stack()[:-1]
            if exc.errno == errno.EBADF and any(f"{os.sep}grader{os.sep}" in frame.filename for frame in stack[-4:]):
                with lock:
                    closed_twice.append(f"descriptor {fd}:\n" + "".join(traceback.format_list(stack[-6:])))
            raise

    monkeypatch.setattr(os, "close", close)
    yield
    assert not closed_twice, "the grader closed a descriptor that was not open:\n" + "\n".join(closed_twice)


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
