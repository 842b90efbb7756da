"""The oracle's answers: kept between grades, and compared with a submission's outputs in the
parent process.

Inputs and oracle answers are kept between grades, beside the build cache. Every student graded
with one secret gets the same cases (the YAML's seeds mixed with it: a class run's own, or the
course's ``GRADER_SECRET``), so the lab's generator and its fp64 oracle need to run once per case
and lab version, not once per student. Answers are keyed by a digest of the very inputs they
answer, inputs by the lab version, parameters and seed. The timed inputs are drawn afresh for every
sample, so the timing's check is not cached. Students never see this folder: a case's inputs are
copied into the grading's own inbox.

Only cases that a later run draws again go to disk: those of the YAML's own seeds (sanitizer and
counter cases) and those of a secret given to the run (``GRADER_SECRET``). A run's own secret is
new with every run, so its graded cases are kept in the run alone (``on_disk=False``): on disk, a
student's every grade of a repository left some 80 MB there that no later grade could read.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

import numpy as np

from ..context import carried, current
from ..host.hostdirs import check_private_dir, open_private, private_dir
from ..isolation.options import usable_cpus
from ..labspec.spec import LabSpec, Tolerance
from ..labspec.version import lab_version
from ..worker import expr

#: Arrays larger than this (all of one entry together) are not written to disk: they are kept in
#: the run (``RunContext.answers``), the last few up to ``RUN_LIMIT_BYTES`` in all.
ENTRY_LIMIT_BYTES = 256 << 20
RUN_LIMIT_BYTES = 1 << 30
_KEEPING = threading.Lock()  # (the run's answers are asked for from the grading's threads)

Arrays = dict[str, np.ndarray]


def generated(spec: LabSpec, problem: ModuleType, params: Mapping[str, Any], seed: int, cache_dir: Path | None,
              on_disk: bool = True) -> Arrays:
    """``problem.generate(params, seed, np)``, from the cache where it ran before (in the run
    alone unless ``on_disk``)."""
    def compute() -> Arrays:
        arrays: Arrays = problem.generate(dict(params), seed, np)
        return arrays
    return _cached(cache_dir, _key(spec, "inputs", _params(params), str(seed)), compute, on_disk)


def expected(spec: LabSpec, problem: ModuleType, inputs: Mapping[str, Any], params: Mapping[str, Any],
             cache_dir: Path | None, on_disk: bool = True) -> Arrays:
    """``problem.expected(inputs, params)``, from the cache where these very inputs were answered
    before (in the run alone unless ``on_disk``)."""
    def compute() -> Arrays:
        arrays: Arrays = problem.expected(inputs, dict(params))
        return arrays
    digest = inputs_digest(inputs)
    if digest is None:
        return compute()
    return _cached(cache_dir, _key(spec, "expected", _params(params), digest), compute, on_disk)


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


def _cached(cache_dir: Path | None, key: str, compute: Callable[[], Arrays], on_disk: bool = True) -> Arrays:
    if cache_dir is None:
        return compute()
    path = None
    if on_disk:
        cases = private_dir(private_dir(cache_dir, "the grader's cache folder") / "cases", "the case cache")
        path = cases / key[:2] / f"{key}.npz"
        stored = _load(path)
        if stored is not None:
            return stored
    kept = current().answers
    with _KEEPING:
        held = kept.get(key)
    if held is not None:
        return dict(held)
    value = compute()
    if isinstance(value, dict) and value and all(_plain(v) for v in value.values()):
        size = sum(v.nbytes for v in value.values())
        if path is not None and size <= ENTRY_LIMIT_BYTES:
            _store(path, value)
        elif size <= RUN_LIMIT_BYTES:
            with _KEEPING:
                _keep(kept, key, value, size)
    return value


def _keep(kept: dict[str, Mapping[str, Any]], key: str, value: Arrays, size: int) -> None:
    """``value`` kept in the run, read-only, the oldest entries let go to stay within ``RUN_LIMIT_BYTES``."""
    for array in value.values():
        array.flags.writeable = False  # (every grade that asks gets these very arrays)
    total = sum(sum(a.nbytes for a in v.values()) for v in kept.values())
    for old in list(kept):
        if total + size <= RUN_LIMIT_BYTES:
            break
        total -= sum(a.nbytes for a in kept.pop(old).values())
    kept[key] = value


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


@dataclass(frozen=True)
class Mismatch:
    index: str
    got: float
    expected: float


@dataclass(frozen=True)
class Comparison:
    name: str
    ok: bool
    wrong: int
    total: int
    first: tuple[Mismatch, ...]
    max_abs_error: float
    summary: str  # one line for the student

    def details(self) -> str:
        lines = [self.summary]
        for m in self.first:
            lines.append(f"  {self.name}{m.index}: got {_num(m.got)}, expected {_num(m.expected)}")
        return "\n".join(lines)


def _num(x: float) -> str:
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return str(x)
    return f"{x:.7g}"


#: Elements compared at a time: the timed outputs have 64M elements, and whole-array float64
#: temporaries (eight of them, 512 MB each) took seconds of every timing's check.
CHUNK = 1 << 20
#: The most threads an output's chunks are compared on.
COMPARE_THREADS = 8


def _judge(got: np.ndarray, expected: np.ndarray, tol: Tolerance, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Which elements are wrong, and each one's absolute error (float64)."""
    if tol.kind == "exact":
        bad = got.astype(np.int64) != expected.astype(np.int64)
        return bad, np.abs(got.astype(np.float64) - expected.astype(np.float64))
    # scale * (atol + rtol * |e|) and |got - e|, in place on two temporaries (the float64 oracle
    # is not copied): the same operations in the same order, so the same bits, in a quarter less time
    e = expected.astype(np.float64, copy=False)
    bound = np.abs(e)
    bound *= tol.rtol
    bound += tol.atol
    bound *= scale
    err = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        np.subtract(err, e, out=err)
        np.abs(err, out=err)
        within = err <= bound
        return np.logical_not(within, out=within), err  # NaN and inf count as wrong


