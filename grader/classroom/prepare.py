"""The CPU's share of a class run, done ahead of the GPU lanes: every submission is compiled and
its compiled code inspected (SASS, resource usage) into the build cache, and each lab's baselines
are built once, so a lane finds it all there and its GPU never waits for nvcc.

Identical files (the same lab, bytes and archs) are compiled once even when several students
hand them in.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Callable

from ..checks import sass
from ..engine.repo import submission_rel
from ..isolation.build import lab_build
from ..isolation.options import GradeOptions, sandbox_for
from ..labspec.labs import find_lab
from ..labspec.spec import LabSpec
from .plan import StudentJob

#: A build: (lab, digest of the file or ``baseline:<name>``, archs).
Build = tuple[str, str, tuple[str, ...]]


class Builder:
    """Compiles for a class run; safe to share among threads."""

    def __init__(self, options: GradeOptions, archs: list[tuple[str, ...]], baselines: bool) -> None:
        self.options, self.archs, self.baselines = options, archs, baselines
        self.sandbox = sandbox_for(options)
        self._guard = threading.Lock()
        self._specs: dict[str, LabSpec] = {}

    def spec(self, lab_id: str) -> LabSpec:
        with self._guard:
            if lab_id not in self._specs:
                self._specs[lab_id] = find_lab(lab_id)
            return self._specs[lab_id]

    def _build(self, lab_id: str, source: Path, display: str | None, archs: tuple[str, ...]) -> None:
        try:
            result = lab_build(self.spec(lab_id), source, archs, self.options.cache_dir, display,
                               self.sandbox if display is not None else None)
            if result.ok and result.library is not None:
                sass.inspect(result.library)
        except Exception:
            pass  # only a head start: grading meets the same problem and reports it

    def tasks(self, job: StudentJob) -> dict[Build, Callable[[], None]]:
        """What one student's grading needs built: their files (and those of the on-time commit
        graded beside a late one) and their labs' baselines, by what identifies the build (the same
        key, the same build: run it once for the whole class)."""
        graded = [(job.root, job.identity.files)] if job.root is not None else []
        if job.ontime is not None:
            graded.append((job.ontime.root, job.ontime.identity.files))
        out: dict[Build, Callable[[], None]] = {}
        for root, files in graded:
            for lab_id in job.labs:
                rel = submission_rel(lab_id)
                digest = files.get(rel)
                if digest is None:  # missing, a link, too large: nothing to compile
                    continue
                for archs in self.archs:
                    out[(lab_id, digest, archs)] = functools.partial(self._build, lab_id, root / rel, rel, archs)
                    if self.baselines:
                        spec = self.spec(lab_id)
                        for name in sorted({"reference", *spec.files.baselines}):
                            out[(lab_id, f"baseline:{name}", archs)] = functools.partial(
                                self._build, lab_id, spec.baseline_source(name), None, archs)
        return out
