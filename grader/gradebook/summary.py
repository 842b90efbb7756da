"""``summary.md``: the class at a glance. How many students have a grade of record of each status,
scores per lab (statistics and a distribution table), how many students passed each check,
pictures of both (when matplotlib is installed), the students whose grading hit an error, and
apart from them those not due yet and those who handed nothing in (in no statistic: they have no
score). Nothing in it depends on when or where it was written."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..outcome import fmt_points
from ..textutil import clean_line, markdown_code, markdown_text, plural
from . import plots
from .record import STATUSES, GradeOfRecord, grade_of_record
from .records import StudentRecord, sandbox_note

#: Score bands of the distribution table, as fractions of the lab's points: (label, low, high].
BANDS = (("0", -1.0, 0.0), ("1-24%", 0.0, 0.25), ("25-49%", 0.25, 0.5), ("50-74%", 0.5, 0.75), ("75-99%", 0.75, 0.99999),
         ("100%", 0.99999, 2.0))
OUTCOMES = ("pass", "fail", "error", "skipped")
#: What each family of checks that may not run is, for the banner of a summary that is not final.
FAMILY_TEXT = {"gpu": "the GPU checks (correctness, sanitizers, counters, speed)", "timing": "the speed checks (--no-timing)",
               "counters": "the counter checks (--no-counters)", "sanitizers": "the sanitizer checks (--no-sanitizers)"}
#: The students listed apart, in no statistic and not among the errors: (status, heading).
APART = (("not_due", "Not due yet"), ("not_handed_in", "Not handed in"))


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
    """For each check of ``lab``, in report order: how many students who handed the lab in got
    each outcome."""
    table: dict[str, dict[str, int]] = {}
    for r in rows:
        for v in r.verdicts:
            if v.lab == lab and lab not in r.not_handed_in:
                counts = table.setdefault(v.check, dict.fromkeys((*OUTCOMES, "ran"), 0))
                counts[v.outcome] = counts.get(v.outcome, 0) + 1
                counts["ran"] += v.ran
    return table


def _stats(scores: Sequence[float]) -> list[str]:
    if not scores:
        return ["", "", "", ""]
    return [fmt_points(round(statistics.fmean(scores), 2)), fmt_points(round(statistics.median(scores), 2)),
            fmt_points(min(scores)), fmt_points(max(scores))]


def pass_rate(counts: Mapping[str, int]) -> str:
    """Passes over the students for whom the check ran; "not run" where it ran for none."""
    return f"{100 * counts.get('pass', 0) / counts['ran']:.0f}%" if counts.get("ran") else "not run"


def banner(rows: Sequence[StudentRecord], not_run: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Lines saying the summary is not a final grade, and why, where some checks did not run."""
    lines = []
    for family, text in FAMILY_TEXT.items():
        who = [r for r in rows if family in not_run.get(r.student, ())]
        if who:
            why = next((f" ({r.without_gpu})" for r in who if r.without_gpu), "") if family == "gpu" else ""
            lines.append(f"> **Not a final grade:** {text} did not run for {len(who)} of {len(rows)} students{why}; "
                         "their points are not in these scores.")
    if lines:
        lines.append("> An LMS export of these grades is refused (`--export`), unless `--allow-partial` asks for one: "
                     "then its file is named `canvas.partial.csv` or `moodle.partial.csv`.")
    return [*lines, ""] if lines else []


def standing(grades: Sequence[GradeOfRecord]) -> str:
    """``4 graded, 1 not due yet, 1 not handed in``: how many students have each status."""
    counts = {s: sum(1 for g in grades if g.status == s) for s in STATUSES}
    return ", ".join(f"{n} {s.replace('_', ' ')}{' yet' if s == 'not_due' else ''}" for s, n in counts.items() if n)


def terminal_lines(grades: Sequence[GradeOfRecord]) -> list[str]:
    """What a class run says of its grades at its end: how many of each status, who is not due yet
    or handed nothing in, and, where some are not final, why (the GPU checks did not run: a
    CPU-only run says so here)."""
    partial = [g for g in grades if g.status == "partial"]
    lines = [f"grades of record: {standing(grades)}"]
    for status, heading in APART:
        who = [g.student for g in grades if g.status == status]
        if who:
            lines.append(f"  {heading.lower()}: {', '.join(who[:20])}{' ...' if len(who) > 20 else ''}")
    if partial:
        lines.append(f"not final: {len(partial)} of {plural(len(grades), 'student')} ({partial[0].reason}); "
                     "grades.csv's not_run says which checks")
    return lines


