"""Plot a simulation: the grid intensity with each job's window, the runs on lanes of their own
(baseline, gridshift, oracle; coloured by mode), and cumulative carbon.

Draws with matplotlib (a dependency of gridshift), imported only when a plot is asked for.
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
_OTHER_MODE = "#6a4c93"
_LANES = ("baseline", "gridshift", "oracle")


def _pick_week(result: SimulationResult, days: int) -> int:
    """Index of the first job of the ``days``-long stretch where gridshift saved most."""
    saved = np.array([b.carbon_g - g.carbon_g for b, g in zip(result.baseline, result.gridshift)])
    if len(saved) <= days:
        return 0
    window = np.convolve(saved, np.ones(days), mode="valid")
    return int(np.argmax(window))


def _mass_unit(grams: float) -> tuple[str, float]:
    return ("t", 1e6) if grams >= 1e6 else ("kg", 1e3) if grams >= 1e3 else ("g", 1.0)


def plot_simulation(result: SimulationResult, path: str | Path, *, title: str = "", days: int = 7,
                    earliest_offset_s: float = 0.0) -> Path:
    """Write a PNG and return its path: a ``days``-day excerpt (intensity with job windows and
    deadlines; the runs on lanes), then cumulative carbon over the whole trace.
    ``earliest_offset_s`` is the policy's ``job.earliest_start_s`` (where each window opens)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise PlotUnavailable(f"--plot needs matplotlib, a dependency of gridshift that is missing here: "
                              f"reinstall gridshift with its dependencies ({exc})") from exc

    out = Path(path)
    t0, step = result.t0, result.step_s
    at = lambda s: t0 + timedelta(seconds=s)  # noqa: E731
    first = _pick_week(result, days)
    jobs = range(first, min(first + days, len(result.baseline)))
    fig, (ax, lanes, ax2) = plt.subplots(3, 1, figsize=(11, 8.5), gridspec_kw={"height_ratios": [3, 1.1, 2]})
    modes_seen: dict[str, str] = {}
    if len(jobs):
        lo = result.baseline[jobs[0]].nominal_s - 12 * 3600
        hi = result.baseline[jobs[-1]].nominal_s + 18 * 3600
        i0, i1 = max(int(lo // step), 0), min(int(hi // step), len(result.values))
        times = [at(i * step) for i in range(i0, i1)]
        ax.step(times, result.values[i0:i1], where="post", color="#444", lw=1, label="grid intensity (trace)")
        top = float(result.values[i0:i1].max()) if i1 > i0 else 1.0
        for k in jobs:
            b = result.baseline[k]
            ax.axvspan(at(b.nominal_s + min(earliest_offset_s, 0.0)), at(b.deadline_s), color="#8ecae6", alpha=0.18, lw=0)
            for a in (ax, lanes):
                a.axvline(at(b.nominal_s), color="#023047", lw=0.7, ls="--")
                a.axvline(at(b.deadline_s), color="#c1121f", lw=0.9, ls=":")
            for lane, outcome in enumerate((b, result.gridshift[k], result.oracle[k])):
                for a_s, e_s, m in outcome.spans:
                    colour = _MODE_COLOURS.get(m, _OTHER_MODE)
                    modes_seen.setdefault(m, colour)
                    lanes.axvspan(at(a_s), at(e_s), ymin=(2 - lane) / 3 + 0.05, ymax=(3 - lane) / 3 - 0.05,
                                  color=colour, lw=0)
        ax.set_ylim(0, top * 1.1)
        ax.set_xlim(times[0], times[-1]) if times else None
        lanes.set_xlim(ax.get_xlim())
        handles = [
            Line2D([], [], color="#444", lw=1, label="grid intensity (trace)"),
            Patch(color="#8ecae6", alpha=0.35, label="job window (earliest start to deadline)"),
            Line2D([], [], color="#023047", lw=0.7, ls="--", label="nominal start (cron)"),
            Line2D([], [], color="#c1121f", lw=0.9, ls=":", label="deadline"),
        ]
        # beside the axes, so it never covers the intensity line
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        lanes.legend(handles=[Patch(color=c, label=f"{m} mode") for m, c in modes_seen.items()], loc="upper left",
                     bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="runs", title_fontsize=8)
    ax.set_ylabel("gCO2/kWh")
    ax.set_title(title or f"gridshift simulation ({result.forecast} forecast; energy modelled)")
    lanes.set_ylim(0, 1)
    lanes.set_yticks([(2.5 - i) / 3 for i in range(3)], [name for name in _LANES], fontsize=8)
    lanes.set_ylabel("runs", fontsize=8)
    s = result.summary()
    unit, scale = _mass_unit(max(s["baseline_g"], 1e-9))
    xs = [at(j.nominal_s) for j in result.baseline]
    curves = [("baseline", "#999", "-"), ("static_efficiency", "#e9c46a", "--"), ("gridshift", "#2a9d8f", "-"),
              ("oracle", "#264653", "-")]
    for name, colour, style in curves:
        if name in result.outcomes:
            ax2.plot(xs, np.cumsum([j.carbon_g for j in result.outcomes[name]]) / scale, label=name.replace("_", " "),
                     color=colour, ls=style)
    ax2.set_ylabel(f"cumulative {unit} CO2 (modelled)")
    static = s["strategies"].get("static_efficiency")
    versus = f", static efficiency {static['savings_pct']:.1f}%" if static else ""
    ax2.set_title(f"{s['jobs']} jobs: gridshift saves {s['savings_pct']:.1f}% (oracle {s['oracle_savings_pct']:.1f}%"
                  f"{versus}), {s['deadline_misses']} deadline misses", fontsize=10)
    ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    for a in (ax, lanes, ax2):
        a.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
