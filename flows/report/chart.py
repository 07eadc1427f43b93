"""One run as a chart: a pure function of its report, drawn by :mod:`flows.report.svg` and :mod:`flows.report.png`.

What it shows, each from the report alone: the intensity the source gave at the start (its history,
then the forecast the first plan stood on), the intensity recorded for each mode span (as measured
by the source while the job ran), the planned and the real mode spans on two lanes, the nominal start
(the cron time under a deployment), the real start, the planned start and the deadline, and the saving's
baseline (the nominal start in the reference mode) as a shaded window. Times are seconds from :attr:`RunChart.t0`; the renderers only draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from scheduler.saving import with_saving

__all__ = ["Band", "Marker", "RunChart", "Step", "mode_colour", "run_chart"]

MODE_COLOURS = {"speed": "#2a9d8f", "efficiency": "#e9a23b"}
_OTHER_MODES = ("#6a4c93", "#457b9d", "#b5838d", "#8d99ae")
#: tick steps a person reads at a glance, in seconds
_TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


@dataclass(frozen=True)
class Step:
    """A step line: ``(start s, end s, g/kWh)`` pieces; ``kind`` is ``history``, ``forecast`` or ``recorded``."""

    label: str
    kind: str
    pieces: tuple[tuple[float, float, float], ...]


@dataclass(frozen=True)
class Band:
    """A stretch on a lane (a mode span) or the baseline's window (``lane`` ``baseline``)."""

    lane: str
    start: float
    end: float
    label: str
    colour: str


@dataclass(frozen=True)
class Marker:
    """A moment: ``cron``, ``start``, ``planned`` or ``deadline``; ``row`` stacks the labels of close moments."""

    kind: str
    at: float
    label: str
    row: int = 0


@dataclass(frozen=True)
class RunChart:
    title: str
    subtitle: str
    note: str                      # what is measured and what is modelled
    t0: datetime                   # x = 0
    x_max: float                   # seconds
    y_max: float                   # g/kWh
    steps: tuple[Step, ...]
    bands: tuple[Band, ...]
    markers: tuple[Marker, ...]
    x_ticks: tuple[tuple[float, str], ...]
    y_ticks: tuple[tuple[float, str], ...]
    lanes: tuple[str, ...] = ("planned", "ran")


def mode_colour(mode: str, modes: list[str]) -> str:
    """The mode's colour: speed and efficiency as in ``simulate --plot``, others in a fixed order."""
    if mode in MODE_COLOURS:
        return MODE_COLOURS[mode]
    others = sorted(m for m in modes if m not in MODE_COLOURS)
    return _OTHER_MODES[others.index(mode) % len(_OTHER_MODES)] if mode in others else _OTHER_MODES[0]


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _nice_step(span_s: float, target: int = 7) -> float:
    return next((s for s in _TICK_STEPS if span_s / s <= target), _TICK_STEPS[-1] * math.ceil(span_s / 86400 / target))


def _x_ticks(t0: datetime, x_max: float) -> tuple[tuple[float, str], ...]:
    step = _nice_step(x_max)
    first = math.ceil(t0.timestamp() / step) * step - t0.timestamp()
    fmt = "%H:%M:%S" if step < 60 else "%H:%M" if step < 86400 else "%m-%d"
    ticks, x = [], first
    while x <= x_max + 1e-9:
        ticks.append((x, (t0 + timedelta(seconds=x)).strftime(fmt)))
        x += step
    return tuple(ticks)


def _y_ticks(y_max: float) -> tuple[float, tuple[tuple[float, str], ...]]:
    raw = y_max / 5
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    top = step * math.ceil(y_max / step)
    return top, tuple((k * step, f"{k * step:g}") for k in range(int(round(top / step)) + 1))


def _stacked(markers: list[Marker], x_max: float) -> list[Marker]:
    """Labels of moments closer than a tenth of the chart go one row up each (three rows, then again)."""
    out: list[Marker] = []
    for m in markers:
        row = sum(1 for o in out if m.at - o.at < 0.1 * x_max) % 3
        out.append(Marker(m.kind, m.at, m.label, row))
    return out


