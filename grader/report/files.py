"""Writing one grading's reports (JUnit XML, JSON, Markdown) to files, each with its identity."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..outcome import LabReport
from . import data, junit, text

#: The reports a folder of results holds, by kind.
NAMES = {"junit": "report.xml", "json": "report.json", "markdown": "report.md"}


def _write_text(path: Path, content: str) -> None:
    """Write through a temporary file and rename: a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(content, encoding="utf-8")
    os.replace(tmp, path)


def write(reports: list[LabReport], identity: Mapping[str, Any] | None, *, junit_path: Path | None = None,
          json_path: Path | None = None, markdown_path: Path | None = None) -> str:
    """Write the reports asked for; returns the Markdown (for a job summary)."""
    if junit_path is not None:
        junit.write(reports, junit_path, identity)
    if json_path is not None:
        _write_text(json_path, data.dumps(reports, identity))
    md = text.markdown(reports, identity)
    if markdown_path is not None:
        _write_text(markdown_path, md)
    return md


def write_folder(reports: list[LabReport], identity: Mapping[str, Any] | None, folder: Path) -> str:
    """report.xml, report.json and report.md in ``folder``."""
    return write(reports, identity, junit_path=folder / NAMES["junit"], json_path=folder / NAMES["json"],
                 markdown_path=folder / NAMES["markdown"])
