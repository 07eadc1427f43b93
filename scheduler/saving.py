"""What a run saved against its baseline: the same work from its nominal start, in the reference mode.

The nominal start is the cron time of a deployment's run, and the moment a plain ``gridshift run`` was asked for.

A pure function of the run's report (the JSON the ledger and the Prefect artifact keep), so the
report, the artifact, ``gridshift runs`` and ``gridshift report`` show the same figure, also for
runs recorded before it existed. What each part stands on:

- the run's own carbon: its spans' energy (measured by the backend, or modelled on a simulated
  one: the report says which) at the intensity each span recorded;
- the baseline's energy (**modelled**): each span's energy times the reference mode's energy per
  unit of work over that span mode's, from the modes' figures (``extra.mode_figures``: a measured
  profile or a model, each says which);
- the baseline's duration: the work the run did (the job's progress reports, else each span's time
  at its mode's speed) at the reference mode's speed, from the nominal (cron) start;
- the baseline's intensity: what the run recorded for those hours, the spans' own figures where the
  baseline overlaps them, elsewhere the source's series as read at the start (its history, then its
  forecast: ``extra.intensity_at_start``).

The saving in two parts (:func:`two_parts`, the one definition ``simulate`` uses too): the **mode part**,
the baseline against the run's own modes from the nominal start (each span's energy, the spans laid end
to end from the cron time, at the intensity recorded for those hours; modelled), and the **timing
part**, that against the run as it ran: what choosing the start (and pausing) added.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable

__all__ = ["Saving", "grams", "mean_intensity", "parts_phrase", "run_saving", "two_parts", "with_saving"]

#: below this share of the baseline's hours with a recorded intensity, no saving is claimed
MIN_COVERED = 0.9


@dataclass(frozen=True)
class Saving:
    """A run's carbon against its baseline; ``saved_g`` is None when it cannot be told (``why`` says)."""

    baseline: str                     # the baseline in words: "the cron time (...) in speed mode"
    carbon_g: float
    baseline_g: float | None = None
    saved_g: float | None = None
    saved_pct: float | None = None
    baseline_energy_j: float | None = None
    baseline_start: datetime | None = None
    baseline_end: datetime | None = None
    label: str = ""                   # what is measured and what is modelled
    why: str = ""                     # why there is no figure
    parts: dict[str, dict[str, float | None]] | None = None   # two_parts, each part also in % of the baseline

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"baseline": self.baseline, "carbon_g": self.carbon_g, "baseline_g": self.baseline_g,
                               "saved_g": self.saved_g, "saved_pct": self.saved_pct,
                               "baseline_energy_j": self.baseline_energy_j,
                               "baseline_start": self.baseline_start.isoformat() if self.baseline_start else None,
                               "baseline_end": self.baseline_end.isoformat() if self.baseline_end else None,
                               "label": self.label}
        if self.why:
            out["why"] = self.why
        if self.parts is not None:
            out["parts"] = self.parts
        return out

    def phrase(self) -> str:
        """One line for people: ``0.12 g (20.4 %) less than the nominal start (...) in speed mode``."""
        if self.saved_g is None or self.saved_pct is None:
            return f"unknown against {self.baseline}: {self.why}"
        more_or_less = "less" if self.saved_g >= 0 else "more"
        return (f"{grams(abs(self.saved_g))} ({abs(self.saved_pct):.1f} %) {more_or_less} than {self.baseline} "
                f"({grams(self.baseline_g or 0.0)})")


def two_parts(baseline_g: float, static_g: float, achieved_g: float,
              best_g: float | None = None) -> dict[str, dict[str, float | None]]:
    """A saving in two parts: the **mode part** ``baseline - static`` (frugal modes at the nominal start
    against the reference mode there: no carbon data needed) and the **timing part** ``static - achieved``
    (what the start choice and re-planning add). With an optimum's grams ``best_g``, each part's share
    of what can be had: mode ``(baseline - static) / (baseline - best)``, timing ``(static - achieved) /
    (static - best)``; None without one, or where nothing can be had.
    """
    oracle_saving = baseline_g - best_g if best_g is not None else 0.0
    timing_room = static_g - best_g if best_g is not None else 0.0
    return {"mode": {"saving_g": baseline_g - static_g,
                     "share": (baseline_g - static_g) / oracle_saving if oracle_saving > 0 else None},
            "timing": {"saving_g": static_g - achieved_g,
                       "share": (static_g - achieved_g) / timing_room if timing_room > 0 else None}}


