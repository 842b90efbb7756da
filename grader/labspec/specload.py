"""Loading lab.yaml and expected.yaml into the records of ``spec``, and validating them.

Every error names the file, the key path and the offending value; unknown keys get a
"did you mean" suggestion. Every file a lab names stays inside the lab's folder (``lab_bound``):
no absolute path, no ``..``, no symbolic link on the way, a regular file at the end, so a lab.yaml
from a student's repository cannot make the grader read ``/etc/shadow`` into a report. The keys a
record accepts are its fields (``yaml_fields``), read in declaration order; ``records`` walks the
same types the loader does, for the lab.yaml reference.

Every YAML file the grader reads from a user (lab.yaml, expected.yaml, the late policy, a student
repository's workflow) is read here (``read_yaml``, ``parse_yaml``): through the capped reader, and
without anchors or aliases. An alias repeats a value without copying its text, so a file of a few
hundred bytes can stand for billions of values ("billion laughs"): a loader that builds them, or
an error message that prints one, never ends. Refused at the first anchor, with its line.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import stat
import types
import typing
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Literal, Mapping

import yaml

from ..errors import GraderError, SpecError
from ..host.safeio import read_file
from .rules import validate_lab
from .spec import ExpectedSolutions, LabSpec

__all__ = ["load_lab", "load_expected", "lab_bound", "parse_yaml", "read_yaml", "yaml_fields", "records"]

#: In a course repository, the folder beside ``labs/`` that holds the reference solutions.
COURSE_REFERENCE = "reference"
#: Numbers that must be more than 0 (every number of a lab must be 0 or more): a limit of 0 s or
#: 0 samples would end a step before it starts.
POSITIVE = frozenset({"time_limit_s", "budget_s", "repeat", "min_samples", "max_samples", "scale"})
#: The most a YAML file the grader reads may hold (a lab.yaml is under 10 KB).
YAML_LIMIT_BYTES = 1 << 20


def lab_bound(lab_folder: Path) -> Path:
    """The folder every file a lab names must stay inside: the lab's own folder; for a lab of a
    course repository (``<course>/labs/<lab>`` beside ``<course>/reference/``), the course
    repository, whose ``reference/`` and ``student_template/`` its lab.yaml names. A bundle
    (``release``) keeps every file of a lab in the lab's folder."""
    folder = Path(os.path.abspath(lab_folder))
    course = folder.parent.parent
    return course if folder.parent.name == "labs" and _is_course(course) else folder


def _is_course(folder: Path) -> bool:
    """``folder`` is a course repository: ``labs/`` and ``reference/`` in it, folders and not links."""
    return all(folder.joinpath(name).is_dir() and not folder.joinpath(name).is_symlink() for name in ("labs", COURSE_REFERENCE))


def load_lab(path: Path | str) -> LabSpec:
    """Load and validate ``labs/<id>/lab.yaml`` (or the lab folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / "lab.yaml"
    lab_folder = Path(os.path.abspath(path.parent))
    bound = lab_bound(lab_folder)
    _not_a_link(path, lab_folder, bound)
    data = read_yaml(path)
    spec: LabSpec = _Loader(path, lab_folder, bound).build(LabSpec, data, "")
    spec = dataclasses.replace(spec, root=path.parent.resolve(), source=path)
    validate_lab(spec, path)
    return spec


def load_expected(path: Path | str) -> ExpectedSolutions:
    """Load ``labs/<id>/solutions/expected.yaml`` (or the project's own corpus of that format):
    its files stay inside the course repository that holds it, else inside its lab's folder. A
    bundle never has one: release leaves the known solutions out."""
    path = Path(path)
    lab_folder = Path(os.path.abspath(path.parent.parent))
    bound = _course_holding(lab_folder) or lab_bound(lab_folder)
    _not_a_link(path, lab_folder, bound)
    expected: ExpectedSolutions = _Loader(path, lab_folder, bound).build(ExpectedSolutions, read_yaml(path), "")
    return expected


def _course_holding(folder: Path) -> Path | None:
    """The course repository ``folder`` is in (a folder with ``labs/`` and ``reference/``, neither a link), if any."""
    return next((candidate for candidate in (folder, *folder.parents) if _is_course(candidate)), None)


def _not_a_link(path: Path, lab_folder: Path, bound: Path) -> None:
    """A lab's YAML file and the folders from ``bound`` down to it (the lab's folder included) must
    be themselves, not links: a link would let a repository's bundle stand in for another folder."""
    here = Path(os.path.abspath(path))
    start = bound if bound != lab_folder else lab_folder.parent
    if not here.is_relative_to(start):
        start = here.parent
    current = start
    for part in here.relative_to(start).parts:
        current = current / part
        if current.is_symlink():
            raise SpecError(f"is reached through a symbolic link ({current}): a lab's files must be the files themselves",
                            path=path)


