"""A grading and its reports: the one path from what is graded to the files that say how it went.

``grade_then_write`` runs a grading (``grade``: the lab of ``cuda-grader grade``, the repository of
``grade-repo`` or a class's student), completes the identity of what was graded with the reports
(``engine.identity.completed``), lets the caller choose what counts (``better``: a class's late
student whose better commit counts) and writes the reports where ``Outputs`` says. Nothing else
outside this folder writes a report."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..engine.identity import Identity, completed
from ..errors import GraderError
from ..isolation.options import GradeOptions
from ..outcome import LabReport
from . import files


@dataclass(frozen=True)
class Outputs:
    """Where a grading's reports go (None: not written)."""

    junit: Path | None = None
    json: Path | None = None
    markdown: Path | None = None
    html: Path | None = None
    pictures: bool = True  # each lab's roofline as a PNG beside report.html
    step_summary: str | None = None  # a CI job's summary file, appended to (GITHUB_STEP_SUMMARY)

    @classmethod
    def folder(cls, folder: Path, pictures: bool = True) -> Outputs:
        """report.xml, report.json, report.md and report.html in ``folder`` (and the roofline PNGs with
        ``pictures``: a class leaves them out, about 0.2 s a lab on the lane that grades)."""
        return cls(folder / files.NAMES["junit"], folder / files.NAMES["json"], folder / files.NAMES["markdown"],
                   folder / files.NAMES["html"], pictures)

    def check(self) -> None:
        """Make (private) or check each report's folder, before any grading."""
        files.check_folders(self.junit, self.json, self.markdown, self.html)


@dataclass(frozen=True)
class Graded:
    """A grading's reports and the identity of what they are of."""

    reports: list[LabReport]
    identity: Identity


def graded(who: Identity, grade: Callable[[], list[LabReport]], options: GradeOptions) -> Graded:
    """``grade``'s reports, with ``who`` completed by them."""
    reports = grade()
    return Graded(reports, completed(who, reports, options))


def write(done: Graded, outputs: Outputs) -> str:
    """Write ``done``'s reports where ``outputs`` says; returns the Markdown report."""
    md = files.write(done.reports, done.identity, junit_path=outputs.junit, json_path=outputs.json,
                     markdown_path=outputs.markdown, html_path=outputs.html, pictures=outputs.pictures)
    if outputs.step_summary:
        try:  # the runner's file: appended to, never through a link
            fd = os.open(outputs.step_summary, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
        except OSError as exc:
            raise GraderError(f"GITHUB_STEP_SUMMARY: cannot append the summary ({exc.strerror})", path=outputs.step_summary) from None
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write(md)
    return md


def grade_then_write(who: Identity, grade: Callable[[], list[LabReport]], options: GradeOptions, outputs: Outputs,
                     better: Callable[[Graded], Graded] | None = None) -> Graded:
    """Grade, complete the identity, keep what ``better`` keeps (default: the grading) and write its reports."""
    done = graded(who, grade, options)
    if better is not None:
        done = better(done)
    write(done, outputs)
    return done
