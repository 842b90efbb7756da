"""Shared fixtures: a build cache per test session, a run context per test, the GPU marker's skip,
a watch on the grader's own file descriptors (none closed twice), and the wheel installed once per
session."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
import traceback
import zipfile
from pathlib import Path
from typing import Iterator

import pytest

from grader.context import RunContext, current, entered
from grader.host import gpu

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    if not os.environ.get("GRADER_CACHE_DIR"):
        os.environ["GRADER_CACHE_DIR"] = str(tmp_path_factory.mktemp("grader-cache"))
    yield


@pytest.fixture(autouse=True)
def run_context() -> Iterator[RunContext]:
    """Each test is a run of its own: labs looked for from the defaults, no GPU turns, no scoring
    times learned from an earlier test. The secret is the session's, so that the case cache keeps
    its answers across tests (as it does across a class's students). A test that changes what its
    run says (``enter(replace(current(), ...))``) changes it for itself alone."""
    with entered(RunContext(secret=current().secret)) as run:
        yield run


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


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """A wheel built from the package's own files, installed into a new virtual environment."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "grader", src / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "--quiet", "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp / "dist").glob("cuda_lab_grader-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "grader/cli.py" in names and "grader/cuda/support.cu" in names
    assert all(n.startswith(("grader/", "cuda_lab_grader-")) for n in names), names
    assert not [n for n in names if "labs/" in n or "reference" in n or "solutions" in n]

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # the dependencies (numpy, PyYAML, ...) from this interpreter's folders, not the grader: a
    # plain path in a .pth file runs none of the .pth files there (an editable install's among them)
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]
    (site / "_grader_test_deps.pth").write_text("\n".join(deps) + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                              "--quiet", str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADER_", "GITHUB_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
               GRADER_CACHE_DIR=str(tmp / "cache"), GRADER_LOG=str(tmp / "internal-errors.log"))
    where = subprocess.run([str(python), "-c", "import grader; print(grader.__file__)"], cwd=tmp, env=env, capture_output=True,
                           text=True, timeout=120)
    assert where.stdout.strip().startswith(str(site)), where.stdout
    return venv / "bin" / "cuda-grader", env, tmp
