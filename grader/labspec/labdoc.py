"""The lab.yaml reference page, ``labs/LAB_YAML.md``, generated from the records in ``spec``.

Every key is a field of a record; its meaning is the field's ``doc`` metadata, its type and
default come from the declaration, and records and keys appear in the order the loader reads
them (``specload.records``, ``specload.yaml_fields``). A test keeps the committed page equal to
``render()``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from ..host.safeio import write_whole
from . import spec
from .paths import labs_dir
from .specload import records, yaml_fields

FILENAME = "LAB_YAML.md"
TITLE = "lab.yaml reference"

#: The YAML files a lab has: (where, top-level record).
DOCUMENTS: tuple[tuple[str, type], ...] = (
    ("labs/<id>/lab.yaml", spec.LabSpec),
    ("labs/<id>/solutions/expected.yaml", spec.ExpectedSolutions),
)

INTRO = """\
A lab is a folder `labs/<id>/`: `lab.yaml` (described here), the interface header and the
`problem.py` it names, known solutions under `solutions/correct/` and `solutions/wrong/` with
the verdicts each must get in `solutions/expected.yaml` (described here too), and a `README.md`
that `cuda-grader readme` generates from both and `labs/README.template.md`. The reference
solution and the student's starting file live wherever `files` points (`reference/<id>/`,
`student_template/labs/<id>/`). `cuda-grader check-lab <id>` loads `lab.yaml` and reports the first
error in it; `cuda-grader validate <id>` grades every known solution and compares the verdicts.
`cuda-grader release` copies each lab into the student bundle of a student repository
(`.cuda-grader/labs/<id>/`), without the reference solution and the known solutions: there
`files.reference` is left out, and the checks marked `course_only` are skipped.

- Keys without a default are required. An unknown key is an error that names the closest known key.
- Paths are relative to the folder of the YAML file that holds them, and must be regular files
  inside the lab's folder (in a course repository, `labs/` beside `reference/`: inside the
  repository), reached through no symbolic link; an absolute path or a `..` out of it is an error.
- Expressions (shapes, scalar values, `reduction_length`, `flops`, `bytes`) are arithmetic over
  the case parameters: numbers, parameter names, `+ - * / // % **` and parentheses.
- Check ids and case labels are unique within a lab: reports and `expected.yaml` name checks by them.
- `full` and `zero` give linear partial credit: no points at `zero`, all at `full`.
- A list of records is written as a YAML list of mappings; its key path ends in `[]` below."""


def target() -> Path:
    """Where the page goes: next to the labs."""
    return labs_dir() / FILENAME


def render() -> str:
    """The whole page, Markdown."""
    sections = [(document, key, cls) for document, root in DOCUMENTS for key, cls in records(root)]
    headings = [TITLE] + [h for document, _ in DOCUMENTS for h in
                          [f"`{document}`"] + [_heading(d, k) for d, k, _ in sections if d == document]]
    assert len(set(headings)) == len(headings), headings
    slugs = dict(zip(headings, _anchors(headings)))
    anchors = {(document, key): slugs[_heading(document, key)] for document, key, _ in sections}
    out = [
        f"# {TITLE}",
        "",
        "<!-- Generated from the field docs in grader/labspec/spec.py by `cuda-grader readme`: edit those, then "
        "regenerate. -->",
        "",
        INTRO,
        "",
    ]
    for document, _ in DOCUMENTS:
        out.append(f"- `{document}`")
        out += [f"  - [{_heading(d, k)}](#{anchors[(d, k)]})" for d, k, _ in sections if d == document]
    out.append("")
    for document, _ in DOCUMENTS:
        out += [f"## `{document}`", ""]
        for d, key, cls in sections:
            if d == document:
                out += _section(document, key, cls, anchors)
    return "\n".join(out).rstrip() + "\n"


def _section(document: str, key: str, cls: type, anchors: dict[tuple[str, str], str]) -> list[str]:
    hints = typing.get_type_hints(cls)
    out = [f"### {_heading(document, key)}", "", f"Record `spec.{cls.__name__}`. {_docstring(cls)}", ""]
    out += ["| Key | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
    for name, f in yaml_fields(cls).items():
        sub = f"{key}.{name}" if key else name
        link = _link(hints[name], sub, document, anchors)
        cells = [f"`{name}`", _type(hints[name], link), _default(f, link), f.metadata.get("doc", "")]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    out.append("")
    return out


def _heading(document: str, key: str) -> str:
    return f"`{key}`" if key else f"Top level of {Path(document).name}"


def _anchors(headings: list[str]) -> list[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, repeats numbered."""
    seen: dict[str, int] = {}
    out = []
    for heading in headings:
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.append(slug if n == 0 else f"{slug}-{n}")
    return out


def _docstring(cls: type) -> str:
    text = inspect.cleandoc(cls.__doc__ or "")
    return text.replace("``", "`")


def _link(tp: Any, key: str, document: str, anchors: dict[tuple[str, str], str]) -> str:
    """A link to the section of the record a key holds (or holds a list of), else ""."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return next((link for a in args if (link := _link(a, key, document, anchors))), "")
    if origin is tuple:
        return _link(args[0], f"{key}[]", document, anchors)
    if dataclasses.is_dataclass(tp):
        return f"[`{key}`](#{anchors[(document, key)]})"
    return ""


def _type(tp: Any, link: str) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a, link) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is tuple:
        return f"list of mappings, see {link}" if link else f"list of {_type(args[0], link)}"
    if origin is not None and args and len(args) == 2 and "Mapping" in getattr(origin, "__name__", ""):
        return f"mapping from text to {_type(args[1], link)}"
    if dataclasses.is_dataclass(tp):
        return f"mapping, see {link}"
    return {str: "text", int: "integer", float: "number", bool: "`true` or `false`", Path: "path"}[tp]


def _default(f: dataclasses.Field[Any], link: str) -> str:
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "required"
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[operator]
    if dataclasses.is_dataclass(value):
        return f"the defaults in {link}"
    if value is None:
        return "none"
    if isinstance(value, (tuple, dict)):
        return "`" + (json.dumps(list(value)) if isinstance(value, tuple) else json.dumps(value)) + "`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, str) and not value:
        return '`""`'
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.labspec.labdoc [--check]``: write the page, or exit 1 if it is stale."""
    args = sys.argv[1:] if argv is None else argv
    text, path = render(), target()
    if "--check" in args:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is stale: run `cuda-grader readme` (or `python -m grader.labspec.labdoc`)", file=sys.stderr)
            return 1
        return 0
    write_whole(path, text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
