"""A lab's version: one hash over the files that decide its grades, so that results graded
with other lab files are never taken for current."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Iterable

from .spec import LabSpec


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_hash(files: Iterable[tuple[str, bytes]]) -> str:
    """One hash over named contents, independent of the order they are given in."""
    h = hashlib.sha256()
    for name, digest in sorted((name, sha256(data)) for name, data in files):
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()


def lab_version(spec: LabSpec) -> str:
    """A hash of what grades a lab: lab.yaml, the header, the generator and oracle, the
    reference and the baselines (not the README, the stub or the known solutions). A student
    bundle has no reference: its version differs from the course's, as its checks do."""
    named = {"lab.yaml": spec.source, "header": spec.files.header, "problem": spec.files.problem,
             "reference": spec.files.reference, **{f"baseline.{k}": v for k, v in spec.files.baselines.items()}}
    return _files_hash(tuple(sorted((name, str(path)) for name, path in named.items() if path is not None)))


def problem_version(spec: LabSpec) -> str:
    """A hash of the lab's generator and oracle: what a case's inputs are made by (with its
    parameters and seed)."""
    return _files_hash((("problem", str(spec.files.problem)),))


@functools.lru_cache(maxsize=None)
def _files_hash(named: tuple[tuple[str, str], ...]) -> str:
    return tree_hash((name, Path(path).read_bytes()) for name, path in named)
