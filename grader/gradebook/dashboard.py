"""``dashboard.html``: the class on one self-contained page, a TA's working page. One row per
student: where they stand (graded, not due yet, not handed in: never shown as failures), the score
after the late penalty with the raw score beside it where a penalty applies, late days, penalty
and the collection's flags, then one cell per check under the check's name; a click on a header
sorts the rows by that column. Then each lab's score distribution, with the students who did not
hand it in apart; the students without work to grade and why; the students whose grading hit an
error; links to each student's ``report.html``; and the GPU and grader the run used.

Every text from a student's grading is escaped. The page loads nothing from anywhere and runs one
script, its own: the content security policy allows that script by its hash and no other, so even
text that escaped its escaping could not run. Sorting needs no server: ``dashboard.html#sort=score-desc``
opens sorted (``asc`` or ``desc`` after any column's key), and a click on a header puts its sort
there, so a sorted view can be bookmarked.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any, Mapping, Sequence
from urllib.parse import quote

from ..outcome import fmt_points
from ..textutil import HTML_CSP, clean_line, html_line, plural
from .record import grade_of_record
from .records import StudentRecord, Verdict, sandbox_note
from .summary import BANDS, band_counts

NAME = "dashboard.html"
SCRIPT = """
(function () {
  "use strict";
  var table = document.getElementById("students");
  if (!table) { return; }
  var heads = table.querySelectorAll("th[data-col]");
  function value(row, col) {
    var cell = row.cells[col];
    if (!cell) { return ""; }
    var v = cell.getAttribute("data-v");
    return v === null ? cell.textContent.trim().toLowerCase() : parseFloat(v);
  }
  function sort(th, descending) {
    var col = parseInt(th.getAttribute("data-col"), 10), body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = value(a, col), y = value(b, col), d = x < y ? -1 : (x > y ? 1 : 0);
      return descending ? -d : d;
    });
    for (var i = 0; i < rows.length; i++) { body.appendChild(rows[i]); }
    for (var j = 0; j < heads.length; j++) { heads[j].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }
  function choose(th) {
    var descending = th.getAttribute("aria-sort") === "ascending";
    sort(th, descending);
    try {
      history.replaceState(null, "", "#sort=" + encodeURIComponent(th.getAttribute("data-key")) + (descending ? "-desc" : "-asc"));
    } catch (e) { /* a page opened where the address cannot change still sorts */ }
  }
  function listen(th) {
    th.addEventListener("click", function () { choose(th); });
    th.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); choose(th); }
    });
  }
  for (var k = 0; k < heads.length; k++) { listen(heads[k]); }
  var asked = /^#sort=(.+?)(?:-(asc|desc))?$/.exec(location.hash);
  if (asked) {
    var key = decodeURIComponent(asked[1]);
    for (var n = 0; n < heads.length; n++) {
      if (heads[n].getAttribute("data-key") === key) { sort(heads[n], asked[2] === "desc"); break; }
    }
  }
})();
"""
#: The page's policy: nothing loads; the one script that runs is :data:`SCRIPT`, named by its hash.
CSP = f"{HTML_CSP}; script-src 'sha256-{base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()}'"
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse}td,th{padding:2px 6px;border:1px solid #ddd;text-align:left}
#students td.c{width:14px;min-width:14px;height:16px;padding:0;border:1px solid #fff}
.pass{background:#2e7d32}.fail{background:#e53935}.error{background:#6a1b9a}.skipped{background:#bdbdbd}
.missing{background:#fff;border:1px dashed #bbb!important}.notdue{background:#bbdefb}
#students th{background:#f5f5f5;vertical-align:bottom;white-space:nowrap}#students th.lab{text-align:center;vertical-align:middle}
#students th[data-col]{cursor:pointer;user-select:none}#students th[data-col]:hover{background:#e3f2fd}
#students th.k{padding:4px 0;font-weight:normal;font-size:11px;color:#444}
#students th.k span{writing-mode:vertical-rl;transform:rotate(180deg);display:inline-block;max-height:16em;overflow:hidden;text-overflow:ellipsis}
#students th[aria-sort=ascending]::after{content:" \\25B2";font-size:9px}#students th[aria-sort=descending]::after{content:" \\25BC";font-size:9px}
#students th.k[aria-sort]::after{content:none}#students th.k[aria-sort]{background:#bbdefb}
#students td.s{white-space:nowrap;font-family:monospace}#students td.n{text-align:right;white-space:nowrap}
.raw{color:#777;font-size:12px}.flags{font-size:12px;max-width:22em}.flags summary{cursor:pointer;color:#b71c1c}
.st{font-size:12px;padding:1px 6px;border-radius:8px;white-space:nowrap}.st-graded{background:#e8f5e9}
.st-not-due{background:#bbdefb}.st-not-handed-in{background:#eeeeee}.st-no-results{background:#fff3e0}
.late{background:#fff8e1}#students td.s{position:sticky;left:0;background:#fff}#students tr.late td.s{background:#fff8e1}
#students th[data-key=student]{position:sticky;left:0;z-index:1}#students th[rowspan]{width:1px}.flags summary{white-space:nowrap}
.bars{display:flex;gap:2em;flex-wrap:wrap}.bar{display:flex;align-items:flex-end;gap:3px;height:120px}
.bar div{width:26px;background:#1565c0;color:#fff;font-size:11px;text-align:center}.bar div.none{background:#9e9e9e}
.axis{display:flex;gap:3px;font-size:10px}.axis span{width:26px;text-align:center}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.note{background:#fff3e0;border-left:4px solid #ef6c00;padding:.5em 1em}
"""
OUTCOME_TEXT = {"pass": "passed", "fail": "failed", "error": "error", "skipped": "skipped", "missing": "not handed in",
                "notdue": "not due yet"}
