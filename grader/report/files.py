"""Writing one grading's reports (JUnit XML, JSON, Markdown, HTML with each lab's roofline) to
files, each with its identity."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..outcome import LabReport
from . import data, html, junit, roofline, text

#: The reports a folder of results holds, by kind.
NAMES = {"junit": "report.xml", "json": "report.json", "markdown": "report.md", "html": "report.html"}


def _write_text(path: Path, content: str) -> None:
    """Write through a temporary file and rename: a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(content, encoding="utf-8")
    os.replace(tmp, path)


def write(reports: list[LabReport], identity: Mapping[str, Any] | None, *, junit_path: Path | None = None,
          json_path: Path | None = None, markdown_path: Path | None = None, html_path: Path | None = None,
          pictures: bool = True) -> str:
    """Write the reports asked for; returns the Markdown (for a job summary). Beside report.html,
    with ``pictures``, each lab's roofline as ``roofline-<lab>.png`` (where matplotlib is installed;
    the page itself draws it inline)."""
    if junit_path is not None:
        junit.write(reports, junit_path, identity)
    if json_path is not None:
        _write_text(json_path, data.dumps(reports, identity))
    if html_path is not None:
        _write_text(html_path, html.render(reports, identity))
        for roof in roofline.all_of(reports) if pictures else ():
            roofline.png(roof, html_path.parent / f"roofline-{roof.lab}.png")
    md = text.markdown(reports, identity, html_path.name if html_path is not None else None)
    if markdown_path is not None:
        _write_text(markdown_path, md)
    return md


def write_folder(reports: list[LabReport], identity: Mapping[str, Any] | None, folder: Path, pictures: bool = True) -> str:
    """report.xml, report.json, report.md and report.html in ``folder`` (and the roofline PNGs
    with ``pictures``: a class leaves them out, about 0.2 s a lab on the lane that grades)."""
    return write(reports, identity, junit_path=folder / NAMES["junit"], json_path=folder / NAMES["json"],
                 markdown_path=folder / NAMES["markdown"], html_path=folder / NAMES["html"], pictures=pictures)
