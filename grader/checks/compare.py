"""Comparing a submission's outputs with the oracle's, in the parent process."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..labspec.spec import Tolerance
from ..worker import expr


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


def _judge(got: np.ndarray, expected: np.ndarray, tol: Tolerance, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Which elements are wrong, and each one's absolute error (float64)."""
    if tol.kind == "exact":
        bad = got.astype(np.int64) != expected.astype(np.int64)
        return bad, np.abs(got.astype(np.float64) - expected.astype(np.float64))
    g = got.astype(np.float64)
    e = expected.astype(np.float64)
    bound = scale * (tol.atol + tol.rtol * np.abs(e))
    with np.errstate(invalid="ignore"):
        err = np.abs(g - e)
        return ~(err <= bound), err  # NaN and inf count as wrong


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
    for start in range(0, total, chunk):
        g, e = flat_got[start : start + chunk], flat_want[start : start + chunk]
        bad, err = _judge(g, e, tol, scale)
        n_bad = int(np.count_nonzero(bad))
        if not n_bad:
            max_err = max(max_err, float(err.max()))
            continue
        wrong += n_bad
        if len(shown) < max_shown:
            shown += (np.flatnonzero(bad)[: max_shown - len(shown)] + start).tolist()
        finite_err = err[bad & np.isfinite(err)]
        if finite_err.size:
            max_bad_err = max(max_bad_err, float(finite_err.max()))
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
