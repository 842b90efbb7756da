"""Writing one grading's reports (JUnit XML, JSON, Markdown, HTML with each lab's roofline) to
files, each with its identity.

Each report's folder is checked (or made private) first, as any folder of the grader's results is
(``hostdirs.output_dir``), and each file is written whole under a new name and renamed into place
(``safeio.replacing``): a link at a report's name is replaced, never written through."""

from __future__ import annotations

from pathlib import Path

from ..engine.identity import Identity
from ..host.hostdirs import output_dir
from ..host.safeio import write_whole
from ..outcome import LabReport
from . import data, html, junit, roofline, text

#: The reports a folder of results holds, by kind.
NAMES = {"junit": "report.xml", "json": "report.json", "markdown": "report.md", "html": "report.html"}


def check_folders(*paths: Path | None) -> None:
    """Make (private) or check the folder of each report path given, before any grading."""
    for path in dict.fromkeys(p.parent for p in paths if p is not None):
        output_dir(path, junit.FOLDER_WHAT)


def write(reports: list[LabReport], identity: Identity | None, *, junit_path: Path | None = None,
          json_path: Path | None = None, markdown_path: Path | None = None, html_path: Path | None = None,
          pictures: bool = True) -> str:
    """Write the reports asked for; returns the Markdown (for a job summary). Beside report.html,
    with ``pictures``, each lab's roofline as ``roofline-<lab>.png`` (where matplotlib is installed;
    the page itself draws it inline). Each report holds ``identity`` in its JSON form."""
    check_folders(junit_path, json_path, markdown_path, html_path)
    fields = identity.as_dict() if identity is not None else None
    if junit_path is not None:
        junit.write(reports, junit_path, fields)
    if json_path is not None:
        write_whole(json_path, data.dumps(reports, fields))
    if html_path is not None:
        write_whole(html_path, html.render(reports, fields))
        for roof in roofline.all_of(reports) if pictures else ():
            roofline.png(roof, html_path.parent / f"roofline-{roof.lab}.png")
    md = text.markdown(reports, fields, html_path.name if html_path is not None else None)
    if markdown_path is not None:
        write_whole(markdown_path, md)
    return md

