"""Human-readable renderings: the terminal summary and the Markdown job summary."""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Mapping, TextIO

from ..context import REPOSITORY_BUNDLE
from ..engine.identity import Identity
from ..labspec.paths import BUNDLE_LABS
from ..outcome import CheckResult, LabReport, Outcome, fmt_points
from ..textutil import (
    cap_lines,
    clean,
    clean_line,
    html_text,
    markdown_code,
    markdown_fence,
    markdown_prose,
    markdown_text,
    neutralize_commands,
    one_line,
    plural,
)
from . import roofline

_COLORS = {Outcome.PASS: "32", Outcome.FAIL: "31", Outcome.ERROR: "31;1", Outcome.SKIPPED: "33"}
MARKDOWN_LIMIT = 1 << 20  # GitHub's job summary limit


def _use_color(stream: TextIO) -> bool:
    return hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("NO_COLOR")


def score_line(r: LabReport, note: str = "") -> str:
    line = f"score {fmt_points(r.score)}/{fmt_points(r.max_score)}"
    if r.skipped_points:
        line += f" ({_not_here(r.skipped_points, r.course_only_points)})"
    return f"{line} {note}" if note else line


def feedback_note(identity: Mapping[str, Any] | None) -> str:
    """What every score line of a grading with the repository's own lab files says ("" otherwise)."""
    if not identity or identity.get("labs_origin") != REPOSITORY_BUNDLE:
        return ""
    return f"[feedback only: graded with the repository's own lab files ({BUNDLE_LABS}), not the course's]"


def _not_here(skipped: float, course_only: float) -> str:
    text = f"{fmt_points(skipped)} {'point' if skipped == 1 else 'points'} not checked here"
    if course_only:
        text += f", {fmt_points(course_only)} of them graded on the course's runner"
    return text


def terminal(reports: Iterable[LabReport], stream: TextIO | None = None, verbose: bool = False,
             identity: Identity | None = None) -> str:
    """The summary for a terminal; with the grading's ``identity``, every score line says when the
    labs were the repository's own (the grade is then feedback)."""
    reports = list(reports)
    note = feedback_note(identity.as_dict() if identity is not None else None)
    stream = stream or sys.stdout
    color = _use_color(stream)
    out: list[str] = []
    for r in reports:
        out.append(f"== {r.lab}: {r.title} -- {one_line(r.submission)}")
        skipped = [c for c in r.checks if c.outcome is Outcome.SKIPPED]
        for c in r.checks:
            if c.outcome is Outcome.SKIPPED and not verbose:
                continue  # one line per reason, below
            tag = f"{c.outcome.symbol:<5}"
            if color:
                tag = f"\x1b[{_COLORS[c.outcome]}m{tag}\x1b[0m"
            pts = f"{fmt_points(c.points):>5}/{fmt_points(c.max_points):<3}" if c.max_points else " " * 9
            out.append(f"  {tag} {pts} {c.id}: {clean_line(c.message)}")
            if c.details and (verbose or c.outcome in (Outcome.FAIL, Outcome.ERROR)):
                for line in cap_lines(clean(c.details), 15 if not verbose else 200).splitlines():
                    out.append(f"                  {line}")
        if r.kernels:
            out.append("  kernels (ptxas): " + "; ".join(
                f"{one_line(k.name)}: {k.registers} regs, {k.smem_bytes} B smem, {k.stack_bytes} B stack, "
                f"{k.spill_store_bytes + k.spill_load_bytes} B spills" for k in r.kernels))
        for lib, row in r.timings.items():
            extra = f", {row['gflops']} GFLOP/s ({row.get('pct_fp32_peak', '?')}% of FP32 peak)" if "gflops" in row else ""
            if "gbps" in row and "gflops" not in row:
                extra = f", {row['gbps']} GB/s ({row.get('pct_dram_peak', '?')}% of DRAM peak)"
            noisy = " [noisy: CV above the limit after a re-measure]" if row.get("noisy") else ""
            out.append(f"  time {lib}: median {row['median_ms']:.4f} ms, min {row['min_ms']:.4f} ms, CV {row['cv_pct']}%, n={row['n']}{extra}{noisy}")
        for reason, group in by_reason(skipped).items() if not verbose else ():
            tag = f"{Outcome.SKIPPED.symbol:<5}"
            if color:
                tag = f"\x1b[{_COLORS[Outcome.SKIPPED]}m{tag}\x1b[0m"
            pts = f"{0:>5}/{fmt_points(sum(c.max_points for c in group)):<3}"
            out.append(f"  {tag} {pts} {plural(len(group), 'check')} ({', '.join(c.id for c in group)}): {reason}")
        if skipped and verbose:
            out.append(f"  skipped {plural(len(skipped), 'check')}: " + "; ".join(by_reason(skipped)))
        if r.environment.get("sandbox"):
            out.append(f"  sandbox: {clean_line(str(r.environment['sandbox']))}")
        out.append(f"  {score_line(r, note)}")
    if len(reports) > 1:
        total, total_max = sum(r.score for r in reports), sum(r.max_score for r in reports)
        not_here = sum(r.skipped_points for r in reports)
        not_here_note = f" ({_not_here(not_here, sum(r.course_only_points for r in reports))})" if not_here else ""
        out.append(f"== total over {len(reports)} labs: {fmt_points(total)}/{fmt_points(total_max)}{not_here_note}"
                   + (f" {note}" if note else ""))
    # Student text is in many of these lines: none may become a GitHub workflow command.
    return neutralize_commands("\n".join(out) + "\n")


