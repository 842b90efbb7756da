"""Comparing a submission's outputs with the oracle's, in the parent process."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .spec import Tolerance
from .worker import expr


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


def compare(
    name: str,
    got: np.ndarray,
    expected: np.ndarray,
    tol: Tolerance,
    params: Mapping[str, int | str],
    max_shown: int = 5,
) -> Comparison:
    total = int(expected.size)
    if got.shape != expected.shape:
        return Comparison(name, False, total, total, (), math.inf, f"{name}: shape {got.shape}, expected {expected.shape}")
    if tol.kind == "exact":
        bad = got.astype(np.int64) != expected.astype(np.int64)
        err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    else:
        g = got.astype(np.float64)
        e = expected.astype(np.float64)
        k = float(expr.evaluate(tol.reduction_length, params))
        bound = math.sqrt(max(k, 1.0)) * (tol.atol + tol.rtol * np.abs(e))
        with np.errstate(invalid="ignore"):
            err = np.abs(g - e)
            bad = ~(err <= bound)  # NaN and inf count as wrong
    wrong = int(np.count_nonzero(bad))
    if wrong == 0:
        max_err = float(err.max()) if err.size else 0.0
        return Comparison(name, True, 0, total, (), max_err, f"{name}: all {total} elements correct")
    idx = np.argwhere(bad)[:max_shown]
    first = tuple(
        Mismatch("[" + ", ".join(str(int(i)) for i in ix) + "]", _scalar(got[tuple(ix)]), _scalar(expected[tuple(ix)]))
        for ix in idx
    )
    finite_err = err[bad & np.isfinite(err)]
    max_err = float(finite_err.max()) if finite_err.size else math.inf
    nan_count = int(np.count_nonzero(np.isnan(got))) if got.dtype.kind == "f" else 0
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
