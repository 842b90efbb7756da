"""The one registry of check families, in report order (after the ``compile`` check)."""

from __future__ import annotations

from .base import CheckFamily
from .correctness import CorrectnessFamily
from .counters import CounterFamily
from .sanitizer import SanitizerFamily
from .speed import SpeedFamily
from .static import StaticFamily

FAMILIES: tuple[CheckFamily, ...] = (StaticFamily(), CorrectnessFamily(), SanitizerFamily(), SpeedFamily(), CounterFamily())


def family(name: str) -> CheckFamily:
    """The registered family called ``name`` (a grader bug where there is none)."""
    for found in FAMILIES:
        if found.name == name:
            return found
    raise KeyError(f"no check family is called {name!r}: the families are {', '.join(f.name for f in FAMILIES)}")
