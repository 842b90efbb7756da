"""The JSON result: everything a script needs, in one document."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable

from ..outcome import LabReport


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


def dumps(reports: Iterable[LabReport]) -> str:
    reports = list(reports)
    doc = {
        "score": round(sum(r.score for r in reports), 2),
        "max_score": round(sum(r.max_score for r in reports), 2),
        "labs": [as_dict(r) for r in reports],
    }
    return json.dumps(doc, indent=2, default=str)
