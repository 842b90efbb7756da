"""The pictures in summary.md: score distribution per lab and pass rate per check (PNG).

matplotlib is an optional extra (``pip install 'cuda-lab-grader[plots]'``); without it the summary
has no pictures and says so in one line. The PNGs carry no date or version, so the same results
give the same files.
"""

from __future__ import annotations

import importlib.util
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..host.hostdirs import output_dir
from ..host.safeio import replacing
from .records import StudentRecord

FOLDER = "plots"
SCORES = "scores.png"
CHECKS = "checks.png"
MISSING_NOTE = "(No pictures: matplotlib is not installed; `pip install 'cuda-lab-grader[plots]'` adds them.)"


@dataclass(frozen=True)
class Pictures:
    images: tuple[tuple[str, str], ...]  # (title, path relative to the results folder)
    note: str = ""  # why there are none


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def write(out: Path, labs: Sequence[Mapping[str, Any]], rows: Sequence[StudentRecord], not_final: str = "") -> Pictures:
    """The pictures; ``not_final`` (why the scores are not final) is their title too."""
    if not available():
        return Pictures((), MISSING_NOTE)
    if not rows or not labs:
        return Pictures((), "(No pictures: no student has results yet.)")
    folder = output_dir(out / FOLDER, "the pictures' folder")
    _scores(folder / SCORES, labs, rows, not_final)
    _checks(folder / CHECKS, labs, rows, not_final)
    return Pictures((("Score distribution per lab", f"{FOLDER}/{SCORES}"), ("Pass rate per check", f"{FOLDER}/{CHECKS}")))


def _figure(rows: int, cols: int, width: float, height: float) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    return fig, axes


def _save(fig: Any, path: Path) -> None:
    from matplotlib import pyplot as plt

    fig.tight_layout()
    with replacing(path) as fh:
        fig.savefig(fh, format="png", dpi=90, metadata={"Software": None})
    plt.close(fig)


def _titled(fig: Any, not_final: str) -> None:
    if not_final:
        fig.suptitle(textwrap.fill(not_final, 110), fontsize=8, color="#c44e52")


def _scores(path: Path, labs: Sequence[Mapping[str, Any]], rows: Sequence[StudentRecord], not_final: str = "") -> None:
    cols = min(3, len(labs))
    nrows = (len(labs) + cols - 1) // cols
    fig, axes = _figure(nrows, cols, 4.2 * cols, 3.0 * nrows)
    _titled(fig, not_final)
    for k, lab in enumerate(labs):
        ax = axes[k // cols][k % cols]
        top = float(lab["max_points"]) or 1.0
        scores = [s for r in rows if (s := r.handed_in_score(str(lab["id"]))) is not None]
        ax.hist(scores, bins=10, range=(0, top), color="#4c72b0", edgecolor="white")
        ax.set_title(str(lab["id"]), fontsize=10)
        ax.set_xlabel(f"points (of {lab['max_points']:g})", fontsize=8)
        ax.set_ylabel("students", fontsize=8)
        ax.yaxis.get_major_locator().set_params(integer=True)
    for k in range(len(labs), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    _save(fig, path)


def _checks(path: Path, labs: Sequence[Mapping[str, Any]], rows: Sequence[StudentRecord], not_final: str = "") -> None:
    """Each check's pass rate over the students it ran for (a check that ran for none is left out)."""
    names: list[str] = []
    rates: list[float] = []
    for lab in labs:
        seen: dict[str, list[int]] = {}
        for r in rows:
            for v in r.verdicts:
                if v.lab == lab["id"] and v.lab not in r.not_handed_in:
                    tally = seen.setdefault(v.check, [0, 0])
                    tally[0] += v.outcome == "pass"
                    tally[1] += v.ran
        for check, (passed, ran) in seen.items():
            if ran:
                names.append(f"{lab['id']}: {check}")
                rates.append(100.0 * passed / ran)
    fig, axes = _figure(1, 1, 9.0, max(2.5, 0.22 * len(names) + 1))
    _titled(fig, not_final)
    ax = axes[0][0]
    positions = list(range(len(names)))
    ax.barh(positions, rates, color="#55a868")
    ax.set_yticks(positions, labels=names, fontsize=7)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.set_xlabel("students who passed (%)", fontsize=8)
    _save(fig, path)
