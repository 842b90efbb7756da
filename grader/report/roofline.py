"""Where each timed kernel of a lab stands against the GPU's limits: a roofline.

A kernel sits at its arithmetic intensity (FLOPs per byte of DRAM traffic) and its achieved
GFLOP/s; the roof is the lower of the FP32 peak and intensity x the DRAM peak (the device's
figures, from the worker). The intensity is the lab's FLOPs over the DRAM bytes Nsight Compute
measured for that kernel on the timed case (``checks.counters.traffic``); where any timed kernel's bytes
were not measured (no profiler, counters turned off), every kernel's is the lab's model of the
traffic (its benchmark's ``flops`` over ``bytes``), so that the points stay comparable, and the
picture says so. Labs that count no FLOPs (the histogram) have no roofline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..host.safeio import replacing
from ..outcome import LabReport
from ..textutil import html_line

MEASURED = "DRAM bytes measured by Nsight Compute on the timed case"
MODELLED = "the lab's model of the traffic"


@dataclass(frozen=True)
class Point:
    kernel: str
    intensity: float  # FLOPs per DRAM byte
    gflops: float
    dram_bytes: float = 0.0  # measured on the timed case (0: the lab's model)


@dataclass(frozen=True)
class Roofline:
    lab: str
    peak_gflops: float
    peak_gbps: float
    points: tuple[Point, ...]
    traffic: str = MODELLED  # where the bytes come from

    def roof(self, intensity: float) -> float:
        return min(self.peak_gflops, intensity * self.peak_gbps)

    def share(self, point: Point) -> float:
        """The fraction of the roof the kernel reaches at its intensity."""
        return point.gflops / self.roof(point.intensity) if self.roof(point.intensity) > 0 else 0.0

    @property
    def ridge(self) -> float:
        """The intensity where the memory roof meets the compute roof."""
        return self.peak_gflops / self.peak_gbps


def of(report: LabReport) -> Roofline | None:
    """The lab's roofline (None without timed kernels that count FLOPs, or without the device's peaks)."""
    env = report.environment
    try:
        peak_gflops = float(env.get("device.peak_fp32_gflops") or 0)  # type: ignore[arg-type]
        peak_gbps = float(env.get("device.peak_dram_gbps") or 0)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    rows = {kernel: row for kernel, row in report.timings.items() if _positive(row.get("gflops"))}
    measured = bool(rows) and all(_positive(row.get("flop_per_dram_byte")) for row in rows.values())
    points = [_point(kernel, row, measured) for kernel, row in rows.items() if measured or _positive(row.get("gbps"))]
    if not points or peak_gflops <= 0 or peak_gbps <= 0:
        return None
    return Roofline(report.lab, peak_gflops, peak_gbps, tuple(points), MEASURED if measured else MODELLED)


def _point(kernel: str, row: Mapping[str, float], measured: bool) -> Point:
    """``kernel`` at its measured intensity, or at the lab's model of it (GFLOP/s over model GB/s)."""
    if measured:
        return Point(kernel, float(row["flop_per_dram_byte"]), float(row["gflops"]), float(row.get("dram_bytes") or 0))
    return Point(kernel, float(row["gflops"]) / float(row["gbps"]), float(row["gflops"]))


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


#: The columns of the picture's figures.
COLUMNS = ("Kernel", "DRAM MB", "FLOP/byte", "GFLOP/s", "Roof GFLOP/s", "% of roof")


def figures(r: Roofline) -> list[tuple[str, ...]]:
    """The picture's figures, one row per kernel, formatted as every report shows them (DRAM MB
    "model" where the bytes are the lab's model)."""
    return [(p.kernel, f"{p.dram_bytes / 1e6:.1f}" if p.dram_bytes else "model", f"{p.intensity:.3g}", f"{p.gflops:.1f}",
             f"{r.roof(p.intensity):.1f}", f"{100 * r.share(p):.1f}") for p in r.points]


def table(r: Roofline) -> list[str]:
    """The picture's figures as a Markdown table."""
    return ["| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|", *("| " + " | ".join(row) + " |" for row in figures(r))]