#: Where a student stands, as :func:`_status` says it, and how the page says it.
GRADED, NOT_DUE, NOT_HANDED_IN, NO_RESULTS = "graded", "not due", "not handed in", "no results"
STATUS_TEXT = {GRADED: "graded", NOT_DUE: "not due yet", NOT_HANDED_IN: "not handed in", NO_RESULTS: "no results yet"}
#: The columns before the checks': sort key (in the address: #sort=score-desc) and header.
COLUMNS = (("student", "Student"), ("status", "Status"), ("score", "Score"), ("late", "Late days"),
           ("penalty", "Penalty"), ("flags", "Flags"))
#: Sort order of a check's cells: the ones that need a look first.
CELL_ORDER = {"error": 0, "fail": 1, "missing": 2, "skipped": 3, "notdue": 4, "pass": 5}
FLAG_CHARS = 300


def _status(record: StudentRecord) -> str:
    """Where ``record``'s student stands, from their grade of record: ``graded`` (a score, final or
    not, or an error to look at); ``not due`` (the collected roster says their deadline, an
    extension's, has not come); ``not handed in`` (no repository, an empty one, or no lab's file in
    it); ``no results`` (none published yet). What the page says of a student comes from here alone."""
    if not record.graded:
        return NO_RESULTS
    return {"not_due": NOT_DUE, "not_handed_in": NOT_HANDED_IN}.get(grade_of_record(record).status, GRADED)


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


def _cell(r: StudentRecord, status: str, lab: str, check: str, verdicts: Mapping[tuple[str, str], Verdict]) -> str:
    v = verdicts.get((lab, check))
    kind = ("notdue" if status == NOT_DUE else "missing" if status == NOT_HANDED_IN or lab in r.not_handed_in or v is None
            else v.outcome)
    title = f"{r.student} · {lab}: {check}: {OUTCOME_TEXT.get(kind, kind)}"
    if v is not None and kind == v.outcome:
        title += f" ({fmt_points(v.points)}/{fmt_points(v.max_points)}) {v.message[:300]}"
    return f'<td class="c {html_line(kind)}" data-v="{CELL_ORDER.get(kind, 9)}" title="{html_line(title)}"></td>'


def _report_link(student: str, file: str, text: str = "") -> str:
    """A link to ``file`` of the student's results folder (ids are plain, but the link is made safe anyway)."""
    return f'<a href="students/{html_line(quote(student, safe=""))}/{file}">{html_line(text or file)}</a>'


