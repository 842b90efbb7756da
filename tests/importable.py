"""The grader and the pure libraries it imports, copied where another user's Python (the system's,
as an unprivileged user) can import them from."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The grader's own dependencies that the system's Python may lack (numpy it has from the distribution).
LIBRARIES = ("filelock", "platformdirs", "psutil")


def copy_grader(dest: Path) -> Path:
    """Copy the ``grader`` package and ``LIBRARIES`` into ``dest``; returns ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "grader", dest / "grader", ignore=ignore)
    for name in LIBRARIES:
        module = __import__(name)
        shutil.copytree(Path(module.__file__).parent, dest / name, ignore=ignore)
    return dest
