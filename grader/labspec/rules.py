"""The rules of a lab.yaml that span keys, or a key and a file: parameters every case and shape
names, expressions that evaluate, ids that are unique, thresholds that compare with what exists,
the lab's id that is its folder's name, and the launcher that the interface header declares with
C linkage (a name it does not declare, or declares as C++, is a link error for every student and
the reference alike). Each error names the file, the key and the value."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Callable, Mapping

from ..errors import SpecError
from ..worker import expr
from .spec import CounterCheck, LabSpec, ParamValue, SpeedCheck, scored_on_baseline, split_metrics

#: Builds the error for a key of the lab file being validated.
Fail = Callable[[str, str], SpecError]
#: The most of an interface header read to find the launcher's declaration.
HEADER_LIMIT = 1 << 20
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_C_BLOCK = re.compile(r'extern\s*"C"\s*\{')
_FUNCTION = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_NOT_FUNCTIONS = frozenset({"if", "defined", "sizeof", "__attribute__", "__declspec", "alignas", "decltype", "return"})


def validate_lab(spec: LabSpec, path: Path) -> None:
    def fail(key: str, message: str) -> SpecError:
        return SpecError(message, path=path, key=key)

    folder = Path(os.path.abspath(path)).parent.name
    if spec.id != folder:
        raise fail("id", f"{spec.id!r} is not the lab's folder name ({folder!r}): the student's file is labs/<id>/student.cu and "
                         f"the lab is found by its folder, so they must agree: write id: {folder}, or rename the folder")
    problem = launcher_problem(spec.files.header, spec.launcher.name)
    if problem:
        raise fail("launcher.name", problem)
    known_baselines = set(spec.baseline_names)
    args = spec.launcher.args
    seen: set[str] = set()
    for i, arg in enumerate(args):
        key = f"launcher.args[{i}]"
        if arg.name in seen:
            raise fail(f"{key}.name", f"duplicate argument name {arg.name!r}")
        seen.add(arg.name)
        if arg.role == "scalar":
            if arg.ctype is None or not arg.value:
                raise fail(key, f"scalar argument {arg.name!r} needs 'ctype' and 'value'")
        elif arg.dtype is None or not arg.shape:
            raise fail(key, f"array argument {arg.name!r} needs 'dtype' and 'shape'")
        for text in arg.shape or ((arg.value,) if arg.value else ()):
            try:
                expr.names(text)
            except expr.ExprError as exc:
                raise fail(f"{key}.{'shape' if arg.shape else 'value'}", str(exc)) from None
    if not any(a.role == "output" for a in args):
        raise fail("launcher.args", "the launcher needs at least one argument with role 'output'")

    def check_params(params: Mapping[str, ParamValue], key: str) -> None:
        # a misspelt parameter is named as the case spells it, with the one it stands in for
        needed = {n for arg in args for text in arg.shape or (arg.value,) if isinstance(text, str) for n in expr.names(text)}
        missing = sorted(needed - set(params))
        for name in sorted(set(params) - needed):
            near = difflib.get_close_matches(name, missing, n=1)
            if near:
                raise fail(f"{key}.{name}", f"unknown parameter {name!r}; did you mean {near[0]!r}? "
                                            f"(the launcher's arguments use: {', '.join(sorted(needed))})")
        for arg in args:
            for text in arg.shape or (arg.value,):
                try:
                    val = expr.evaluate(text, params)
                except expr.ExprError as exc:
                    raise fail(key, f"{exc} (needed by launcher argument {arg.name!r})") from None
                if arg.shape and val < 0:
                    raise fail(key, f"shape of {arg.name!r} is negative ({text} = {val})")
        try:
            expr.evaluate(spec.tolerance.reduction_length, params)
        except expr.ExprError as exc:
            raise fail("tolerance.reduction_length", str(exc)) from None

    if not spec.correctness.cases:
        raise fail("correctness.cases", "at least one case is needed")
    ids: set[str] = set()
    for i, case in enumerate(spec.correctness.cases):
        check_params(case.params, f"correctness.cases[{i}].params")
        if case.label in ids:
            raise fail(f"correctness.cases[{i}]", f"duplicate case {case.label!r}")
        ids.add(case.label)
    for i, static in enumerate(spec.static):
        _unique(ids, static.id, fail, f"static[{i}].id")
    for i, tool in enumerate(spec.sanitizers):
        _unique(ids, tool.id, fail, f"sanitizers[{i}].id")
        check_params(tool.params, f"sanitizers[{i}].params")
    if spec.benchmark:
        check_params(spec.benchmark.params, "benchmark.params")
        for key in ("flops", "bytes"):
            try:
                expr.evaluate(getattr(spec.benchmark, key), spec.benchmark.params)
            except expr.ExprError as exc:
                raise fail(f"benchmark.{key}", str(exc)) from None
        for i, speed in enumerate(spec.benchmark.checks):
            _unique(ids, speed.id, fail, f"benchmark.checks[{i}].id")
            _threshold(speed, known_baselines, fail, f"benchmark.checks[{i}]", spec.has_course_files)
    for i, check in enumerate(spec.counters):
        key = f"counters[{i}]"
        _unique(ids, check.id, fail, f"{key}.id")
        check_params(check.params, f"{key}.params")
        for field_name in ("metric", "per"):
            text = getattr(check, field_name)
            for name in split_metrics(text):
                if not re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_]+)*", name):
                    raise fail(f"{key}.{field_name}", f"not an Nsight Compute metric name: {name!r}")
        if not split_metrics(check.metric):
            raise fail(f"{key}.metric", "a metric name is needed")
        if not check.scale > 0:
            raise fail(f"{key}.scale", f"must be a positive number, got {check.scale}")
        if check.kind == "reduction" and not check.baseline:
            raise fail(f"{key}.baseline", "a 'reduction' counter check compares with a baseline: name one")
        _threshold(check, known_baselines, fail, key, spec.has_course_files)


def launcher_problem(header: Path, name: str) -> str:
    """Why ``header`` does not declare the function ``name`` with C linkage ("" when it does)."""
    with open(header, "rb") as fh:
        text = _COMMENT.sub(" ", fh.read(HEADER_LIMIT).decode("utf-8", errors="replace"))
    where = [m.start() for m in re.finditer(rf"\b{re.escape(name)}\s*\(", text)]
    if not where:
        declared = sorted({f for f in _FUNCTION.findall(text) if f not in _NOT_FUNCTIONS})
        near = difflib.get_close_matches(name, declared, n=1)
        return (f"{name!r} is not declared in the interface header {header.name}, so every student's file and the reference "
                f"would fail to link (it declares: {', '.join(declared) or 'no function'})" + (f"; did you mean {near[0]!r}?" if near else ""))
    if not any(_c_linkage(text, at) for at in where):
        return (f"{name!r} is declared in {header.name} without extern \"C\": its symbol would be the C++ mangled name, "
                "and every student's file and the reference would fail to link; declare it extern \"C\"")
    return ""


def _c_linkage(text: str, at: int) -> bool:
    """Whether the declaration at ``at`` has C linkage: ``extern "C"`` before it in the same
    declaration, or an ``extern "C" { ... }`` block around it."""
    start = max(text.rfind(c, 0, at) for c in ";{}")
    if re.search(r'extern\s*"C"', text[start + 1:at]):
        return True
    for block in _C_BLOCK.finditer(text, 0, at):
        depth, i = 1, block.end()
        while depth and i < at:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:
            return True
    return False


def _unique(ids: set[str], name: str, fail: Fail, key: str) -> None:
    if name in ids:
        raise fail(key, f"duplicate check id {name!r}")
    ids.add(name)


def _threshold(check: SpeedCheck | CounterCheck, known: set[str], fail: Fail, key: str, course: bool) -> None:
    if check.baseline == "reference" and scored_on_baseline(check) and not check.course_only:
        raise fail(f"{key}.baseline", "'reference' is the reference solution, which students never get: mark the "
                                      "check `course_only: true` (grading from a student bundle then skips it)")
    # a student bundle leaves out what only course-only checks (or an at_most comparison) use
    left_out = not course and (check.course_only or not scored_on_baseline(check))
    if check.baseline and check.baseline not in known and not left_out:
        near = difflib.get_close_matches(check.baseline, sorted(known), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise fail(f"{key}.baseline", f"unknown baseline {check.baseline!r} (known: {', '.join(sorted(known))}){hint}")
    if getattr(check, "kind", "reduction") == "at_most":
        if check.full > check.zero:
            raise fail(key, f"an 'at_most' bound needs 'full' ({check.full}) at or below 'zero' ({check.zero})")
    elif check.full < check.zero:
        raise fail(key, f"'full' ({check.full}) must not be below 'zero' ({check.zero})")