def _late(r: StudentRecord) -> tuple[int | None, list[str]]:
    """The late days and flags the collected roster gave ``r`` (None and none without one)."""
    late = r.late or {}
    days = late.get("late_days")
    flags = late.get("flags")
    return (days if isinstance(days, int) and not isinstance(days, bool) else None,
            [clean_line(str(f)) for f in flags] if isinstance(flags, list) else [])


def _info_cells(r: StudentRecord, status: str) -> str:
    """The student's own columns: name (a link to their report), status, score, late days, penalty, flags."""
    days, flags = _late(r)
    if status == GRADED:
        score = fmt_points(r.total) + (f' <span class="raw">({fmt_points(r.raw_total)} before the penalty)</span>'
                                       if r.penalty else "")
        value = r.total
    else:
        score, value = "–", -1.0
    shown = "".join(f"<div>{html_line(f[:FLAG_CHARS])}</div>" for f in flags)
    flag_cell = f"<details><summary>{plural(len(flags), 'flag')}</summary>{shown}</details>" if flags else ""
    return (f'<td class="s">{_report_link(r.student, "report.html", r.student)}</td>'
            f'<td><span class="st st-{status.replace(" ", "-")}">{STATUS_TEXT[status]}</span></td>'
            f'<td class="n" data-v="{value}">{score}</td>'
            f'<td class="n" data-v="{-1 if days is None else days}">{"" if days is None else days}</td>'
            f'<td class="n" data-v="{r.penalty}">{f"{r.penalty:.0%}" if r.penalty else ""}</td>'
            f'<td class="flags" data-v="{len(flags)}">{flag_cell}</td>')


def _students(manifest: Any, rows: Sequence[StudentRecord], statuses: Mapping[str, str]) -> list[str]:
    """The sortable table: a student per row, their columns, then a cell per check under its name."""
    checks = _checks(manifest.labs, rows)
    top = "".join(f'<th rowspan="2" data-col="{i}" data-key="{key}" tabindex="0" title="sort by {text.lower()}">'
                  f"{text}{f' (of {fmt_points(manifest.max_total)})' if key == 'score' else ''}</th>"
                  for i, (key, text) in enumerate(COLUMNS))
    top += "".join(f'<th class="lab" colspan="{len(ids)}">{html_line(lab)}</th>' for lab, ids in checks if ids)
    names, col = [], len(COLUMNS)
    for lab, ids in checks:
        for check in ids:
            names.append(f'<th class="k" data-col="{col}" data-key="{html_line(f"{lab}:{check}")}" tabindex="0" '
                         f'title="{html_line(f"{lab}: {check} (click to sort)")}"><span>{html_line(check)}</span></th>')
            col += 1
    out = ['<table id="students">', f"<thead><tr>{top}</tr>", f"<tr>{''.join(names)}</tr></thead>", "<tbody>"]
    for r in rows:
        status = statuses[r.student]
        verdicts = {(v.lab, v.check): v for v in r.verdicts}
        cells = "".join(_cell(r, status, lab, check, verdicts) for lab, ids in checks for check in ids)
        late = ' class="late"' if status == GRADED and r.penalty else ""
        out.append(f'<tr data-status="{status}"{late}>{_info_cells(r, status)}{cells}</tr>')
    out.append("</tbody></table>")
    legend = "".join(f'<span class="{k}"></span>{v}' for k, v in OUTCOME_TEXT.items())
    return [*out, f'<p class="legend">{legend} (hover a cell for the check and its message; click a header to sort)</p>']


def _distribution(lab: Mapping[str, Any], rows: Sequence[StudentRecord], absent: int, not_due: int) -> str:
    """One lab's bars over the graded students; ``absent`` more handed nothing in at all, and the
    work of ``not_due`` is not due yet (in no bar)."""
    lab_id, points = str(lab["id"]), float(lab["max_points"])
    scores = [s for r in rows if (s := r.handed_in_score(lab_id)) is not None]
    missing = absent + sum(1 for r in rows if lab_id in r.not_handed_in)
    counts = band_counts(scores, points)
    most = max([*counts, missing, 1])
    bars = "".join(f'<div style="height:{max(2, round(110 * n / most))}px" title="{n} students">{n}</div>' for n in counts)
    bars += f'<div class="none" style="height:{max(2, round(110 * missing / most))}px" title="{missing} not handed in">{missing}</div>'
    axis = "".join(f"<span>{html_line(b[0])}</span>" for b in BANDS) + "<span>none</span>"
    later = f", {not_due} not due yet" if not_due else ""
    return (f'<div><b>{html_line(lab_id)}</b> ({fmt_points(points)} points, {len(scores)} handed in{later})'
            f'<div class="bar">{bars}</div><div class="axis">{axis}</div></div>')


