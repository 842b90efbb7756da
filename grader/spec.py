"""Lab specifications: typed, frozen records loaded from lab.yaml by one function.

Every error names the file, the key path and the offending value; unknown keys get a
"did you mean" suggestion.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

import yaml

from . import expr
from .errors import SpecError

Role = Literal["input", "output", "scalar"]
DType = Literal["float32", "int32", "uint32", "uint8", "int64"]
CType = Literal["int", "long long", "float"]
StaticRequirement = Literal[
    "shared_memory", "constant_memory", "no_local_memory", "global_atomics", "shared_atomics", "atomics"
]
SanitizerTool = Literal["memcheck", "racecheck", "synccheck", "initcheck"]
CounterKind = Literal["reduction", "at_most"]
ParamValue = typing.Union[int, str]
VerdictName = Literal["pass", "fail", "error", "skipped", "any"]


@dataclass(frozen=True)
class Arg:
    """One parameter of the student's launcher, in prototype order."""

    name: str
    role: Role
    dtype: Optional[DType] = None  # arrays
    shape: tuple[str, ...] = ()  # arrays: expressions over case parameters
    init: Literal["nan", "zero"] = "nan"  # outputs: contents before each call
    ctype: Optional[CType] = None  # scalars
    value: str = ""  # scalars: expression over case parameters
    host: bool = False  # a host pointer rather than a device pointer