def yaml_fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The keys a record accepts, in the order the loader reads them (fields marked ``yaml: False`` are not keys)."""
    return {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("yaml", True)}


def unknown_key(name: str, known: list[str]) -> str:
    """What to say of a key no record has: the nearest known one, or all of them."""
    near = difflib.get_close_matches(name, known, n=1)
    return "unknown key" + (f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(known)}")


def records(cls: type, key: str = "") -> list[tuple[str, type]]:
    """Every record the loader builds from ``cls`` down, with its key path, depth first in reading order.

    List entries end in ``[]`` (``correctness.cases[]``); the top level is ``""``.
    """
    out = [(key, cls)]
    hints = typing.get_type_hints(cls)
    for name in yaml_fields(cls):
        for sub, record in _nested(hints[name], _join(key, name)):
            out += records(record, sub)
    return out


def _nested(tp: Any, key: str) -> Iterator[tuple[str, type]]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            yield from _nested(option, key)
    elif origin is tuple:
        yield from _nested(args[0], f"{key}[]")
    elif _is_mapping(origin):
        yield from _nested(args[1], f"{key}.<name>")
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        yield key, tp


def _is_mapping(origin: Any) -> bool:
    return origin in (Mapping, dict, typing.Mapping) or (origin is not None and origin.__name__ == "Mapping")


class _PlainLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases where the composer meets them (before
    any value is built from one)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(None, None, "anchors and aliases (&name, *name) are not accepted: "
                                              "write each value out", event.start_mark)
        return super().compose_node(parent, index)


#: Deeper than this, a document is left to the Python loader (whose recursion limit refuses it):
#: libyaml's composer recurses in C, where a file of a million ``[`` would overflow the stack.
FAST_DEPTH = 64


def _fast(text: str) -> Any:
    """``text``'s value through libyaml (ten times faster: the five labs' YAML took 0.1-0.3 s of
    every grade's start), or ``_SLOW`` where the Python loader must answer: libyaml missing, an
    anchor or alias, nesting deeper than ``FAST_DEPTH``, or any error (its message is the
    Python loader's). Its events are read first, one at a time: nothing is composed before the
    whole document has been seen to be plain and shallow."""
    if not yaml.__with_libyaml__:
        return _SLOW
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                return _SLOW
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > FAST_DEPTH:
                    return _SLOW
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        return yaml.load(text, Loader=yaml.CSafeLoader)
    except Exception:
        return _SLOW


_SLOW = object()


def parse_yaml(text: str, path: Path | str) -> Any:
    """The value of YAML ``text`` (from ``path``, for the message), without anchors or aliases."""
    value = _fast(text)
    if value is not _SLOW:
        return value
    try:
        return yaml.load(text, Loader=_PlainLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"malformed YAML: {where}{problem}", path=path) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise SpecError(f"malformed YAML: {str(exc)[:120]}", path=path) from None
    except RecursionError:
        raise SpecError("malformed YAML: nested too deeply", path=path) from None


def read_yaml(path: Path) -> Any:
    """The mapping in the YAML file ``path``: itself a regular file (not a link), of at most
    ``YAML_LIMIT_BYTES``, UTF-8, without anchors or aliases."""
    try:
        raw = read_file(path, YAML_LIMIT_BYTES, "a YAML file")
    except GraderError as exc:
        raise SpecError(str(exc).removeprefix(f"{path}: "), path=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 text (byte {exc.start})", path=path) from None
    data = parse_yaml(text, path)
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
    def __init__(self, path: Path, lab_folder: Path, bound: Path):
        self.path = path
        self.base = Path(os.path.abspath(path.parent))
        self.bound = bound
        self.course = bound != lab_folder  # a lab of a course repository: its files may be anywhere in it

    def fail(self, key: str, message: str) -> SpecError:
        return SpecError(message, path=self.path, key=key or "(top level)")

    def build(self, cls: type, data: Any, key: str) -> Any:
        if not isinstance(data, dict):
            raise self.fail(key, f"expected a mapping, got {_describe(data)}")
        hints = typing.get_type_hints(cls)
        fields = yaml_fields(cls)
        for name in data:
            if name not in fields:
                raise self.fail(_join(key, str(name)), unknown_key(str(name), list(fields)))
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
        if _is_mapping(origin):
            if not isinstance(value, dict):
                raise self.fail(key, f"expected a mapping, got {_describe(value)}")
            return types.MappingProxyType(
                {str(k): self.convert(args[1], v, _join(key, str(k))) for k, v in value.items()}
            )
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return self.build(tp, value, key)
        if tp is Path:
            return self.lab_file(value, key)
        if tp is bool:
            if not isinstance(value, bool):
                raise self.fail(key, f"expected true or false, got {_describe(value)}")
            return value
        if tp is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(key, f"expected an integer, got {_describe(value)}")
            return int(self.in_range(value, key, integer=True))
        if tp is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(key, f"expected a number, got {_describe(value)}")
            return float(self.in_range(value, key))
        if tp is str:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
            if not isinstance(value, str):
                raise self.fail(key, f"expected text, got {_describe(value)}")
            return value
        raise TypeError(f"unsupported field type {tp!r}")  # a bug in the records, not in the YAML

    def in_range(self, value: float, key: str, integer: bool = False) -> float:
        """``value`` if it is a number a lab can mean: finite, never negative (points, limits,
        tolerances, sizes, seeds), and more than 0 where 0 would stop the step (a time limit)."""
        name = key.rsplit(".", 1)[-1]
        if not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, got {value}")
        if value < 0:
            raise self.fail(key, f"{name} must not be negative, got {value}")
        if value == 0 and name in POSITIVE:
            raise self.fail(key, f"must be {'at least 1' if integer else 'more than 0'}, got {value}")
        return value

    def lab_file(self, value: Any, key: str) -> Path:
        """A file the lab names: relative, inside ``bound``, reached through no link, a regular file."""
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a file path, got {_describe(value)}")
        inside = "the course repository" if self.course else "the lab's folder"
        rel = PurePosixPath(value)
        if rel.is_absolute():
            raise self.fail(key, f"{value!r} is an absolute path: name the file relative to the lab.yaml, inside {inside} ({self.bound})")
        if ".." in rel.parts and not self.course:
            raise self.fail(key, f"{value!r} goes up a folder ('..'): a lab's files must stay inside its folder ({self.bound})")
        target = Path(os.path.normpath(self.base / rel))
        if not target.is_relative_to(self.bound) or target == self.bound:
            raise self.fail(key, f"{value!r} is outside {inside} ({self.bound}): a lab's files must stay inside it")
        current, info = self.bound, None
        for part in target.relative_to(self.bound).parts:
            current = current / part
            try:
                info = os.lstat(current)
            except FileNotFoundError:
                raise self.fail(key, f"file not found: {value!r} (looked for {target})") from None
            except OSError as exc:
                raise self.fail(key, f"cannot read {value!r} ({current}): {exc.strerror or exc}") from None
            if stat.S_ISLNK(info.st_mode):
                raise self.fail(key, f"{value!r} goes through a symbolic link ({current}): a lab's files must be the files themselves")
        if info is None or not stat.S_ISREG(info.st_mode):
            raise self.fail(key, f"{value!r} is not a regular file ({target})")
        resolved = target.resolve()
        if not resolved.is_relative_to(self.bound.resolve()):  # the lexical check and lstat agree; the kernel has the last word
            raise self.fail(key, f"{value!r} is outside {inside} ({self.bound}): a lab's files must stay inside it")
        return resolved


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name
