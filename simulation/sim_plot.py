"""Plot a simulation: intensity with the chosen windows and modes, and cumulative carbon.

Needs matplotlib (``pip install 'gridshift[plot]'``); imported lazily so the rest of the package
does not depend on it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np

from simulation.simulate import SimulationResult

__all__ = ["plot_simulation", "PlotUnavailable"]


class PlotUnavailable(ImportError):
    """matplotlib is not installed."""


_MODE_COLOURS = {"speed": "#2a9d8f", "efficiency": "#e9a23b"}


def _pick_week(result: SimulationResult, days: int) -> int:
    """Index of the first job of the ``days``-long stretch where gridshift saved most."""
    saved = np.array([b.carbon_g - g.carbon_g for b, g in zip(result.baseline, result.gridshift)])
    if len(saved) <= days:
        return 0
    window = np.convolve(saved, np.ones(days), mode="valid")
    return int(np.argmax(window))


def plot_simulation(result: SimulationResult, path: str | Path, *, title: str = "", days: int = 7) -> Path:
    """Write a PNG: top, a ``days``-day excerpt; bottom, cumulative carbon over the whole trace."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise PlotUnavailable("--plot needs matplotlib: pip install 'gridshift[plot]'") from exc

    out = Path(path)
    t0, step = result.t0, result.step_s
    first = _pick_week(result, days)
    jobs = range(first, min(first + days, len(result.baseline)))
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 7), gridspec_kw={"height_ratios": [3, 2]})
    if len(jobs):
        lo = result.baseline[jobs[0]].nominal_s - 12 * 3600
        hi = result.baseline[jobs[-1]].nominal_s + 18 * 3600
        i0, i1 = max(int(lo // step), 0), min(int(hi // step), len(result.values))
        times = [t0 + timedelta(seconds=i * step) for i in range(i0, i1)]
        ax.step(times, result.values[i0:i1], where="post", color="#444", lw=1, label="grid intensity (trace)")
        top = float(result.values[i0:i1].max()) if i1 > i0 else 1.0
        for k in jobs:
            b, g, o = result.baseline[k], result.gridshift[k], result.oracle[k]
            at = lambda s: t0 + timedelta(seconds=s)  # noqa: E731
            ax.axvspan(at(b.start_s), at(b.end_s), ymin=0.0, ymax=0.06, color="#999", lw=0)
            for a, e, m in g.spans:
                ax.axvspan(at(a), at(e), ymin=0.07, ymax=0.16, color=_MODE_COLOURS.get(m, "#6a4c93"), lw=0)
            for a, e, m in o.spans:
                ax.axvspan(at(a), at(e), ymin=0.17, ymax=0.21, color=_MODE_COLOURS.get(m, "#6a4c93"), alpha=0.45, lw=0)
            ax.axvline(at(b.deadline_s), color="#c1121f", lw=0.6, ls=":")
        ax.set_ylim(0, top * 1.1)
        handles = [
            ax.get_legend_handles_labels()[0][0],
            Patch(color="#999", label="baseline run (nominal start, speed)"),
            Patch(color=_MODE_COLOURS["speed"], label="gridshift: speed mode"),
            Patch(color=_MODE_COLOURS["efficiency"], label="gridshift: efficiency mode"),
            Patch(color="#888", alpha=0.45, label="oracle (thin band)"),
        ]
        ax.legend(handles=handles, loc="upper left", fontsize=8, ncol=2)
    ax.set_ylabel("gCO2/kWh")
    ax.set_title(title or f"gridshift simulation ({result.forecast} forecast; energy modelled)")
    s = result.summary()
    xs = [t0 + timedelta(seconds=j.nominal_s) for j in result.baseline]
    for name, jobs_, colour in (("baseline", result.baseline, "#999"), ("gridshift", result.gridshift, "#2a9d8f"),
                                ("oracle", result.oracle, "#264653")):
        ax2.plot(xs, np.cumsum([j.carbon_g for j in jobs_]) / 1000.0, label=name, color=colour)
    ax2.set_ylabel("cumulative kgCO2 (modelled)")
    ax2.set_title(f"{s['jobs']} jobs: gridshift saves {s['savings_pct']:.1f}% "
                  f"(oracle {s['oracle_savings_pct']:.1f}%), {s['deadline_misses']} deadline misses", fontsize=10)
    ax2.legend(fontsize=8)
    for a in (ax, ax2):
        a.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