@dataclass(frozen=True)
class Launcher:
    name: str
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Files:
    header: Path
    problem: Path
    reference: Path
    stub: Path
    baselines: Mapping[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class Tolerance:
    """|got - expected| <= sqrt(k) * (atol + rtol * |expected|), k the reduction length."""

    kind: Literal["float", "exact"] = "float"
    rtol: float = 0.0
    atol: float = 0.0
    reduction_length: str = "1"


@dataclass(frozen=True)
class StaticCheck:
    id: str
    require: StaticRequirement
    points: float
    hint: str = ""
    after_correctness: bool = False  # scored only when every correctness case passes (an empty stub has no local memory)


@dataclass(frozen=True)
class Case:
    """One graded input. Integer parameters size the buffers; text ones pick a generator variant."""

    params: Mapping[str, ParamValue]
    seed: int
    points: float
    name: str = ""
    repeat: int = 1  # run this many times with fresh outputs; the worst run counts (races)

    @property
    def label(self) -> str:
        return self.name or params_label(self.params)


def params_label(params: Mapping[str, ParamValue]) -> str:
    """How reports name a case: ``m=17,n=33,k=9``."""
    return ",".join(f"{k}={v}" for k, v in params.items())


@dataclass(frozen=True)
class Correctness:
    cases: tuple[Case, ...]
    time_limit_s: float = 10.0
    guard_elements: int = 64  # canary words before and after every output buffer
    max_mismatches_shown: int = 5


@dataclass(frozen=True)
class Timing:
    min_samples: int = 10
    max_samples: int = 100
    target_rse: float = 0.005
    budget_s: float = 2.0
    warmup_s: float = 0.025
    max_cv: float = 0.02


@dataclass(frozen=True)
class SpeedCheck:
    """Credit on baseline_time / student_time: none at or below ``zero``, full at ``full``."""

    id: str
    baseline: str
    full: float
    zero: float
    points: float
    hint: str = ""


@dataclass(frozen=True)
class Benchmark:
    params: Mapping[str, ParamValue]
    seed: int = 0
    flops: str = "0"
    bytes: str = "0"
    time_limit_s: float = 120.0
    timing: Timing = field(default_factory=Timing)
    checks: tuple[SpeedCheck, ...] = ()


@dataclass(frozen=True)
class CounterCheck:
    """A hardware-counter figure, ``metric`` (divided by ``per`` when given), each a sum of metrics.

    ``reduction``: credit on baseline_value / student_value (full at >= full, none at <= zero).
    ``at_most``: an absolute bound on the student's value (full at <= full, none at >= zero); the
    baseline, if named, is profiled too and shown for comparison.
    """

    id: str
    metric: str
    what: str
    params: Mapping[str, ParamValue]
    seed: int
    full: float
    zero: float
    points: float
    kind: CounterKind = "reduction"
    per: str = ""
    baseline: str = ""
    hint: str = ""
    time_limit_s: float = 120.0

    @property
    def metric_names(self) -> tuple[str, ...]:
        return split_metrics(self.metric) + split_metrics(self.per)


def split_metrics(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split("+") if part.strip())


@dataclass(frozen=True)
class SanitizerCheck:
    """One launch on a tiny case under compute-sanitizer; any reported error fails it."""

    id: str
    tool: SanitizerTool
    params: Mapping[str, ParamValue]
    seed: int
    points: float
    hint: str = ""
    time_limit_s: float = 120.0


@dataclass(frozen=True)
class CompileOptions:
    flags: tuple[str, ...] = ("-O3",)
    time_limit_s: float = 60.0  # a real lab file takes seconds; a template bomb is stopped here


@dataclass(frozen=True)
class LabSpec:
    id: str
    title: str
    files: Files
    launcher: Launcher
    tolerance: Tolerance
    correctness: Correctness
    task: str = ""  # the task for students, Markdown (the lab README is generated around it)
    static: tuple[StaticCheck, ...] = ()
    sanitizers: tuple[SanitizerCheck, ...] = ()
    benchmark: Optional[Benchmark] = None
    counters: tuple[CounterCheck, ...] = ()
    compile: CompileOptions = field(default_factory=CompileOptions)
    root: Path = field(default=Path("."), metadata={"yaml": False})
    source: Path = field(default=Path("lab.yaml"), metadata={"yaml": False})

    @property
    def max_points(self) -> float:
        return (
            sum(c.points for c in self.static)
            + sum(c.points for c in self.correctness.cases)
            + sum(c.points for c in self.sanitizers)
            + (sum(c.points for c in self.benchmark.checks) if self.benchmark else 0)
            + sum(c.points for c in self.counters)
        )

    def baseline_source(self, name: str) -> Path:
        return self.files.reference if name == "reference" else self.files.baselines[name]


@dataclass(frozen=True)
class ExpectedSolution:
    """A known solution and the verdict each check must give it (glob patterns, first match wins)."""

    file: Path
    why: str
    verdicts: Mapping[str, VerdictName]
    min_score: Optional[float] = None
    max_score: Optional[float] = None


    def verdict(self, check_id: str) -> str | None:
        """The expected verdict for a check; ``*`` is the only wildcard (ids contain brackets)."""
        for pattern, verdict in self.verdicts.items():
            regex = ".*".join(re.escape(part) for part in pattern.split("*"))
            if re.fullmatch(regex, check_id):
                return verdict
        return None


@dataclass(frozen=True)
class ExpectedSolutions:
    solutions: tuple[ExpectedSolution, ...]


# ---------------------------------------------------------------- loading


def load_lab(path: Path | str) -> LabSpec:
    """Load and validate ``labs/<id>/lab.yaml`` (or the lab folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / "lab.yaml"
    data = _read_yaml(path)
    spec = _Loader(path).build(LabSpec, data, "")
    spec = dataclasses.replace(spec, root=path.parent.resolve(), source=path)
    _validate_lab(spec, path)
    return spec


def load_expected(path: Path | str) -> ExpectedSolutions:
    path = Path(path)
    return _Loader(path).build(ExpectedSolutions, _read_yaml(path), "")


def _read_yaml(path: Path) -> Any:
    if not path.exists():
        raise SpecError("file not found", path=path)
    if path.is_dir():
        raise SpecError("is a directory, expected a YAML file", path=path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 text (byte {exc.start})", path=path) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"malformed YAML: {where}{problem}", path=path) from None
    if not isinstance(data, dict):
        raise SpecError(f"expected a mapping at the top level, got {_describe(data)}", path=path)
    return data


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


class _Loader:
    def __init__(self, path: Path):
        self.path = path
        self.base = path.parent

    def fail(self, key: str, message: str) -> SpecError:
        return SpecError(message, path=self.path, key=key or "(top level)")

    def build(self, cls: type, data: Any, key: str) -> Any:
        if not isinstance(data, dict):
            raise self.fail(key, f"expected a mapping, got {_describe(data)}")
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("yaml", True)}
        for name in data:
            if name not in fields:
                near = difflib.get_close_matches(str(name), list(fields), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(fields)}"
                raise self.fail(_join(key, str(name)), f"unknown key{hint}")
        kwargs = {}
        for name, f in fields.items():
            sub = _join(key, name)
            if name in data:
                kwargs[name] = self.convert(hints[name], data[name], sub)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise self.fail(sub, "missing required key")
        return cls(**kwargs)

    def convert(self, tp: Any, value: Any, key: str) -> Any:
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            inner = [a for a in args if a is not type(None)]
            for i, option in enumerate(inner):  # first type that takes the value, in declared order
                try:
                    return self.convert(option, value, key)
                except SpecError:
                    if i == len(inner) - 1:
                        raise
        if origin is Literal:
            if value not in args:
                choices = ", ".join(repr(a) for a in args)
                raise self.fail(key, f"must be one of {choices}, got {_describe(value)}")
            return value
        if origin is tuple:
            if not isinstance(value, list):
                raise self.fail(key, f"expected a list, got {_describe(value)}")
            return tuple(self.convert(args[0], v, f"{key}[{i}]") for i, v in enumerate(value))
        if origin in (Mapping, dict, typing.Mapping) or (origin is not None and origin.__name__ == "Mapping"):
            if not isinstance(value, dict):
                raise self.fail(key, f"expected a mapping, got {_describe(value)}")
            return types.MappingProxyType(
                {str(k): self.convert(args[1], v, _join(key, str(k))) for k, v in value.items()}
            )
        if dataclasses.is_dataclass(tp):
            return self.build(tp, value, key)
        if tp is Path:
            if not isinstance(value, str) or not value:
                raise self.fail(key, f"expected a file path, got {_describe(value)}")
            resolved = (self.base / value).resolve()
            if not resolved.exists():
                raise self.fail(key, f"file not found: {value!r} (looked for {resolved})")
            return resolved
        if tp is bool:
            if not isinstance(value, bool):
                raise self.fail(key, f"expected true or false, got {_describe(value)}")
            return value
        if tp is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(key, f"expected an integer, got {_describe(value)}")
            return value
        if tp is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(key, f"expected a number, got {_describe(value)}")
            return float(value)
        if tp is str:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
            if not isinstance(value, str):
                raise self.fail(key, f"expected text, got {_describe(value)}")
            return value
        raise TypeError(f"unsupported field type {tp!r}")  # a bug in the records, not in the YAML


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _validate_lab(spec: LabSpec, path: Path) -> None:
    def fail(key: str, message: str) -> SpecError:
        return SpecError(message, path=path, key=key)

    known_baselines = {"reference", *spec.files.baselines}
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
        for j, text in enumerate(arg.shape or ((arg.value,) if arg.value else ())):
            try:
                expr.names(text)
            except expr.ExprError as exc:
                raise fail(f"{key}.{'shape' if arg.shape else 'value'}", str(exc)) from None
    if not any(a.role == "output" for a in args):
        raise fail("launcher.args", "the launcher needs at least one argument with role 'output'")

    def check_params(params: Mapping[str, int], key: str) -> None:
        for i, arg in enumerate(args):
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
        if case.repeat < 1:
            raise fail(f"correctness.cases[{i}].repeat", f"must be at least 1, got {case.repeat}")
        ids.add(case.label)
    for i, check in enumerate(spec.static):
        _unique(ids, check.id, fail, f"static[{i}].id")
    for i, check in enumerate(spec.sanitizers):
        _unique(ids, check.id, fail, f"sanitizers[{i}].id")
        check_params(check.params, f"sanitizers[{i}].params")
        if check.points < 0:
            raise fail(f"sanitizers[{i}].points", f"points must not be negative, got {check.points}")
    if spec.benchmark:
        check_params(spec.benchmark.params, "benchmark.params")
        for key in ("flops", "bytes"):
            try:
                expr.evaluate(getattr(spec.benchmark, key), spec.benchmark.params)
            except expr.ExprError as exc:
                raise fail(f"benchmark.{key}", str(exc)) from None
        for i, check in enumerate(spec.benchmark.checks):
            _unique(ids, check.id, fail, f"benchmark.checks[{i}].id")
            _threshold(check, known_baselines, fail, f"benchmark.checks[{i}]")
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
        if check.kind == "reduction" and not check.baseline:
            raise fail(f"{key}.baseline", "a 'reduction' counter check compares with a baseline: name one")
        _threshold(check, known_baselines, fail, key)


def _unique(ids: set[str], name: str, fail, key: str) -> None:
    if name in ids:
        raise fail(key, f"duplicate check id {name!r}")
    ids.add(name)


def _threshold(check: SpeedCheck | CounterCheck, known: set[str], fail, key: str) -> None:
    if check.baseline and check.baseline not in known:
        near = difflib.get_close_matches(check.baseline, sorted(known), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise fail(f"{key}.baseline", f"unknown baseline {check.baseline!r} (known: {', '.join(sorted(known))}){hint}")
    if getattr(check, "kind", "reduction") == "at_most":
        if check.full > check.zero:
            raise fail(key, f"an 'at_most' bound needs 'full' ({check.full}) at or below 'zero' ({check.zero})")
    elif check.full < check.zero:
        raise fail(key, f"'full' ({check.full}) must not be below 'zero' ({check.zero})")
    if check.points < 0:
        raise fail(f"{key}.points", f"points must not be negative, got {check.points}")
