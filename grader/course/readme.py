"""Lab READMEs: one template for every lab, the grading section generated from lab.yaml.

The README is written twice, as ``labs/<lab>/README.md`` for instructors and as
``student_template/labs/<lab>/README.md`` next to the student's file; a test keeps both equal
to what this module generates, so they cannot drift from the YAML.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

from ..checks.families.registry import FAMILIES
from ..engine.plan import course_only_ids, gated_ids, launcher_prototype, planned_checks
from ..errors import GraderError
from ..isolation.compilerlog import offered_names
from ..labspec.spec import LabSpec
from ..outcome import fmt_points
from .validate import load_solutions

TEMPLATE = "README.template.md"


def grading_section(spec: LabSpec) -> str:
    """The "How it is graded" text: every check with its points and thresholds."""
    out: list[str] = []
    gated = gated_ids(spec)
    out.append(
        "Your file must compile (a wrong launcher prototype is a compile error that names the mismatch). "
        "Then, in this order:"
    )
    out.append("")
    out += [line for family in FAMILIES for line in family.describe(spec)]
    if gated:
        out.append("Checks that an empty or broken kernel would pass trivially score only once every correctness "
                   "case passes: " + ", ".join(f"`{g}`" for g in gated) + ".")
        out.append("")
    out.append("Checks that cannot run on the grading machine (no GPU, no permission to read counters, no "
               "compute-sanitizer) are reported as skipped with the reason, never as passed.")
    course_only = course_only_ids(spec)
    if course_only:
        out.append("")
        out.append("Graded only on the course's runner, because they need the course's reference solution, which "
                   "your repository's bundle of the lab leaves out: " + ", ".join(f"`{c}`" for c in course_only) +
                   ". Grading from your repository skips them (\"graded on the course's runner\"), and the score "
                   "line says how many points they hold.")
    return "\n".join(out).rstrip() + "\n"


def common_failures(spec: LabSpec) -> str:
    """The lab's known-wrong solutions: what each gets wrong and which checks catch it."""
    wrong_dir = (spec.root / "solutions" / "wrong").resolve()
    lines = []
    for sol in load_solutions(spec):
        if sol.file.resolve().parent != wrong_dir:
            continue
        caught = [cid for cid, _, _ in planned_checks(spec) if sol.verdict(cid) in ("fail", "error")]
        cases = [c for c in caught if c.startswith("correctness")]
        if "compile" in caught:
            where = "`compile`"
        elif cases:  # the other checks then fail as "not graded"
            more = f" and {len(cases) - 3} more case{'s' if len(cases) > 4 else ''}" if len(cases) > 3 else ""
            where = ", ".join(f"`{c}`" for c in cases[:3]) + more
        else:
            where = ", ".join(f"`{c}`" for c in caught)
        text = " ".join(sol.why.split())
        lines.append(f"- {text[0].upper()}{text[1:]}: caught by {where}.")
    if not lines:
        return "(none listed)"
    return "\n".join(lines)


def provided_names(spec: LabSpec) -> str:
    """What the header declares besides the launcher, and that a student's own declaration wins."""
    header = spec.files.header.read_bytes()
    names = offered_names(header)
    if not names:
        return f"`{spec.files.header.name}` declares nothing else: every other name in your file is your own."
    decls = []
    for name in names:
        found = re.search(rb"^\s*(?!#)([^\n]*\b" + re.escape(name.encode()) + rb"\b[^\n]*;)", header, re.MULTILINE)
        decls.append(f"`{found.group(1).decode().strip()}`" if found else f"`{name}`")
    return (f"`{spec.files.header.name}` also declares {', '.join(decls)}. Declare "
            f"{'it' if len(names) == 1 else 'any of them'} yourself if you like (a `#define` or a constant): "
            "the header's then steps aside and yours is used.")


def render(spec: LabSpec) -> str:
    if not spec.has_course_files:
        raise GraderError("this lab is a student bundle: its README is written from the course repository",
                          path=spec.source)
    template_path = spec.root.parent / TEMPLATE
    if not template_path.is_file():
        raise GraderError("not found: the template of every lab's README", path=template_path)
    template = string.Template(template_path.read_text(encoding="utf-8"))
    text = template.substitute(
        title=spec.title,
        lab=spec.id,
        header=spec.files.header.name,
        prototype=launcher_prototype(spec),
        provided=provided_names(spec),
        task=(spec.task or "(no task text in lab.yaml)").strip(),
        points=fmt_points(spec.max_points),
        grading=grading_section(spec).strip(),
        failures=common_failures(spec),
    )
    return text.rstrip() + "\n"


def targets(spec: LabSpec) -> list[Path]:
    """Where the README goes: the lab folder and, next to the stub, the student template."""
    return [spec.root / "README.md", spec.files.stub.parent / "README.md"]

