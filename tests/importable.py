"""The grader and the pure libraries it imports, copied where another user's Python (the system's,
as an unprivileged user) can import them from."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The grader's own dependencies that the system's Python may lack (numpy it has from the distribution).
LIBRARIES = ("filelock", "platformdirs", "psutil", "elftools")


#: The unprivileged user the tests run the grader as, through setpriv.
NOBODY = 65534


def user_mode_problem(imports: str = "yaml, numpy", sandbox: Any = None, bwrap: bool = False) -> str:
    """Why tests cannot also run as an unprivileged user here ("" if they can): as ``nobody``
    through setpriv, with the system's Python importing ``imports`` (and, given a ``sandbox``,
    only where it is active; with ``bwrap``, only where its bubblewrap runs for that user)."""
    if os.geteuid() != 0:
        return "the tests already run as an unprivileged user"
    if not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        return "needs setpriv and a system Python at /usr/bin/python3"
    if sandbox is not None and not sandbox.active:
        return f"no sandbox here: {sandbox.reason}"
    probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3",
                            "-c", f"import {imports}"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"the system Python cannot import the grader's dependencies ({probe.stderr.strip()[-200:]})"
    if bwrap and sandbox is not None:
        probe = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", str(sandbox.bwrap),
                                "--ro-bind", "/", "/", "--unshare-pid", "--", "true"], capture_output=True, text=True)
        if probe.returncode != 0:
            return f"bubblewrap does not run for an unprivileged user here ({probe.stderr.strip()[-200:]})"
    return ""


def copy_grader(dest: Path) -> Path:
    """Copy the ``grader`` package and ``LIBRARIES`` into ``dest``; returns ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "grader", dest / "grader", ignore=ignore)
    for name in LIBRARIES:
        module = __import__(name)
        shutil.copytree(Path(module.__file__).parent, dest / name, ignore=ignore)
    return dest
