"""The trusted worker: one per GPU for the grader process. It times the labs' baselines and owns
the buffers of the student's calls (``worker.owned``), reading what those calls left there.

Its timing sessions (one per lab) stay open between students, so a class run generates each
lab's inputs and loads its baseline kernels once, and a repository makes no CUDA context for
its baselines. It runs only the grader's own kernels; the labs' threads take turns with it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

from ..host.gpu import GpuInfo, key_of
from ..worker.protocol import Task
from .launch import Isolation, RunDirs
from .options import GradeOptions, kernel_cache, sandbox_for
from .runner import TaskResult, WorkerSession


class SharedWorker(WorkerSession):
    """A worker that threads share: their tasks, and its start, take turns."""

    def __init__(self, dirs: RunDirs, isolation: Isolation) -> None:
        super().__init__(dirs, isolation)
        self._turn = threading.RLock()

    def spawn(self) -> None:
        with self._turn:
            super().spawn()

    def run(self, task: Task, time_limit_s: float, fds: tuple[int, ...] = ()) -> TaskResult:
        with self._turn:
            return super().run(task, time_limit_s, fds)


_WORKERS: dict[tuple[str, str], SharedWorker] = {}
_LOCK = threading.Lock()


def baselines_worker(gpu: str, isolation: Isolation) -> SharedWorker:
    """The baselines' worker of GPU ``gpu`` (its key), started on first use, ended at exit."""
    assert isolation.trusted
    key = (gpu, str(isolation.cupy_cache))
    with _LOCK:
        worker = _WORKERS.get(key)
        if worker is None:
            folder = Path(tempfile.mkdtemp(prefix="grader-baselines-"))
            worker = _WORKERS[key] = SharedWorker(RunDirs(folder / "grader", folder / "baselines"), isolation)
            atexit.register(_end, worker, folder)
        return worker


def trusted_isolation(options: GradeOptions) -> Isolation:
    """How the grader's own code runs on the GPU as ``options`` grade: unconfined, with the trusted kernel cache."""
    return Isolation(sandbox_for(options), trusted=True, cupy_cache=kernel_cache(options))


def trusted_worker(options: GradeOptions, gpu: GpuInfo) -> SharedWorker:
    """The baselines' worker of ``gpu`` as ``options`` grade there (see :func:`baselines_worker`)."""
    return baselines_worker(key_of(gpu), trusted_isolation(options))


def _end(worker: SharedWorker, folder: Path) -> None:
    worker.kill()
    shutil.rmtree(folder, ignore_errors=True)
