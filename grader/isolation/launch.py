"""How a worker process starts: its two folders, how it is confined (sandboxed, or trusted to run
only the grader's own code), and its command line and environment."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..labspec.paths import PACKAGE_PARENT
from .sandbox import Sandbox, confined_env, worker_runtime

# Per file the worker writes: the .npy outputs of the largest benchmark case (memory_types:
# 256 MiB arrays) must fit; a runaway writer is stopped here (SIGXFSZ).
FILE_LIMIT_BYTES = 1 << 30
#: Starts the worker from an explicit folder with ``python -I``: neither the working folder nor
#: PYTHONPATH is searched, so files planted where a run can write are never imported.
BOOTSTRAP = "import sys; sys.path.insert(0, sys.argv.pop(1)); from grader.worker.main import main; sys.exit(main(sys.argv[1:]))"



@dataclass(frozen=True)
class RunDirs:
    """A run's folders: ``inbox`` only the grader writes; ``outbox`` the run may write."""

    inbox: Path
    outbox: Path

    def make(self) -> "RunDirs":
        self.inbox.mkdir(parents=True, exist_ok=True)
        self.outbox.mkdir(parents=True, exist_ok=True)
        return self

    def sub(self, name: str) -> "RunDirs":
        return RunDirs(self.inbox / name, self.outbox / name)


@dataclass(frozen=True)
class Isolation:
    """How a worker is confined.

    ``trusted`` workers run only the grader's own code (the baselines) and skip the sandbox;
    others run inside it, seeing the worker runtime, ``read_only`` and their scratch folder.
    ``cupy_cache`` is the trusted kernel cache: sandboxed workers start from a copy of it.
    """

    sandbox: Sandbox
    read_only: tuple[Path, ...] = ()
    trusted: bool = False
    cupy_cache: Path | None = None

    @property
    def sandboxed(self) -> bool:
        return self.sandbox.active and not self.trusted

    def for_baselines(self) -> "Isolation":
        """How the grader's own baseline kernels run beside this submission: unconfined, with the
        same trusted kernel cache."""
        return Isolation(self.sandbox, trusted=True, cupy_cache=self.cupy_cache)

    def command(self, args: list[Any], dirs: RunDirs, extra_env: dict[str, str] | None = None,
                read_also: tuple[Path, ...] = ()) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that run ``args`` confined; ``args`` may start with a tool
        and go on with :func:`worker_command` (whose ``WORKER_ROOT`` becomes the folder the worker
        is imported from: the sandbox's copy of it, or the grader's own folder)."""
        env = worker_env(extra_env)
        root = str(worker_runtime()) if self.sandboxed else str(PACKAGE_PARENT)
        args = [root if a is WORKER_ROOT else a for a in args]
        if self.cupy_cache is not None:
            # trusted workers share the kernel cache (and compile into it the kernels sandboxed
            # workers run: ``grader.worker.main.serve``); others start from a copy of their own
            if self.trusted:
                env.update(CUPY_CACHE_DIR=str(self.cupy_cache), GRADER_SEED_KERNELS="1")
            else:
                env["GRADER_CUPY_SEED"] = str(self.cupy_cache)
        if not self.sandboxed:
            env.setdefault("HOME", os.environ.get("HOME", "/tmp"))
            return args, env
        cache = (self.cupy_cache,) if self.cupy_cache is not None and self.cupy_cache.is_dir() else ()
        cmd = self.sandbox.wrap(args, read_only=(Path(root), dirs.inbox, *self.read_only, *read_also, *cache),
                                writable=(dirs.outbox,), cwd=dirs.outbox)
        return cmd, env


#: Where :func:`worker_command` puts the folder the worker is imported from.
WORKER_ROOT = object()


def worker_command(*args: str) -> list[Any]:
    """``python -I`` running the worker from the folder :meth:`Isolation.command` fills in."""
    return [sys.executable, "-I", "-u", "-c", BOOTSTRAP, WORKER_ROOT, *args]


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = confined_env()
    # The worker caps its own file sizes at start-up: a preexec_fn would not be safe here, where
    # background threads start processes too (a child can deadlock between fork and exec).
    env["GRADER_FILE_LIMIT_BYTES"] = str(FILE_LIMIT_BYTES)
    env.update(extra or {})
    return env