def by_reason(checks: list[CheckResult]) -> dict[str, list[CheckResult]]:
    """The checks by the reason they give, in the order the reasons first come."""
    groups: dict[str, list[CheckResult]] = {}
    for c in checks:
        groups.setdefault(clean_line(c.message), []).append(c)
    return groups


def _cell(text: str) -> str:
    """Tool output as one Markdown table cell (or inline text) that renders as itself."""
    return markdown_text(clean_line(text))


def _message(text: str) -> str:
    """A check's message as one table cell: as :func:`_cell`, with CUDA identifiers as code."""
    return markdown_prose(clean_line(text), in_table=True)


def _details(summary: str, text: str) -> list[str]:
    """A collapsed block: ``text`` verbatim in a code block that nothing inside can close."""
    return ["", f"<details><summary>{html_text(clean_line(summary))}</summary>", "", markdown_fence(text), "</details>"]


def late_penalty(identity: Mapping[str, Any] | None) -> tuple[float, int | None]:
    """The fraction of the score the late policy takes and the days late, from a collected roster's
    ``late`` in ``identity`` ((0, None) without one)."""
    late = (identity or {}).get("late") or {}
    days = late.get("late_days")
    try:
        return float(late.get("penalty") or 0.0), days if isinstance(days, int) else None
    except (TypeError, ValueError):
        return 0.0, None


def penalty_text(raw: float, penalty: float, late_days: int | None) -> str:
    """``12 before a 10% late penalty: 1 late day``: what a grade after the penalty says of it."""
    days = f": {plural(late_days, 'late day')}" if late_days else ""
    return f"{fmt_points(raw)} before a {fmt_points(round(penalty * 100, 2))}% late penalty{days}"


def graded_total(raw: float, identity: Mapping[str, Any] | None) -> tuple[float, str]:
    """The score after the late penalty in ``identity``, and what to say of the penalty ("" for none)."""
    penalty, days = late_penalty(identity)
    if not penalty:
        return raw, ""
    return round(raw * (1 - penalty), 2), penalty_text(raw, penalty, days)


