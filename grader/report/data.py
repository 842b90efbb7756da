"""The JSON result: everything a script needs, in one document."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping

from ..outcome import LabReport

#: The version of this document's layout (``schemas/report.schema.json``); raised on incompatible changes.
SCHEMA_VERSION = 1


def as_dict(report: LabReport) -> dict[str, Any]:
    return {
        "lab": report.lab,
        "title": report.title,
        "submission": report.submission,
        "score": report.score,
        "max_score": report.max_score,
        "skipped_points": report.skipped_points,
        "checks": [
            {
                "id": c.id,
                "stage": c.stage.value,
                "outcome": c.outcome.value,
                "points": c.points,
                "max_points": c.max_points,
                "message": c.message,
                "details": c.details,
                "measured": dict(c.measured),
                "duration_s": round(c.duration_s, 4),
                "location": dataclasses.asdict(c.location) if c.location else None,
            }
            for c in report.checks
        ],
        "kernels": [dataclasses.asdict(k) for k in report.kernels],
        "timings": {k: dict(v) for k, v in report.timings.items()},
        "environment": dict(report.environment),
        "stage_seconds": dict(report.stage_seconds),
    }


def dumps(reports: Iterable[LabReport], identity: Mapping[str, Any] | None = None) -> str:
    """The JSON result; ``identity`` (whose work, graded with what: see ``grader.engine.identity``) goes first."""
    reports = list(reports)
    doc = {
        "schema_version": SCHEMA_VERSION,
        **({"identity": dict(identity)} if identity is not None else {}),
        "score": round(sum(r.score for r in reports), 2),
        "max_score": round(sum(r.max_score for r in reports), 2),
        "labs": [as_dict(r) for r in reports],
    }
    return json.dumps(doc, indent=2, default=str)