def _bounds(r: Roofline) -> tuple[float, float, float, float]:
    xs = [p.intensity for p in r.points] + [r.ridge]
    ys = [p.gflops for p in r.points] + [r.peak_gflops]
    return (10 ** math.floor(math.log10(min(xs) / 4)), 10 ** math.ceil(math.log10(max(xs) * 4)),
            10 ** math.floor(math.log10(min(ys) / 2)), 10 ** math.ceil(math.log10(max(ys) * 1.5)))


COLOURS = ("#c62828", "#1565c0", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f")


def svg(r: Roofline, width: int = 520, height: int = 340) -> str:
    """The roofline as an inline SVG (log-log), the student's kernel first in the legend."""
    x0, x1, y0, y1 = _bounds(r)
    left, right, top, bottom = 60, width - 20, 20, height - 45

    def px(x: float) -> float:
        return left + (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * (right - left)

    def py(y: float) -> float:
        return bottom - (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) * (bottom - top)

    e = html_line
    roof = [(x0, r.roof(x0)), (r.ridge, r.peak_gflops), (x1, r.peak_gflops)]
    path = " ".join(f"{'M' if k == 0 else 'L'}{px(x):.1f},{py(max(y, y0)):.1f}" for k, (x, y) in enumerate(roof))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="roofline of {e(r.lab)}" font-family="sans-serif" font-size="11">',
             f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#999"/>',
             f'<path d="{path}" fill="none" stroke="#222" stroke-width="2"/>',
             f'<text x="{px(r.ridge) + 4:.1f}" y="{py(r.peak_gflops) - 4:.1f}">FP32 peak {r.peak_gflops:.0f} GFLOP/s</text>',
             f'<text x="{left + 4}" y="{bottom - 6}">DRAM {r.peak_gbps:.0f} GB/s</text>']
    for k, p in enumerate(r.points):
        colour = COLOURS[k % len(COLOURS)]
        parts.append(f'<circle cx="{px(p.intensity):.1f}" cy="{py(p.gflops):.1f}" r="5" fill="{colour}">'
                     f"<title>{e(p.kernel)}: {p.gflops:.1f} GFLOP/s, {100 * r.share(p):.1f}% of the roof</title></circle>")
        parts.append(f'<text x="{right - 150}" y="{top + 16 + 14 * k}" fill="{colour}">● {e(p.kernel)} '
                     f"({100 * r.share(p):.0f}% of roof)</text>")
    parts += [f'<text x="{(left + right) / 2:.0f}" y="{height - 22}" text-anchor="middle">FLOPs per DRAM byte '
              f"({e(r.traffic)}), log scale</text>",
              f'<text x="14" y="{(top + bottom) / 2:.0f}" transform="rotate(-90 14 {(top + bottom) / 2:.0f})" '
              'text-anchor="middle">GFLOP/s, log scale</text>',
              f'<text x="{left}" y="{height - 6}">{x0:g}</text><text x="{right}" y="{height - 6}" text-anchor="end">{x1:g}</text>',
              f'<text x="{left - 4}" y="{bottom}" text-anchor="end">{y0:g}</text>'
              f'<text x="{left - 4}" y="{top + 10}" text-anchor="end">{y1:g}</text>',
              "</svg>"]
    return "\n".join(parts)


def png(r: Roofline, path: Path) -> bool:
    """The same picture as a PNG (False where matplotlib is not installed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    x0, x1, _, _ = _bounds(r)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    xs = [x0, r.ridge, x1]
    ax.loglog(xs, [r.roof(x) for x in xs], color="#222", linewidth=2, label="roof")
    for k, p in enumerate(r.points):
        ax.scatter([p.intensity], [p.gflops], color=COLOURS[k % len(COLOURS)], zorder=3,
                   label=f"{p.kernel} ({100 * r.share(p):.0f}% of roof)")
    ax.set_xlabel(f"FLOPs per DRAM byte ({r.traffic})")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"{r.lab}: FP32 peak {r.peak_gflops:.0f} GFLOP/s, DRAM {r.peak_gbps:.0f} GB/s")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    with replacing(path) as fh:
        fig.savefig(fh, format="png")
    plt.close(fig)
    return True


def all_of(reports: Sequence[LabReport]) -> list[Roofline]:
    return [r for r in (of(rep) for rep in reports) if r is not None]