def grams(g: float) -> str:
    """Grams in a unit a person reads at a glance (mg for a test run, kg for a long one)."""
    if g >= 1000:
        return f"{g / 1000:.3g} kg"
    if g >= 1:
        return f"{g:.3g} g"
    return f"{g * 1000:.3g} mg"


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _reference_mode(report: dict[str, Any], figures: dict[str, dict[str, Any]]) -> str | None:
    extra = report.get("extra") or {}
    named = extra.get("reference_mode")
    if isinstance(named, str):
        return named
    # reports from before the reference mode was recorded: the clean mode is the one of speed 1.0
    ones = [m for m, f in figures.items() if abs(float(f.get("speed", 0.0)) - 1.0) < 1e-9]
    return ones[0] if ones else None


def _pieces(report: dict[str, Any]) -> list[tuple[datetime, datetime, float]]:
    """(start, end, g/kWh) known for the run's hours: the spans first, then the series read at the start."""
    spans = [(_t(m["start"]), _t(m["end"]), float(m["g_per_kwh"])) for m in report.get("modes", ())
             if m.get("g_per_kwh") is not None]
    at_start = (report.get("extra") or {}).get("intensity_at_start") or {}
    series = [(_t(p[0]), _t(p[0]) + timedelta(seconds=float(p[1])), float(p[2])) for p in at_start.get("points", ())]
    return spans + series


def mean_intensity(pieces: Iterable[tuple[datetime, datetime, float]], start: datetime,
                   end: datetime) -> tuple[float | None, float]:
    """The mean intensity over ``[start, end)`` and the share of it covered; earlier pieces win overlaps."""
    total = (end - start).total_seconds()
    if total <= 0:
        return None, 0.0
    free = [(start, end)]  # the parts of the window no earlier piece covered yet
    weighted = covered = 0.0
    for a, b, g in pieces:
        left = []
        for lo, hi in free:
            x, y = max(lo, a), min(hi, b)
            if x < y:
                s = (y - x).total_seconds()
                weighted += g * s
                covered += s
                left += [(lo, x)] if lo < x else []
                left += [(y, hi)] if y < hi else []
            else:
                left.append((lo, hi))
        free = left
    return (weighted / covered if covered > 0 else None), covered / total


def _baseline(report: dict[str, Any], figures: dict[str, dict[str, Any]], ref: str) -> tuple[float, float] | str:
    """(baseline energy J, baseline duration s), or why there is none."""
    spans = report.get("modes") or []
    jpw = {m: float(f["power_w"]) / float(f["speed"]) for m, f in figures.items() if float(f.get("speed", 0)) > 0}
    unknown = sorted({m["mode"] for m in spans if m["mode"] not in jpw})
    if unknown or ref not in jpw:
        return f"no power and speed figures for mode {(unknown or [ref])[0]!r}"
    energy_j = sum(float(m["energy_j"]) * jpw[ref] / jpw[m["mode"]] for m in spans)
    work_s = sum(float(w.get("work_s") or 0.0) for w in report.get("windows") or ())
    if work_s <= 0:  # no work counted (threshold rules): each span's time at its mode's speed
        work_s = sum((_t(m["end"]) - _t(m["start"])).total_seconds() * float(figures[m["mode"]]["speed"]) for m in spans)
    return energy_j, work_s / float(figures[ref]["speed"])


def _same_start_g(report: dict[str, Any], nominal: datetime) -> float | None:
    """The run's spans laid end to end from the nominal start, each at the intensity recorded for its
    hours there (g), or None where under :data:`MIN_COVERED` of those hours has a recorded intensity."""
    pieces, at, total_g, covered_s, run_s = _pieces(report), nominal, 0.0, 0.0, 0.0
    for m in sorted(report.get("modes") or (), key=lambda m: m["start"]):
        seconds = (_t(m["end"]) - _t(m["start"])).total_seconds()
        g_per_kwh, covered = mean_intensity(pieces, at, at + timedelta(seconds=seconds))
        total_g += float(m["energy_j"]) / 3.6e6 * (g_per_kwh or 0.0)
        covered_s, run_s, at = covered_s + covered * seconds, run_s + seconds, at + timedelta(seconds=seconds)
    return total_g if run_s > 0 and covered_s / run_s >= MIN_COVERED else None


