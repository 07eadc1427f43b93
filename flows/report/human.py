"""A run's report as lines for a terminal (``gridshift run``, ``gridshift report``)."""

from __future__ import annotations

import math

from pathlib import Path
from typing import Any

from scheduler.saving import parts_phrase, with_saving

__all__ = ["IMMEDIATE_S", "human_report", "start_words", "took"]

#: a start this close to the nominal one is "at once": the seconds are the run's own set-up, not a deferral
IMMEDIATE_S = 60.0
#: mode spans whose settings the report lists (a long run's spans are all in --json)
_SPANS_SHOWN = 6


def took(seconds: float) -> str:
    """``2 h 05 min``, ``12 min``, ``45 s``."""
    s = abs(seconds)
    if s < 120:
        return f"{s:.0f} s"
    h, m = divmod(int(round(s / 60)), 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


def start_words(report: dict[str, Any]) -> str:
    """When the job started against its nominal start: "at once", "deferred 2 h 05 min from ..." or "... early"."""
    deferred = float(report.get("deferred_s") or 0.0)
    nominal = str(report.get("nominal_start") or "")[11:16]
    if abs(deferred) < IMMEDIATE_S:
        return "at once"
    when = f" the nominal start {nominal} UTC" if nominal else " the nominal start"
    return f"deferred {took(deferred)} from{when}" if deferred > 0 else f"{took(deferred)} before{when}"


def human_report(report: dict[str, Any], log_path: Path | None = None) -> str:
    """The human report: the decision, the figures (measured or modelled), the saving, each span's settings."""
    report = with_saving(report)
    label = "measured" if report["measured"] else "SIMULATED - modelled, not measured"
    first = report["modes"][0]["mode"] if report["modes"] else ""
    reason = report["decision_reason"]
    # the planner's sentences already name the mode ("efficiency throughout: ..."); a rule's do not
    named = f"{first} mode: " if first and not reason.startswith(first) else ""
    lines = [
        f"gridshift run {report['run_id']}: {report['status']}",
        f"  job        {report['job']} (backend {report['backend']})",
        f"  decision   {named}{reason}",
        f"  start      {report['started_at'][:19].replace('T', ' ')} UTC ({start_words(report)})",
        f"  duration   {report['duration_s']:.1f} s",
    ]
    if report["modes"]:
        lines += [f"  energy     {report['energy_j']:.1f} J ({label})",
                  f"  carbon     {report['carbon_g']:.4f} g CO2eq"]
        saving = report["saving"]
        if saving.get("saved_g") is not None:
            verb = "saved" if saving["saved_g"] >= 0 else "cost"
            lines.append(f"  saving     {verb} {abs(saving['saved_g']):.4f} g ({abs(saving['saved_pct']):.1f} %) against "
                         f"{saving['baseline']} (baseline modelled)")
            if parts_phrase(saving):
                lines.append(f"  of which   {parts_phrase(saving)} (mode: these modes from the nominal start; "
                             "timing: the start chosen)")
        else:
            lines.append(f"  saving     unknown against {saving.get('baseline', 'the baseline')}: {saving.get('why', '')}")
    else:  # nothing ran, so nothing was metered: a "0.0 J (measured)" would claim a measurement
        lines.append("  energy     none: the job did not start")
    lines.append(f"  intensity  {report['intensity_g_per_kwh']:.0f} gCO2/kWh ({report['intensity_kind']}, "
                 f"{report['intensity_source']})")
    if len(report["modes"]) > 1:
        lines.append("  modes      " + " -> ".join(f"{m['mode']}@{m['start'][11:19]}" for m in report["modes"]))
    for m in report["modes"][:_SPANS_SHOWN]:  # who applied each setting, and whether it was confirmed
        if m.get("settings"):
            lines.append(f"  settings   {m['mode']}@{m['start'][11:19]}: {m['settings']}")
    if len(report["modes"]) > _SPANS_SHOWN:
        lines.append(f"  settings   ... {len(report['modes']) - _SPANS_SHOWN} more spans (--json has them all)")
    windows = report.get("windows", [])
    for i, w in enumerate(windows if len(windows) > 1 else (), 1):  # a pausable job's windows, with its steps
        steps = f", steps {w['start_step']}-{w['end_step']}" if w.get("start_step") is not None else ""
        lines.append(f"  window {i:<3} {w['start'][11:19]}-{w['end'][11:19]} UTC, ended by {w['ended_by']}{steps}")
    lines += _extra_lines(report.get("extra", {}))
    for w in report.get("warnings", []):
        lines.append(f"  warning    {w}")
    if report.get("error"):
        lines.append(f"  error      {report['error']}")
    if log_path is not None:
        lines.append(f"  log        {log_path}")
    return "\n".join(lines)


def cost_text(cost: dict[str, Any]) -> str:
    """A run's cost in words: ``0.0421 EUR``, or why there is none."""
    if cost.get("total") is None:
        return "unknown"
    missing = f" ({cost['spans_without_prices']} span(s) without a price)" if cost.get("spans_without_prices") else ""
    total = float(cost["total"])
    # four significant figures, never in exponent notation (a short run on one GPU costs a fraction of a cent)
    digits = 2 if abs(total) >= 1 or total == 0 else 3 - math.floor(math.log10(abs(total)))
    return f"{total:.{digits}f} {cost.get('currency', '')}".rstrip() + missing


def _extra_lines(extra: dict[str, Any]) -> list[str]:
    lines = []
    if extra.get("cost"):
        c = extra["cost"]
        lines.append(f"  cost       {cost_text(c)} ({c.get('label') or c.get('error', '')}"
                     + (f", {c['source']}" if c.get("source") else "") + ")")
    if "rounding" in extra.get("plan", {}):
        p = extra["plan"]
        lines.append(f"  plan       work counted to {p['rounding']:.2%} by the planner (bound {p['max_rounding']:.0%})")
    if "batch_size_trial" in extra:
        t = extra["batch_size_trial"]
        bound = f", stop at {t['cost_bound_j']:.0f} J" if t.get("cost_bound_j") else ""
        lines.append(f"  batch size {t['batch_size']} ({t['phase']}): {t['outcome']}, cost {t['cost_j']:.0f} J "
                     f"({t['cost_label']}{bound})")
    if "power_limit_auto" in extra:
        lines.append(f"  power      {extra['power_limit_auto']['reason']}")
    lines += _cap_lines(extra.get("power_cap"))
    if "clock_plan" in extra:
        plan = extra["clock_plan"]
        lines.append(f"  clock plan {plan['file']} (modelled: {plan['predicted_energy_saving_pct']:.1f}% less energy, "
                     f"{plan['predicted_slowdown_pct']:+.1f}% time; handed to the job, which runs it)")
    return lines


def _cap_lines(cap: dict[str, Any] | None) -> list[str]:
    """The power cap: held or not, the least headroom left, and each grid event with how soon the run answered."""
    if not cap:
        return []
    room = cap.get("min_headroom_w")
    held = "held in every span" if cap.get("held") else "NOT held in every span"
    lines = [f"  power cap  {held}" + (f", least headroom {room:.0f} W" if room is not None else "")
             + f" ({cap.get('spans_capped', 0)} span(s) under a cap)"]
    for e in cap.get("events", []):
        limit = f"{e['cap_w']:.0f} W" if e.get("cap_w") is not None else f"{e['reduce_pct']:g} % less"
        mine = e.get("cap_w_for_this_run")
        share = f" ({mine:.0f} W for this run)" if mine is not None and mine != e.get("cap_w") else ""
        until = f"-{e['end'][11:19]}" if e.get("end") else " on"
        answer = (f"under it {e['response_s']:.0f} s after its start" if e.get("response_s") is not None
                  else "the run never got under it" if e.get("heard_at") else "not heard")
        lines.append(f"  grid event {e['id']}: {limit}{share} {e['start'][11:19]}{until} UTC ({e['source']}): {answer}")
    return lines