def _standing(rows: Sequence[StudentRecord], statuses: Mapping[str, str]) -> str:
    """How many students stand where: "4 students: 2 graded (1 late), 1 not due yet, 1 not handed in"."""
    counts = {s: sum(1 for r in rows if statuses[r.student] == s) for s in STATUS_TEXT}
    late = sum(1 for r in rows if statuses[r.student] == GRADED and r.penalty)
    parts = [f"{n} {STATUS_TEXT[s]}" + (f" ({late} late)" if s == GRADED and late else "") for s, n in counts.items() if n]
    return f"<p><b>{plural(len(rows), 'student')}:</b> {', '.join(parts) or 'none'}.</p>"


def _apart(rows: Sequence[StudentRecord], statuses: Mapping[str, str]) -> list[str]:
    """The students with nothing to grade yet, and why: they are neither failures nor errors."""
    apart = [r for r in rows if statuses[r.student] in (NOT_DUE, NOT_HANDED_IN)]
    out = [f"<h2>Students without work to grade ({len(apart)})</h2>"]
    if not apart:
        return [*out, "<p>None.</p>"]
    out.append("<table><tr><th>Student</th><th>Status</th><th>Why</th></tr>")
    for r in apart:
        why = sorted({p.removeprefix("all labs: ") for p in r.problems})
        out.append(f'<tr><td class="s">{html_line(r.student)}</td><td>{STATUS_TEXT[statuses[r.student]]}</td>'
                   f"<td>{'<br>'.join(html_line(p) for p in why)}</td></tr>")
    return [*out, "</table>"]


def render(manifest: Any, rows: Sequence[StudentRecord], not_run: Mapping[str, tuple[str, ...]]) -> str:
    """The page for ``manifest`` (a :class:`~grader.gradebook.grades.Manifest`) and its students' records."""
    statuses = {r.student: _status(r) for r in rows}
    labs, graded = manifest.labs, [r for r in rows if statuses[r.student] == GRADED]
    absent, not_due = (sum(1 for r in rows if statuses[r.student] == s) for s in (NOT_HANDED_IN, NOT_DUE))
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
             "<code>grades.csv</code>, after any late penalty.</p>", _standing(rows, statuses)]
    unsandboxed = sandbox_note(rows)
    if unsandboxed:
        parts.append(f'<p class="note"><b>Not sandboxed:</b> {html_line(unsandboxed)} (grades.csv, <code>sandbox</code> '
                     "<code>none</code>).</p>")
    if any(not_run.get(r.student) for r in graded):
        who = sum(1 for r in graded if not_run.get(r.student))
        parts.append(f'<p class="note"><b>Not a final grade:</b> some checks did not run for {who} of {len(graded)} '
                     "graded students (grades.csv, <code>not_run</code>).</p>")
    parts += ["<h2>Students</h2>", *_students(manifest, rows, statuses),
              "<h2>Scores</h2>", '<div class="bars">', *(_distribution(lab, graded, absent, not_due) for lab in labs), "</div>",
              *_apart(rows, statuses)]
    troubled = [r for r in rows if r.problems and statuses[r.student] not in (NOT_DUE, NOT_HANDED_IN)]
    parts.append(f"<h2>Students whose grading hit an error ({len(troubled)})</h2>")
    if troubled:
        parts.append("<table><tr><th>Student</th><th>Problems</th><th>Reports</th></tr>")
        for r in troubled:
            parts.append(f"<tr><td>{html_line(r.student)}</td><td>{'<br>'.join(html_line(p) for p in r.problems)}</td>"
                         f'<td>{_report_link(r.student, "report.html")} · {_report_link(r.student, "report.json")}</td></tr>')
        parts.append("</table>")
    else:
        parts.append("<p>None.</p>")
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"