def _parts(baseline_g: float, report: dict[str, Any], nominal: datetime) -> dict[str, dict[str, float | None]] | None:
    same_start_g = _same_start_g(report, nominal)
    if same_start_g is None:
        return None
    parts = two_parts(baseline_g, same_start_g, float(report.get("carbon_g") or 0.0))
    for part in parts.values():
        part["pct"] = 100.0 * part["saving_g"] / baseline_g if baseline_g > 0 and part["saving_g"] is not None else None
    return parts


def parts_phrase(saving: dict[str, Any]) -> str:
    """``mode 0.1 g (16.0 %), timing 0.03 g (4.1 %)``, or "" where the saving has no parts."""
    parts = saving.get("parts")
    if not parts:
        return ""
    return ", ".join(f"{name} {'-' if p['saving_g'] < 0 else ''}{grams(abs(p['saving_g']))} ({p['pct']:.1f} %)"
                     for name, p in parts.items() if p.get("pct") is not None)


def run_saving(report: dict[str, Any]) -> Saving:
    """The run's saving against the nominal start in the reference mode (see the module docstring)."""
    extra = report.get("extra") or {}
    figures = {f["mode"]: f for f in extra.get("mode_figures") or () if isinstance(f, dict) and "mode" in f}
    ref = _reference_mode(report, figures)
    nominal = _t(report["nominal_start"])
    baseline = f"the nominal start ({nominal:%Y-%m-%d %H:%M} UTC) in {ref or 'the reference'} mode"
    carbon_g = float(report.get("carbon_g") or 0.0)
    if not report.get("modes"):
        return Saving(baseline, carbon_g, why="the job did not run")
    if ref is None:
        return Saving(baseline, carbon_g, why="the report names no reference mode and no mode figures")
    found = _baseline(report, figures, ref)
    if isinstance(found, str):
        return Saving(baseline, carbon_g, why=found)
    energy_j, duration_s = found
    end = nominal + timedelta(seconds=duration_s)
    g_per_kwh, covered = mean_intensity(_pieces(report), nominal, end)
    if g_per_kwh is None or covered < MIN_COVERED:
        return Saving(baseline, carbon_g, baseline_energy_j=energy_j, baseline_start=nominal, baseline_end=end,
                      why=f"the run recorded the intensity for {covered:.0%} of the baseline's hours")
    baseline_g = energy_j / 3.6e6 * g_per_kwh
    saved = baseline_g - carbon_g
    measured = "measured" if report.get("measured") else "modelled (simulated backend)"
    ratio = "measured" if figures and all(f.get("measured") for f in figures.values()) else "modelled"
    label = (f"run: {measured} energy x recorded intensity; baseline: modelled, that energy x the modes' "
             f"{ratio} energy per unit of work, at the intensity recorded for the baseline's hours")
    return Saving(baseline, carbon_g, baseline_g=baseline_g, saved_g=saved,
                  saved_pct=100.0 * saved / baseline_g if baseline_g > 0 else 0.0, baseline_energy_j=energy_j,
                  baseline_start=nominal, baseline_end=end, label=label, parts=_parts(baseline_g, report, nominal))


def with_saving(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its ``saving`` (computed now for a report recorded without one, and its parts for
    one recorded before them)."""
    recorded = report.get("saving")
    if isinstance(recorded, dict):
        if "parts" in recorded or recorded.get("saved_g") is None:
            return report
        try:
            parts = run_saving(report).parts
        except (KeyError, TypeError, ValueError):
            return report
        return {**report, "saving": {**recorded, "parts": parts}}
    try:
        saving = run_saving(report).to_json()
    except (KeyError, TypeError, ValueError) as exc:  # a report of an older or foreign shape
        saving = {"baseline": "the nominal start in the reference mode", "saved_g": None, "saved_pct": None,
                  "why": f"the report lacks what the saving needs ({type(exc).__name__}: {exc})"}
    return {**report, "saving": saving}
