"""How the families' README text writes a case's parameters."""

from __future__ import annotations

from typing import Mapping

from ...labspec.spec import ParamValue


def big(n: int) -> str:
    for power in range(40, 9, -1):
        if n == 1 << power:
            return f"2^{power}"
    return f"{n:,}" if isinstance(n, int) else str(n)


def case_params(params: Mapping[str, ParamValue]) -> str:
    return ", ".join(f"{k} = {big(v) if isinstance(v, int) else v}" for k, v in params.items())