def run_chart(report: dict[str, Any]) -> RunChart:
    """The chart of one run (see the module docstring); ``report`` is the ledger's JSON of the run."""
    report = with_saving(report)
    extra = report.get("extra") or {}
    saving = report["saving"]
    spans = report.get("modes") or []
    plan = extra.get("plan") or {}
    points = (extra.get("intensity_at_start") or {}).get("points") or []
    nominal, started, ended = _t(report["nominal_start"]), _t(report["started_at"]), _t(report["ended_at"])
    deadline = _t(extra["deadline"]) if extra.get("deadline") else None
    planned = _t(plan["start"]) if plan.get("start") else None
    base = (_t(saving["baseline_start"]), _t(saving["baseline_end"])) if saving.get("baseline_end") else None
    moments = [nominal, started, ended, *(t for t in (deadline, planned) if t is not None), *(base or ())]
    moments += [_t(s["end"]) for s in plan.get("segments", ())]
    lo, hi = min(moments), max(moments)
    pad = max((hi - lo).total_seconds() * 0.05, 1.0)
    t0 = lo - timedelta(seconds=pad)
    x_max = (hi - lo).total_seconds() + 2 * pad
    x = lambda t: min(max((t - t0).total_seconds(), 0.0), x_max)  # noqa: E731 - clipped to the chart

    def pieces(rows: list[list[Any]]) -> tuple[tuple[float, float, float], ...]:
        out = [(x(_t(r[0])), x(_t(r[0]) + timedelta(seconds=float(r[1]))), float(r[2])) for r in rows]
        return tuple(p for p in out if p[1] > p[0])

    steps = [Step("history at the start (as the source reported it)", "history", pieces([p for p in points if not p[3]])),
             Step("forecast at the start (as planned)", "forecast", pieces([p for p in points if p[3]])),
             Step("recorded per mode span (as measured by the source)", "recorded",
                  tuple((x(_t(s["start"])), max(x(_t(s["end"])), x(_t(s["start"]))), float(s["g_per_kwh"]))
                        for s in spans if s.get("g_per_kwh") is not None))]
    steps = [s for s in steps if s.pieces]
    names = sorted({s["mode"] for s in spans} | {s["mode"] for s in plan.get("segments", ())})
    bands = [Band("planned", x(_t(s["start"])), x(_t(s["end"])), s["mode"], mode_colour(s["mode"], names))
             for s in plan.get("segments", ())]
    bands += [Band("ran", x(_t(s["start"])), x(_t(s["end"])), s["mode"], mode_colour(s["mode"], names)) for s in spans]
    ref = extra.get("reference_mode") or "reference"
    if base is not None:
        bands.insert(0, Band("baseline", x(base[0]), x(base[1]), f"baseline: {ref} mode from the nominal start", "#9aa5b1"))
    def when(t: datetime) -> str:  # seconds for a short run, the date for a moment on another day
        return f"{t:%H:%M:%S}" if x_max < 7200 else f"{t:%H:%M}" if t.date() == nominal.date() else f"{t:%m-%d %H:%M}"

    markers = [Marker("cron", x(nominal), f"nominal {when(nominal)}"), Marker("start", x(started), f"start {when(started)}")]
    if planned is not None and abs((planned - started).total_seconds()) >= 60:
        markers.append(Marker("planned", x(planned), f"planned {when(planned)}"))
    if deadline is not None:
        markers.append(Marker("deadline", x(deadline), f"deadline {when(deadline)}"))
    markers = _stacked(sorted(markers, key=lambda m: m.at), x_max)
    values = [p[2] for s in steps for p in s.pieces] or [float(report.get("intensity_g_per_kwh") or 0.0) or 1.0]
    y_max, y_ticks = _y_ticks(max(max(values) * 1.1, 1.0))  # a grid at 0 g/kWh still gets an axis
    if saving.get("saved_g") is not None:
        verb = "saved" if saving["saved_g"] >= 0 else "cost"
        subtitle = (f"{verb} {abs(saving['saved_g']):.4g} g CO2 ({abs(saving['saved_pct']):.1f} %) against "
                    f"{saving['baseline']}")
    else:
        subtitle = f"saving unknown: {saving.get('why', '')}"
    energy = "measured" if report.get("measured") else "modelled (simulated backend)"
    note = (f"energy {energy}; intensity {report.get('intensity_kind', '')} from {report.get('intensity_source', '')}; "
            f"baseline modelled; times UTC")
    return RunChart(title=f"gridshift run {report['run_id']}: {report['job']} ({report['status']})", subtitle=subtitle,
                    note=note, t0=t0, x_max=x_max, y_max=y_max, steps=tuple(steps), bands=tuple(bands),
                    markers=tuple(markers), x_ticks=_x_ticks(t0, x_max), y_ticks=y_ticks)
