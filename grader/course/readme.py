"""Lab READMEs: one template for every lab, the grading section generated from lab.yaml.

The README is written twice, as ``labs/<lab>/README.md`` for instructors and as
``student_template/labs/<lab>/README.md`` next to the student's file; a test keeps both equal
to what this module generates, so they cannot drift from the YAML.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Mapping

from ..checks import sanitizer
from ..checks.sass import REQUIREMENT_TEXT
from ..engine.plan import course_only_ids, launcher_prototype, planned_checks
from ..errors import GraderError
from ..isolation.compilerlog import offered_names
from ..labspec.spec import LabSpec, ParamValue
from ..outcome import fmt_points
from .validate import load_solutions

TEMPLATE = "README.template.md"


def _big(n: int) -> str:
    for power in range(40, 9, -1):
        if n == 1 << power:
            return f"2^{power}"
    return f"{n:,}" if isinstance(n, int) else str(n)


def _case_params(params: Mapping[str, ParamValue]) -> str:
    return ", ".join(f"{k} = {_big(v) if isinstance(v, int) else v}" for k, v in params.items())


def _output_start(spec: LabSpec) -> str:
    parts = [f"`{a.name}` starts {'NaN-filled' if a.init == 'nan' else 'zeroed'}" for a in spec.launcher.args if a.role == "output"]
    return "Before each call " + ", ".join(parts) + "."


def grading_section(spec: LabSpec) -> str:
    """The "How it is graded" text: every check with its points and thresholds."""
    out: list[str] = []
    gated = [c.id for c in spec.static if c.after_correctness] + [c.id for c in spec.sanitizers]
    out.append(
        "Your file must compile (a wrong launcher prototype is a compile error that names the mismatch). "
        "Then, in this order:"
    )
    out.append("")
    if spec.static:
        out.append("**From the compiled code** (nvcc, cuobjdump; these also run on machines without a GPU):")
        out.append("")
        out.append("| Check | Points | Passes when |")
        out.append("| --- | --- | --- |")
        for c in spec.static:
            star = " (only once every correctness case passes)" if c.after_correctness else ""
            out.append(f"| `{c.id}` | {fmt_points(c.points)} | {REQUIREMENT_TEXT[c.require]}{star} |")
        out.append("")
    cases = spec.correctness.cases
    total = sum(c.points for c in cases)
    tol = spec.tolerance
    if tol.kind == "exact":
        how = "must match exactly"
    else:
        how = (f"must be within sqrt(L) * ({tol.atol:g} + {tol.rtol:g} * |expected|) of a float64 reference, "
               f"where L = `{tol.reduction_length}` is the number of terms in each sum")
    out.append(f"**Correctness** ({fmt_points(total)} points). Each case runs your launcher on fresh random inputs; "
               f"every output {how}. {_output_start(spec)} Every output has "
               f"{spec.correctness.guard_elements} guard elements on each side: writing outside a buffer, or changing "
               f"an input, fails the case. A case that runs longer than {spec.correctness.time_limit_s:g} s is stopped and run once more "
               f"with three times as long; if it does not finish then either, it is an error.")
    out.append("")
    out.append("| Case | Points | Runs |")
    out.append("| --- | --- | --- |")
    for case in cases:
        label = f"{case.name} ({_case_params(case.params)})" if case.name else _case_params(case.params)
        runs = f"{case.repeat} (every run must be right)" if case.repeat > 1 else "1"
        out.append(f"| {label} | {fmt_points(case.points)} | {runs} |")
    out.append("")
    if spec.sanitizers:
        out.append("**compute-sanitizer** on a tiny case, without any memory pool (memcheck pads every allocation "
                   f"by {sanitizer.MEMCHECK_PADDING} bytes), scored only once every correctness case passes:")
        out.append("")
        out.append("| Check | Points | Tool | Case | Fails on |")
        out.append("| --- | --- | --- | --- | --- |")
        for s in spec.sanitizers:
            out.append(f"| `{s.id}` | {fmt_points(s.points)} | {s.tool} | {_case_params(s.params)} | any {sanitizer.WHAT[s.tool]} |")
        out.append("")
    bench = spec.benchmark
    if bench and bench.checks:
        out.append(f"**Speed** ({fmt_points(sum(c.points for c in bench.checks))} points), only once every "
                   f"correctness case passes. Timed at {_case_params(bench.params)} with CUDA events, the L2 cache "
                   "flushed and fresh inputs before every call, interleaved with the baselines in the same run; "
                   "the medians are compared and the output of the last timed call must be right. Credit grows "
                   "linearly between the two ratios:")
        out.append("")
        out.append("| Check | Points | Compared with | No credit at | Full credit at |")
        out.append("| --- | --- | --- | --- | --- |")
        for speed in bench.checks:
            out.append(f"| `{speed.id}` | {fmt_points(speed.points)} | the {speed.baseline} kernel | <= {speed.zero:g}x its speed "
                       f"| >= {speed.full:g}x its speed |")
        out.append("")
    if spec.counters:
        out.append(f"**Hardware counters** ({fmt_points(sum(c.points for c in spec.counters))} points; Nsight Compute, "
                   "one launch, never timed), only once every correctness case passes. Credit grows linearly "
                   "between the two bounds:")
        out.append("")
        out.append("| Check | Points | Measures | Case | No credit at | Full credit at |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for counter in spec.counters:
            measure = counter.what
            if counter.kind == "reduction":
                zero, full = f"<= {counter.zero:g}x fewer than the {counter.baseline} kernel", f">= {counter.full:g}x fewer"
            else:
                zero, full = f">= {counter.zero:g}", f"<= {counter.full:g}"
            out.append(f"| `{counter.id}` | {fmt_points(counter.points)} | {measure} | {_case_params(counter.params)} | {zero} | {full} |")
        out.append("")
        metrics = sorted({m for c in spec.counters for m in c.metric_names})
        out.append("Metrics: " + ", ".join(f"`{m}`" for m in metrics) + ".")
        out.append("")
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

