"""``dashboard.html``: the class on one self-contained page (no server, no network, no script):
students by checks as a heat map, each lab's score distribution with the students who did not
hand it in apart, the students whose grading hit an error with links to their reports, and the
GPU and grader the run used. Every text from a student's grading is escaped; the page's content
security policy lets it load nothing from anywhere."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..outcome import fmt_points
from ..textutil import HTML_CSP, html_line, plural
from .records import StudentRecord, Verdict, sandbox_note
from .summary import BANDS, band_counts

NAME = "dashboard.html"
CSP = HTML_CSP
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse}td,th{padding:2px 6px;border:1px solid #ddd;text-align:left}
.heat td.c{width:14px;height:14px;padding:0;border:1px solid #fff}
.pass{background:#2e7d32}.fail{background:#e53935}.error{background:#6a1b9a}.skipped{background:#bdbdbd}
.missing{background:#fff;border:1px dashed #bbb!important}
.heat th.lab{text-align:center;font-weight:600}.heat td.s{white-space:nowrap;font-family:monospace}
.bars{display:flex;gap:2em;flex-wrap:wrap}.bar{display:flex;align-items:flex-end;gap:3px;height:120px}
.bar div{width:26px;background:#1565c0;color:#fff;font-size:11px;text-align:center}.bar div.none{background:#9e9e9e}
.axis{display:flex;gap:3px;font-size:10px}.axis span{width:26px;text-align:center}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.note{background:#fff3e0;border-left:4px solid #ef6c00;padding:.5em 1em}
"""
OUTCOME_TEXT = {"pass": "passed", "fail": "failed", "error": "error", "skipped": "skipped", "missing": "not handed in"}


def _checks(labs: Sequence[Mapping[str, Any]], rows: Sequence[StudentRecord]) -> list[tuple[str, list[str]]]:
    """Each lab's checks, in report order, as the students' reports list them."""
    out = []
    for lab in labs:
        seen: dict[str, None] = {}
        for r in rows:
            for v in r.verdicts:
                if v.lab == str(lab["id"]):
                    seen.setdefault(v.check)
        out.append((str(lab["id"]), list(seen)))
    return out


def _cell(r: StudentRecord, lab: str, check: str, verdicts: Mapping[tuple[str, str], Verdict]) -> str:
    v = verdicts.get((lab, check))
    kind = "missing" if lab in r.not_handed_in or v is None else v.outcome
    title = f"{r.student} · {lab}: {check}: {OUTCOME_TEXT.get(kind, kind)}"
    if v is not None and kind != "missing":
        title += f" ({fmt_points(v.points)}/{fmt_points(v.max_points)}) {v.message[:300]}"
    return f'<td class="c {html_line(kind)}" title="{html_line(title)}"></td>'


def _heat_map(labs: Sequence[Mapping[str, Any]], rows: Sequence[StudentRecord]) -> list[str]:
    checks = _checks(labs, rows)
    out = ['<table class="heat"><tr><th></th>' + "".join(f'<th class="lab" colspan="{len(ids)}">{html_line(lab)}</th>'
                                                         for lab, ids in checks if ids) + "<th>total</th></tr>"]
    for r in rows:
        verdicts = {(v.lab, v.check): v for v in r.verdicts}
        cells = "".join(_cell(r, lab, check, verdicts) for lab, ids in checks for check in ids)
        out.append(f'<tr><td class="s"><a href="students/{html_line(r.student)}/report.md">{html_line(r.student)}</a></td>{cells}'
                   f"<td>{fmt_points(r.total)}</td></tr>")
    out.append("</table>")
    legend = "".join(f'<span class="{k}"></span>{v}' for k, v in OUTCOME_TEXT.items())
    return [*out, f'<p class="legend">{legend} (hover a cell for the check and its message)</p>']


def _distribution(lab: Mapping[str, Any], rows: Sequence[StudentRecord]) -> str:
    lab_id, points = str(lab["id"]), float(lab["max_points"])
    scores = [s for r in rows if (s := r.handed_in_score(lab_id)) is not None]
    missing = sum(1 for r in rows if lab_id in r.not_handed_in)
    counts = band_counts(scores, points)
    most = max([*counts, missing, 1])
    bars = "".join(f'<div style="height:{max(2, round(110 * n / most))}px" title="{n} students">{n}</div>' for n in counts)
    bars += f'<div class="none" style="height:{max(2, round(110 * missing / most))}px" title="{missing} not handed in">{missing}</div>'
    axis = "".join(f"<span>{html_line(b[0])}</span>" for b in BANDS) + "<span>none</span>"
    return (f'<div><b>{html_line(lab_id)}</b> ({fmt_points(points)} points, {len(scores)} handed in)'
            f'<div class="bar">{bars}</div><div class="axis">{axis}</div></div>')


def render(manifest: Any, rows: Sequence[StudentRecord], not_run: Mapping[str, tuple[str, ...]]) -> str:
    """The page for ``manifest`` (a :class:`~grader.gradebook.grades.Manifest`) and its students' records."""
    labs, graded = manifest.labs, [r for r in rows if r.graded]
    gpus = sorted({("no GPU (" + r.gpu.removeprefix("none: ") + ")") if r.gpu.startswith("none") else (r.gpu or "unknown")
                   for r in graded})
    grader = manifest.grader
    parts = [f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
             f"<title>Class results: {plural(len(rows), 'student')}</title><style>{STYLE}</style></head><body>",
             f"<h1>Class results: {plural(len(rows), 'student')}, {plural(len(labs), 'lab')}</h1>",
             f"<p>Graded on {html_line(', '.join(gpus) or 'no GPU')} by cuda-lab-grader {html_line(grader.get('version', ''))} "
             f"(sources {html_line(str(grader.get('source', ''))[:12])})"
             + (f", shard {html_line(manifest.shard)}" if manifest.shard else "") + "; every score below is in "
             "<code>grades.csv</code>.</p>"]
    unsandboxed = sandbox_note(rows)
    if unsandboxed:
        parts.append(f'<p class="note"><b>Not sandboxed:</b> {html_line(unsandboxed)} (grades.csv, <code>sandbox</code> '
                     "<code>none</code>).</p>")
    if any(not_run.get(r.student) for r in graded):
        who = sum(1 for r in graded if not_run.get(r.student))
        parts.append(f'<p class="note"><b>Not a final grade:</b> some checks did not run for {who} of {len(graded)} '
                     "students (grades.csv, <code>not_run</code>).</p>")
    parts += ["<h2>Scores</h2>", '<div class="bars">', *(_distribution(lab, graded) for lab in labs), "</div>",
              "<h2>Students by checks</h2>", *_heat_map(labs, rows)]
    troubled = [r for r in rows if r.problems]
    parts.append(f"<h2>Students whose grading hit an error ({len(troubled)})</h2>")
    if troubled:
        parts.append("<table><tr><th>Student</th><th>Problems</th><th>Reports</th></tr>")
        for r in troubled:
            sid = html_line(r.student)
            parts.append(f"<tr><td>{sid}</td><td>{'<br>'.join(html_line(p) for p in r.problems)}</td>"
                         f'<td><a href="students/{sid}/report.md">report.md</a> · '
                         f'<a href="students/{sid}/report.json">report.json</a></td></tr>')
        parts.append("</table>")
    else:
        parts.append("<p>None.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
