"""Inputs and oracle answers kept between grades, beside the build cache.

Every student of a course gets the same cases (the YAML's seeds mixed with the course's secret),
so the lab's generator and its fp64 oracle need to run once per case and lab version, not once
per student (the histogram's 16 MB of English text takes 1.7 s to draw). Answers are keyed by a
digest of the very inputs they answer, inputs by the lab version, parameters and seed. The timed
inputs are drawn afresh for every sample, so the timing's check is not cached.
Students never see this folder: a case's inputs are copied into the grading's own inbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

import numpy as np

from ..host.hostdirs import check_private_dir, open_private, private_dir
from ..labspec.spec import LabSpec
from ..labspec.version import lab_version

#: Arrays larger than this (all of one entry together) are computed every time instead.
ENTRY_LIMIT_BYTES = 256 << 20

Arrays = dict[str, np.ndarray]


def generated(spec: LabSpec, problem: ModuleType, params: Mapping[str, Any], seed: int, cache_dir: Path | None) -> Arrays:
    """``problem.generate(params, seed, np)``, from the cache where it ran before."""
    def compute() -> Arrays:
        arrays: Arrays = problem.generate(dict(params), seed, np)
        return arrays
    return _cached(cache_dir, _key(spec, "inputs", _params(params), str(seed)), compute)


def expected(spec: LabSpec, problem: ModuleType, inputs: Mapping[str, Any], params: Mapping[str, Any],
             cache_dir: Path | None) -> Arrays:
    """``problem.expected(inputs, params)``, from the cache where these very inputs were answered before."""
    def compute() -> Arrays:
        arrays: Arrays = problem.expected(inputs, dict(params))
        return arrays
    digest = inputs_digest(inputs)
    if digest is None:
        return compute()
    return _cached(cache_dir, _key(spec, "expected", _params(params), digest), compute)


def _params(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, default=str)


def inputs_digest(inputs: Mapping[str, Any]) -> str | None:
    """A digest of names, dtypes, shapes and bytes; None where a value is not a plain array."""
    h = hashlib.sha256()
    for name in sorted(inputs):
        value = inputs[name]
        if not _plain(value):
            return None
        h.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
        h.update(np.ascontiguousarray(value).data)
    return h.hexdigest()


def _plain(value: object) -> bool:
    return isinstance(value, np.ndarray) and not value.dtype.hasobject


def _key(spec: LabSpec, *parts: str) -> str:
    return hashlib.sha256("|".join((spec.id, lab_version(spec), *parts)).encode()).hexdigest()


def _cached(cache_dir: Path | None, key: str, compute: Callable[[], Arrays]) -> Arrays:
    if cache_dir is None:
        return compute()
    cases = private_dir(private_dir(cache_dir, "the grader's cache folder") / "cases", "the case cache")
    path = cases / key[:2] / f"{key}.npz"
    stored = _load(path)
    if stored is not None:
        return stored
    value = compute()
    if isinstance(value, dict) and value and all(_plain(v) for v in value.values()) \
            and sum(v.nbytes for v in value.values()) <= ENTRY_LIMIT_BYTES:
        _store(path, value)
    return value


def _load(path: Path) -> Arrays | None:
    """The entry at ``path``: None where there is none, or it is cut short or not an archive.
    Its folder and the file itself must be this user's (a link, another user's file: refused)."""
    fd = open_private(path, "a cached case")
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as stream:
        check_private_dir(path.parent, "the case cache")
        try:
            with np.load(stream, allow_pickle=False) as data:
                return {name: data[name] for name in data.files}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # cut short or not an archive: compute it again
            return None


def _store(path: Path, arrays: Arrays) -> None:
    """Written whole or not at all (grades in other processes read the folder at the same time),
    readable by this user only (the answers are those of the course's secret cases)."""
    private_dir(path.parent, "the case cache")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
        try:
            save: Any = np.savez  # its stubs take the arrays' names for its own keywords
            with os.fdopen(fd, "wb") as out:
                save(out, **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass  # a cache that cannot be written only costs time
