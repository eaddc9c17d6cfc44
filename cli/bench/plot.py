"""Latency vs throughput as a PNG (matplotlib, an optional dependency of the ``bench`` extra)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

FIGURE_SIZE = (7.5, 4.5)
DPI = 120


@dataclass(frozen=True)
class PlotPoint:
    """One load level of one system."""

    label: str
    throughput_rps: float
    p50_ms: float
    p99_ms: float


def plot_latency_vs_throughput(series: Mapping[str, Sequence[PlotPoint]], path: Path, title: str) -> Path:
    """One line per system for p50 (solid) and p99 (dashed), each point labelled with its load."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("plots need matplotlib: pip install 'ferryman[bench]'") from exc
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=FIGURE_SIZE)
    for name, points in series.items():
        xs = [p.throughput_rps for p in points]
        (line,) = ax.plot(xs, [p.p50_ms for p in points], marker="o", label=f"{name} p50")
        ax.plot(
            xs,
            [p.p99_ms for p in points],
            marker="x",
            linestyle="--",
            color=line.get_color(),
            label=f"{name} p99",
        )
        for p in points:
            ax.annotate(
                p.label, (p.throughput_rps, p.p50_ms), textcoords="offset points", xytext=(4, -12), fontsize=8
            )
    ax.set_xlabel("throughput (answered requests/s)")
    ax.set_ylabel("latency (ms, log scale)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
