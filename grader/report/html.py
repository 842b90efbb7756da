"""``report.html``: one repository's grading on one self-contained page (no server, no network, no
script): each lab's score, its checks with their messages (and the line of the student's file a
finding names), the timed kernels, and the lab's roofline picture. Every text from the grading is
escaped; the page's content security policy lets it load nothing.

Checks that did not run (no GPU, no counter permission, turned off, left to the course's runner)
are grouped by their reason as the terminal groups them, one row per reason instead of one per
check, and a banner at the top says the score is not a final grade, as it does when the grader
itself failed on a check."""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import INTERNAL_ERROR
from ..outcome import CheckResult, LabReport, Outcome, fmt_points
from ..textutil import HTML_CSP, cap_lines, clean, html_line, html_text, plural
from . import roofline
from .text import by_reason, graded_total, identity_line, score_line

CSP = HTML_CSP
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.8em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:3px 8px;border:1px solid #ddd;text-align:left;vertical-align:top}
td.o{font-weight:600}.pass{color:#2e7d32}.fail{color:#c62828}.error{color:#6a1b9a}.skipped{color:#757575}
pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap;font-size:12px;margin:.3em 0}.who{color:#555;font-size:12px}
.note{background:#fff3e0;border-left:4px solid #ef6c00;padding:.5em 1em}.note ul{margin:.3em 0}summary{cursor:pointer}
"""
WORD = {Outcome.PASS: "pass", Outcome.FAIL: "fail", Outcome.ERROR: "error", Outcome.SKIPPED: "skipped"}


def _skipped_rows(checks: list[CheckResult]) -> list[str]:
    """One row per reason the checks give for not running, with the checks it holds."""
    out = []
    for reason, group in by_reason(checks).items():
        ids = ", ".join(f"<code>{html_line(c.id)}</code>" for c in group)
        which = ids if len(group) == 1 else f"<details><summary>{plural(len(group), 'check')}</summary>{ids}</details>"
        out.append(f'<tr><td class="o skipped">skipped</td><td>{which}</td>'
                   f"<td>0/{fmt_points(sum(c.max_points for c in group))}</td><td>{html_line(reason)}</td></tr>")
    return out


def _not_final(reports: list[LabReport]) -> list[str]:
    """The banner of a grading whose score is not final: checks that did not run, by reason, and
    checks the grader failed on (none: no banner)."""
    skipped = [c for r in reports for c in r.checks if c.outcome is Outcome.SKIPPED]
    failed = [c for r in reports for c in r.checks if c.outcome is Outcome.ERROR and INTERNAL_ERROR in c.message]
    if not skipped and not failed:
        return []
    why = [f"<li>{html_line(reason)}: {plural(len(group), 'check')}, {fmt_points(sum(c.max_points for c in group))} points</li>"
           for reason, group in by_reason(skipped).items()]
    if failed:
        why.append(f"<li>the grader failed on {plural(len(failed), 'check')} (an {INTERNAL_ERROR}: grade again)</li>")
    points = fmt_points(round(sum(c.max_points for c in (*skipped, *failed)), 2))
    return [f'<div class="note"><b>Not a final grade:</b> {plural(len(skipped) + len(failed), "check")} did not run here'
            f" ({points} points not checked):<ul>{''.join(why)}</ul></div>"]


def _lab(r: LabReport) -> list[str]:
    out = [f"<h2>{html_line(r.lab)}: {html_line(r.title)}</h2>", f"<p><code>{html_line(r.submission)}</code>: <b>{html_line(score_line(r))}</b></p>",
           "<table><tr><th>Result</th><th>Check</th><th>Points</th><th>Message</th></tr>"]
    for c in r.checks:
        if c.outcome is Outcome.SKIPPED:
            continue  # one row per reason, below
        where = f" <i>({html_line(c.location.file)}:{c.location.line})</i>" if c.location else ""
        details = (f"<pre>{html_text(cap_lines(clean(c.details), 40))}</pre>"
                   if c.details and c.outcome in (Outcome.FAIL, Outcome.ERROR) else "")
        out.append(f'<tr><td class="o {WORD[c.outcome]}">{WORD[c.outcome]}</td><td><code>{html_line(c.id)}</code></td>'
                   f"<td>{fmt_points(c.points)}/{fmt_points(c.max_points)}</td><td>{html_line(c.message)}{where}{details}</td></tr>")
    out += [*_skipped_rows([c for c in r.checks if c.outcome is Outcome.SKIPPED]), "</table>"]
    if r.timings:
        out.append("<table><tr><th>Kernel</th><th>Median ms</th><th>Min ms</th><th>CV %</th><th>n</th><th>GFLOP/s</th>"
                   "<th>GB/s</th></tr>")
        for kernel, row in r.timings.items():
            out.append(f"<tr><td>{html_line(kernel)}</td><td>{row.get('median_ms', 0):.4f}</td><td>{row.get('min_ms', 0):.4f}</td>"
                       f"<td>{html_line(row.get('cv_pct', ''))}</td><td>{html_line(row.get('n', ''))}</td><td>{html_line(row.get('gflops', ''))}</td>"
                       f"<td>{html_line(row.get('gbps', ''))}</td></tr>")
        out.append("</table>")
    roof = roofline.of(r)
    if roof is not None:
        out += ["<h3>Roofline</h3>", roofline.svg(roof),
                "<table><tr>" + "".join(f"<th>{html_line(c)}</th>" for c in roofline.COLUMNS) + "</tr>"]
        out += ["<tr>" + "".join(f"<td>{html_line(cell)}</td>" for cell in row) + "</tr>" for row in roofline.figures(roof)]
        out.append("</table>")
    return out


def render(reports: list[LabReport], identity: Mapping[str, Any] | None = None) -> str:
    # the grade after any late penalty, the score before it said beside it (as report.md does)
    total, penalty = graded_total(round(sum(r.score for r in reports), 2), identity)
    top = round(sum(r.max_score for r in reports), 2)
    who = identity_line(identity or {})
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
             f"<title>CUDA labs: {fmt_points(total)}/{fmt_points(top)}</title><style>{STYLE}</style></head><body>",
             f"<h1>CUDA labs: {fmt_points(total)}/{fmt_points(top)} points over {plural(len(reports), 'lab')}"
             + (f" ({html_line(penalty)})" if penalty else "") + "</h1>"]
    if who:
        parts.append(f'<p class="who">{html_line(who)}</p>')
    parts += _not_final(reports)
    for r in reports:
        parts += _lab(r)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
