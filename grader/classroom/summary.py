"""``summary.md``: the class at a glance. Scores per lab (statistics and a distribution table),
how many students passed each check, pictures of both (when matplotlib is installed), and the
students whose grading hit an error. Nothing in it depends on when or where it was written."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..outcome import fmt_points
from ..textutil import clean_line, markdown_code, markdown_text
from . import plots
from .records import StudentRecord

#: Score bands of the distribution table, as fractions of the lab's points: (label, low, high].
BANDS = (("0", -1.0, 0.0), ("1-24%", 0.0, 0.25), ("25-49%", 0.25, 0.5), ("50-74%", 0.5, 0.75), ("75-99%", 0.75, 0.99999),
         ("100%", 0.99999, 2.0))
OUTCOMES = ("pass", "fail", "error", "skipped")


def band_counts(scores: Sequence[float], max_points: float) -> list[int]:
    counts = [0] * len(BANDS)
    for s in scores:
        frac = s / max_points if max_points else 1.0
        for k, (_, low, high) in enumerate(BANDS):
            if low < frac <= high or (k == 0 and frac <= 0):
                counts[k] += 1
                break
    return counts


def check_counts(rows: Sequence[StudentRecord], lab: str) -> dict[str, dict[str, int]]:
    """For each check of ``lab``, in report order: how many students got each outcome."""
    table: dict[str, dict[str, int]] = {}
    for r in rows:
        for v in r.verdicts:
            if v.lab == lab:
                counts = table.setdefault(v.check, dict.fromkeys(OUTCOMES, 0))
                counts[v.outcome] = counts.get(v.outcome, 0) + 1
    return table


def _stats(scores: Sequence[float]) -> list[str]:
    if not scores:
        return ["", "", "", ""]
    return [fmt_points(round(statistics.fmean(scores), 2)), fmt_points(round(statistics.median(scores), 2)),
            fmt_points(min(scores)), fmt_points(max(scores))]


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else ""


def write(out: Path, labs: Sequence[Mapping[str, Any]], rows: Sequence[StudentRecord]) -> str:
    graded = [r for r in rows if r.graded]
    lab_ids = [str(lab["id"]) for lab in labs]
    max_total = round(sum(float(lab["max_points"]) for lab in labs), 2)
    lines = [f"# Class summary: {len(rows)} students, {len(labs)} labs", ""]
    if len(graded) < len(rows):
        lines += [f"{len(rows) - len(graded)} students have no results yet (listed at the end).", ""]
    lines += ["## Scores", "", "| Lab | Points | Mean | Median | Lowest | Highest | Full marks | Zero |",
              "|---|---|---|---|---|---|---|---|"]
    for lab in labs:
        scores = [s for r in graded if (s := r.score(str(lab["id"]))) is not None]
        full = sum(1 for s in scores if s >= float(lab["max_points"]) > 0)
        lines.append(f"| `{lab['id']}` | {fmt_points(float(lab['max_points']))} | " + " | ".join(_stats(scores))
                     + f" | {full} | {sum(1 for s in scores if s <= 0)} |")
    totals = [r.total for r in graded]
    lines.append(f"| **total** | {fmt_points(max_total)} | " + " | ".join(_stats(totals))
                 + f" | {sum(1 for t in totals if t >= max_total > 0)} | {sum(1 for t in totals if t <= 0)} |")
    lines += ["", "Students per score band (share of the lab's points):", "",
              "| Lab | " + " | ".join(b[0] for b in BANDS) + " |", "|---" * (len(BANDS) + 1) + "|"]
    for lab in labs:
        scores = [s for r in graded if (s := r.score(str(lab["id"]))) is not None]
        lines.append(f"| `{lab['id']}` | " + " | ".join(map(str, band_counts(scores, float(lab["max_points"])))) + " |")
    lines.append("| **total** | " + " | ".join(map(str, band_counts(totals, max_total))) + " |")
    pictures = plots.write(out, labs, graded)
    lines += [""] + ([f"![{title}]({rel})" for title, rel in pictures.images] or [pictures.note]) + [""]
    lines += ["## Checks", "", "How many students got each verdict, per check (pass rate over the students graded).", ""]
    for lab_id in lab_ids:
        lines += [f"### `{lab_id}`", "", "| Check | Pass | Fail | Error | Skipped | Pass rate |", "|---|---|---|---|---|---|"]
        for check, counts in check_counts(graded, lab_id).items():
            lines.append(f"| {markdown_code(check, in_table=True)} | " + " | ".join(str(counts[o]) for o in OUTCOMES)
                         + f" | {_pct(counts['pass'], sum(counts.values()))} |")
        lines.append("")
    troubled = [r for r in rows if r.problems]
    lines += [f"## Students whose grading hit an error ({len(troubled)})", ""]
    if troubled:
        lines += ["| Student | Problems |", "|---|---|"]
        for r in troubled:
            problems = "<br>".join(markdown_text(clean_line(p)) for p in r.problems)
            lines.append(f"| {markdown_code(r.student, in_table=True)} | {problems} |")
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"