def identity_line(identity: Mapping[str, Any]) -> str:
    """Whose work, graded when and with what, in one line (empty without an identity)."""
    parts = [f"{label} {identity[key]}" for key, label in (("student", "student"), ("commit", "commit"), ("graded_at", "graded"))
             if identity.get(key)]
    if identity.get("grader_version"):
        source = str(identity.get("grader_source") or "")[:12]
        parts.append(f"grader {identity['grader_version']}" + (f" ({source})" if source else ""))
    if identity.get("labs_origin"):
        parts.append(f"labs from the {identity['labs_origin']} ({str(identity.get('labs_hash') or '')[:12]})")
    return ", ".join(parts)


def markdown(reports: list[LabReport], identity: Mapping[str, Any] | None = None, html_name: str | None = None) -> str:
    """The Markdown report (``html_name``: the HTML report beside it, linked); its grade is after the
    late penalty of a collected roster (``identity``'s ``late``), with the score before it beside."""
    total, penalty = graded_total(round(sum(r.score for r in reports), 2), identity)
    total_max = sum(r.max_score for r in reports)
    lines = [f"# CUDA lab grade: {fmt_points(total)}/{fmt_points(total_max)}" + (f" ({penalty})" if penalty else ""), ""]
    choice = str(((identity or {}).get("late") or {}).get("choice") or "")
    if choice:
        lines += [_cell(choice[:1].upper() + choice[1:]), ""]
    if html_name:
        lines += [f"Every check, message and roofline picture on one page: [{html_name}]({html_name})", ""]
    note = feedback_note(identity)
    if note:
        lines += [f"**{_cell(note)}**", ""]
    who = identity_line(identity or {})
    if who:
        lines += [f"<sub>{_cell(who)}</sub>", ""]
    icon = {Outcome.PASS: "✅", Outcome.FAIL: "❌", Outcome.ERROR: "💥", Outcome.SKIPPED: "⏭️"}
    for r in reports:
        lines += [f"## {r.lab}: {r.title}", "", f"{markdown_code(one_line(r.submission))}: **{score_line(r, _cell(note) if note else '')}**", ""]
        lines += ["| | Check | Points | Result |", "|---|---|---|---|"]
        for c in r.checks:
            lines.append(f"| {icon[c.outcome]} | `{c.id}` | {fmt_points(c.points)}/{fmt_points(c.max_points)} | {_message(c.message)} |")
        details = [c for c in r.checks if c.details and c.outcome in (Outcome.FAIL, Outcome.ERROR)]
        for c in details:
            lines += _details(c.id, cap_lines(clean(c.details), 40))
        if r.timings:
            lines += ["", "| Kernel | Median ms | Min ms | CV % | n | GFLOP/s | % FP32 peak |", "|---|---|---|---|---|---|---|"]
            for lib, row in r.timings.items():
                lines.append(f"| {lib} | {row['median_ms']:.4f} | {row['min_ms']:.4f} | {row['cv_pct']} | {row['n']} "
                             f"| {row.get('gflops', '')} | {row.get('pct_fp32_peak', '')} |")
            roof = roofline.of(r)
            if roof is not None:
                lines += ["", f"Roofline (FP32 peak {roof.peak_gflops:.0f} GFLOP/s, DRAM {roof.peak_gbps:.0f} GB/s; "
                          f"bytes from {roof.traffic}):", "", *roofline.table(roof)]
        if r.kernels:
            lines += ["", "| Kernel | Registers | Shared B | Stack B | Spill B |", "|---|---|---|---|---|"]
            for k in r.kernels:
                name = markdown_code(one_line(k.name), in_table=True)
                spills = k.spill_store_bytes + k.spill_load_bytes
                lines.append(f"| {name} | {k.registers} | {k.smem_bytes} | {k.stack_bytes} | {spills} |")
        env = ", ".join(f"{k}: {v}" for k, v in r.environment.items() if not k.startswith(("health.", "device.")))
        lines += ["", f"<sub>{_cell(env)}</sub>", ""]
    text = "\n".join(lines)
    if len(text.encode()) > MARKDOWN_LIMIT:
        text = text.encode()[: MARKDOWN_LIMIT - 100].decode(errors="ignore") + "\n\n[report truncated]\n"
    return text
