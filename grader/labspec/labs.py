"""Where labs live and how a lab's problem module (generator and oracle) is loaded."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from types import ModuleType

from ..errors import GraderError
from .paths import PROJECT_ROOT, labs_dir, locate_labs, problem_to_import
from .spec import LabSpec
from .specload import load_lab

__all__ = ["PROJECT_ROOT", "labs_dir", "lab_ids", "find_lab", "load_problem", "load_problem_file"]


def lab_ids() -> list[str]:
    """The ids of the labs found (see ``paths``); an input error when there are none."""
    root = labs_dir()
    ids = sorted(p.name for p in root.iterdir() if (p / "lab.yaml").is_file())
    if not ids:
        raise GraderError(f"no labs found: no folder here has a lab.yaml ({locate_labs().how})", path=root)
    return ids


def find_lab(lab_id: str) -> LabSpec:
    """Load a lab by id (or by the path of its folder or lab.yaml)."""
    candidate = Path(lab_id)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_dir():
        return load_lab(candidate)
    known = lab_ids()
    if lab_id not in known:
        near = difflib.get_close_matches(lab_id, known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise GraderError(f"unknown lab {lab_id!r} (known labs: {', '.join(known) or 'none'}){hint}")
    return load_lab(labs_dir() / lab_id / "lab.yaml")


def load_problem(spec: LabSpec) -> ModuleType:
    """The lab's problem module: ``generate(params, seed, xp)`` and ``expected(inputs, params)``."""
    return load_problem_file(spec.files.problem)


def load_problem_file(path: Path) -> ModuleType:
    """The problem module at ``path``, imported in this process: never one of a repository's own
    bundle that the user has not claimed (``paths.problem_to_import``)."""
    problem_to_import(path)
    name = f"grader_lab_problem_{abs(hash(str(path)))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise GraderError("cannot load the lab's problem module", path=path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    for attr in ("generate", "expected"):
        if not callable(getattr(module, attr, None)):
            raise GraderError(f"the problem module must define {attr}()", path=path)
    return module