def _apart(rows: Sequence[StudentRecord], grades: Mapping[str, GradeOfRecord]) -> list[str]:
    lines: list[str] = []
    for status, heading in APART:
        who = [r for r in rows if grades[r.student].status == status]
        if who:
            lines += ["", f"## {heading} ({len(who)})", "", "| Student | Why |", "|---|---|"]
            lines += [f"| {markdown_code(r.student, in_table=True)} | {markdown_text(clean_line(grades[r.student].reason))} |"
                      for r in who]
    return lines


def write(out: Path, labs: Sequence[Mapping[str, Any]], rows: Sequence[StudentRecord],
          not_run: Mapping[str, tuple[str, ...]] | None = None) -> str:
    grades = {r.student: grade_of_record(r, (not_run or {}).get(r.student)) for r in rows}
    # the statistics are of the students with a score: not those not due yet or who handed nothing in
    scored = [r for r in rows if grades[r.student].scored]
    lab_ids = [str(lab["id"]) for lab in labs]
    max_total = round(sum(float(lab["max_points"]) for lab in labs), 2)
    lines = [f"# Class summary: {len(rows)} students, {len(labs)} labs", ""]
    warning = banner([r for r in rows if r.graded], not_run or {})
    unsandboxed = sandbox_note(rows)
    lines += [f"> **Not sandboxed:** {markdown_text(unsandboxed)} (grades.csv: `sandbox` is `none`).", ""] if unsandboxed else []
    lines += warning
    lines += [f"Grades of record: {standing(list(grades.values()))}.", ""]
    if any(not r.graded for r in rows):
        lines += [f"{sum(1 for r in rows if not r.graded)} students have no results yet (listed at the end).", ""]
    lines += ["The class on one page: [dashboard.html](dashboard.html) (students by checks, score distributions).", ""]
    lines += ["## Scores", "", "| Lab | Points | Mean | Median | Lowest | Highest | Full marks | Zero |",
              "|---|---|---|---|---|---|---|---|"]
    for lab in labs:
        scores = [s for r in scored if (s := r.handed_in_score(str(lab["id"]))) is not None]
        full = sum(1 for s in scores if s >= float(lab["max_points"]) > 0)
        lines.append(f"| `{lab['id']}` | {fmt_points(float(lab['max_points']))} | " + " | ".join(_stats(scores))
                     + f" | {full} | {sum(1 for s in scores if s <= 0)} |")
    totals = [r.total for r in scored]  # after the late penalty: the grades of record
    lines.append(f"| **total** | {fmt_points(max_total)} | " + " | ".join(_stats(totals))
                 + f" | {sum(1 for t in totals if t >= max_total > 0)} | {sum(1 for t in totals if t <= 0)} |")
    nothing = sum(1 for g in grades.values() if g.status == "not_handed_in")
    lines += ["", "Students per score band (share of the lab's points; a lab not handed in is in no band of its own "
              "scores):", "", "| Lab | " + " | ".join(b[0] for b in BANDS) + " | Not handed in |", "|---" * (len(BANDS) + 2) + "|"]
    for lab in labs:
        scores = [s for r in scored if (s := r.handed_in_score(str(lab["id"]))) is not None]
        missing = sum(1 for r in scored if str(lab["id"]) in r.not_handed_in) + nothing
        lines.append(f"| `{lab['id']}` | " + " | ".join(map(str, band_counts(scores, float(lab["max_points"])))) + f" | {missing} |")
    lines.append("| **total** | " + " | ".join(map(str, band_counts(totals, max_total))) + " |  |")
    not_final = " ".join(line for line in warning if "Not a final grade" in line)  # the pictures' title
    pictures = plots.write(out, labs, scored, not_final.replace("> ", "").replace("**", "").strip())
    lines += [""] + ([f"![{title}]({rel})" for title, rel in pictures.images] or [pictures.note]) + [""]
    lines += ["## Checks", "", "How many students got each verdict, per check (pass rate over the students the check ran for, "
              "not those it was skipped or held back for; labs not handed in are left out).", ""]
    for lab_id in lab_ids:
        lines += [f"### `{lab_id}`", "", "| Check | Pass | Fail | Error | Skipped | Pass rate |", "|---|---|---|---|---|---|"]
        for check, counts in check_counts(scored, lab_id).items():
            lines.append(f"| {markdown_code(check, in_table=True)} | " + " | ".join(str(counts[o]) for o in OUTCOMES)
                         + f" | {pass_rate(counts)} |")
        lines.append("")
    troubled = [r for r in rows if r.problems and grades[r.student].status not in dict(APART)]
    lines += [f"## Students whose grading hit an error ({len(troubled)})", ""]
    if troubled:
        lines += ["| Student | Problems |", "|---|---|"]
        for r in troubled:
            problems = "<br>".join(markdown_text(clean_line(p)) for p in r.problems)
            lines.append(f"| {markdown_code(r.student, in_table=True)} | {problems} |")
    else:
        lines.append("None.")
    return "\n".join(lines + _apart(rows, grades)) + "\n"
