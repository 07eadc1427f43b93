"""A :class:`flows.report.chart.RunChart` as a PNG file (``gridshift report --plot FILE.png``), through matplotlib.

matplotlib is a core dependency: a PNG needs its text rasterised, which is what matplotlib is for.
It is imported here only, when a PNG is asked for, so a run's flow never pays for its import (the
artifact's chart is SVG text: :mod:`flows.report.svg`).
"""

from __future__ import annotations

from pathlib import Path

from flows.report.chart import RunChart

__all__ = ["write_png"]

_STEP_STYLE = {"history": {"color": "#6c757d", "linewidth": 1.2},
               "forecast": {"color": "#457b9d", "linewidth": 1.6, "linestyle": (0, (6, 4))},
               "recorded": {"color": "#d62828", "linewidth": 2.6}}
_MARKER_STYLE = {"cron": {"color": "#495057", "linestyle": (0, (4, 3)), "linewidth": 1.2},
                 "start": {"color": "#1d3557", "linewidth": 1.6},
                 "planned": {"color": "#1d3557", "linestyle": (0, (1, 3)), "linewidth": 1.2},
                 "deadline": {"color": "#c1121f", "linewidth": 1.6}}


def write_png(chart: RunChart, path: str | Path, *, dpi: int = 100) -> Path:
    """Write the chart as a 960 x 450 pixel PNG (at ``dpi`` 100) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    out = Path(path)
    fig = plt.figure(figsize=(9.6, 4.5), dpi=dpi)
    try:
        ax = fig.add_axes((0.07, 0.34, 0.9, 0.45))
        lanes = fig.add_axes((0.07, 0.2, 0.9, 0.1), sharex=ax)
        fig.text(0.07, 0.95, chart.title, fontsize=12, fontweight="bold")
        fig.text(0.07, 0.91, chart.subtitle, fontsize=9.5)
        fig.text(0.07, 0.02, chart.note, fontsize=8, alpha=0.8)
        for band in (b for b in chart.bands if b.lane == "baseline"):
            ax.axvspan(band.start, band.end, color=band.colour, alpha=0.22, label=band.label, lw=0)
        for step in chart.steps:
            xs, ys = [], []
            for a, b, g in step.pieces:
                if xs and abs(xs[-1] - a) > 1e-6:
                    xs.append(float("nan"))
                    ys.append(float("nan"))
                xs += [a, b]
                ys += [g, g]
            ax.plot(xs, ys, label=step.label, **_STEP_STYLE[step.kind])
        for m in chart.markers:
            for axis in (ax, lanes):
                axis.axvline(m.at, **_MARKER_STYLE[m.kind])
            right = m.at > 0.85 * chart.x_max  # a label near the right edge reads leftwards, inside the figure
            ax.annotate(m.label, (m.at, 1.0), xycoords=("data", "axes fraction"), xytext=(-2 if right else 2, 3 + 11 * m.row),
                        textcoords="offset points", fontsize=8, ha="right" if right else "left")
        ax.set_xlim(0, chart.x_max)
        ax.set_ylim(0, chart.y_max)
        ax.set_yticks([y for y, _ in chart.y_ticks], [label for _, label in chart.y_ticks], fontsize=8)
        ax.set_ylabel("gCO2/kWh", fontsize=9)
        ax.tick_params(labelbottom=False)
        ax.grid(axis="y", color="#e9ecef")
        width = chart.x_max / 450  # about two pixels: a span of seconds in an hours-wide chart stays visible
        for k, lane in enumerate(chart.lanes):
            for band in (b for b in chart.bands if b.lane == lane):
                lanes.broken_barh([(band.start, max(band.end - band.start, width))], (1 - k, 0.8), color=band.colour)
        lanes.set_yticks([1.4, 0.4], list(chart.lanes), fontsize=8)
        lanes.set_ylim(0, 2)
        lanes.set_xticks([x for x, _ in chart.x_ticks], [label for _, label in chart.x_ticks], fontsize=8)
        modes = {b.label: b.colour for b in chart.bands if b.lane != "baseline"}
        handles, labels = ax.get_legend_handles_labels()
        handles += [Patch(color=c) for c in modes.values()]
        labels += list(modes)
        fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.07, 0.06), ncol=3, fontsize=7.5, frameon=False)
        fig.savefig(out, dpi=dpi, facecolor="white")
    finally:
        plt.close(fig)
    return out