def compare(
    name: str,
    got: np.ndarray,
    expected: np.ndarray,
    tol: Tolerance,
    params: Mapping[str, int | str],
    max_shown: int = 5,
    chunk: int = CHUNK,
) -> Comparison:
    total = int(expected.size)
    if got.shape != expected.shape:
        return Comparison(name, False, total, total, (), math.inf, f"{name}: shape {got.shape}, expected {expected.shape}")
    scale = 1.0 if tol.kind == "exact" else math.sqrt(max(float(expr.evaluate(tol.reduction_length, params)), 1.0))
    flat_got, flat_want = got.reshape(-1), expected.reshape(-1)
    wrong, max_err, max_bad_err = 0, 0.0, -math.inf
    shown: list[int] = []  # flat indices of the first wrong elements

    def judged(start: int) -> tuple[int, float, list[int], float]:
        """A chunk's wrong elements, its largest error where none is wrong, its first wrong
        elements and its largest finite error among them."""
        bad, err = _judge(flat_got[start : start + chunk], flat_want[start : start + chunk], tol, scale)
        n_bad = int(np.count_nonzero(bad))
        if not n_bad:
            return 0, float(err.max()), [], -math.inf
        finite_err = err[bad & np.isfinite(err)]
        return (n_bad, 0.0, (np.flatnonzero(bad)[:max_shown] + start).tolist(),
                float(finite_err.max()) if finite_err.size else -math.inf)

    starts = range(0, total, chunk)
    threads = min(COMPARE_THREADS, len(starts), usable_cpus())
    if threads > 1:  # the chunks side by side (numpy lets go of the GIL): a timed output has 64 M elements
        with ThreadPoolExecutor(max_workers=threads) as pool:
            verdicts = list(pool.map(carried(judged), starts))
    else:
        verdicts = [judged(start) for start in starts]
    for n_bad, good_err, first_bad, bad_err in verdicts:
        if not n_bad:
            max_err = max(max_err, good_err)
            continue
        wrong += n_bad
        shown += first_bad[: max_shown - len(shown)]
        max_bad_err = max(max_bad_err, bad_err)
    if wrong == 0:
        return Comparison(name, True, 0, total, (), max_err, f"{name}: all {total} elements correct")
    first = tuple(
        Mismatch("[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, got.shape)) + "]",
                 _scalar(flat_got[flat]), _scalar(flat_want[flat]))
        for flat in shown
    )
    max_err = max_bad_err if max_bad_err > -math.inf else math.inf
    nan_count = 0  # counted only for a wrong output's message: a right one pays nothing for it
    if got.dtype.kind == "f":
        nan_count = sum(int(np.count_nonzero(np.isnan(flat_got[start : start + chunk]))) for start in range(0, total, chunk))
    if nan_count == total:
        summary = (
            f"{name}: all {total} elements are NaN (the grader fills outputs with NaN before each call: "
            f"was {name} never written, or computed from its old contents?)"
        )
    else:
        summary = f"{name}: {wrong} of {total} elements wrong"
        if nan_count:
            summary += f" ({nan_count} are NaN)"
        summary += f"; first at {name}{first[0].index}: got {_num(first[0].got)}, expected {_num(first[0].expected)}"
    return Comparison(name, False, wrong, total, first, max_err, summary)


def _scalar(x: Any) -> float:
    return float(x) if np.asarray(x).dtype.kind == "f" else int(x)
