"""The CPU's share of a class run, done ahead of the GPU lanes: every submission is compiled and
its compiled code inspected (SASS, resource usage) into the build cache, and each lab's baselines
are built once, so a lane finds it all there and its GPU never waits for nvcc.

Identical files (the same lab, bytes and archs) are compiled once even when several students
hand them in.
"""

from __future__ import annotations

import threading
from pathlib import Path

from .. import sass
from ..build import lab_build
from ..labs import find_lab
from ..options import GradeOptions, sandbox_for
from ..repo import submission_rel
from ..spec import LabSpec
from .plan import StudentJob


class Builder:
    """Compiles for a class run; safe to share among threads."""

    def __init__(self, options: GradeOptions, archs: list[tuple[str, ...]], baselines: bool) -> None:
        self.options, self.archs, self.baselines = options, archs, baselines
        self.sandbox = sandbox_for(options)
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str, tuple[str, ...]], threading.Lock] = {}
        self._specs: dict[str, LabSpec] = {}

    def spec(self, lab_id: str) -> LabSpec:
        with self._guard:
            if lab_id not in self._specs:
                self._specs[lab_id] = find_lab(lab_id)
            return self._specs[lab_id]

    def _lock(self, key: tuple[str, str, tuple[str, ...]]) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def _build(self, lab_id: str, source: Path, display: str | None, digest: str, archs: tuple[str, ...]) -> None:
        with self._lock((lab_id, digest, archs)):
            try:
                result = lab_build(self.spec(lab_id), source, archs, self.options.cache_dir, display,
                                   self.sandbox if display is not None else None)
                if result.ok and result.library is not None:
                    sass.inspect(result.library)
            except Exception:
                pass  # only a head start: grading meets the same problem and reports it

    def prepare(self, job: StudentJob) -> None:
        """Build one student's labs (and, the first time a lab is seen, its baselines)."""
        if job.root is None:
            return
        for lab_id in job.labs:
            rel = submission_rel(lab_id)
            digest = job.identity.files.get(rel)
            if digest is None:  # missing, a link, too large: nothing to compile
                continue
            for archs in self.archs:
                self._build(lab_id, job.root / rel, rel, digest, archs)
            if self.baselines:
                spec = self.spec(lab_id)
                for name in sorted({"reference", *spec.files.baselines}):
                    for archs in self.archs:
                        self._build(lab_id, spec.baseline_source(name), None, f"baseline:{name}", archs)
