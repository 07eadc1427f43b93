"""The ``simulate --json`` object: every strategy's grams, joules and shares, and gridshift's saving in two parts.

The **mode part** is static efficiency (the frugal mode at the cron time: no carbon data) against the
reference mode at the cron time; the **timing part** is ``(static efficiency - gridshift) /
(static efficiency - oracle)``, what the forecasts and the orchestration add, with grams saved.

With prices every strategy also has its ``cost`` (currency, at the true prices), and ``price`` says
what the objective was and where the two single-objective optima lie: the trade-off, what each
tonne avoided costs between the least-cost and the least-carbon plan (:func:`price_summary`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from scheduler.planner import ModeFigures, Objective
from scheduler.planner.mode_figures import DECLARED
from scheduler.saving import two_parts
from simulation.strategies import JobOutcome

__all__ = ["SimulationResult", "price_summary", "summarise"]


@dataclass
class SimulationResult:
    """Per-job outcomes per strategy, and what they were computed from (:func:`simulation.simulate.simulate`
    fills it; it lives here, beside what reads it, so the summary needs nothing from the simulator)."""

    t0: datetime
    step_s: float
    values: np.ndarray
    outcomes: dict[str, list[JobOutcome]]
    modes: tuple[ModeFigures, ...]
    forecast: str
    clean_mode: str
    extra: dict[str, Any] = field(default_factory=dict)
    objective: Objective = Objective()

    @property
    def baseline(self) -> list[JobOutcome]:
        return self.outcomes["baseline"]

    @property
    def gridshift(self) -> list[JobOutcome]:
        return self.outcomes["gridshift"]

    @property
    def oracle(self) -> list[JobOutcome]:
        return self.outcomes["oracle"]

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object (grams, joules, seconds; energy and carbon modelled): :func:`summarise`."""
        return summarise(self)


def summarise(result: SimulationResult) -> dict[str, Any]:
    """The ``--json`` object of ``result`` (grams, joules, seconds; energy and carbon modelled)."""

    def tot(jobs: list[JobOutcome], attr: str) -> float:
        return float(sum(getattr(j, attr) for j in jobs))

    base_g = tot(result.outcomes["baseline"], "carbon_g")
    pct = (lambda x: 100.0 * (1.0 - x / base_g) if base_g > 0 else 0.0)
    n = len(result.outcomes["baseline"])
    oracle_g = tot(result.outcomes["oracle"], "carbon_g")
    oracle_saving = base_g - oracle_g
    static_g = tot(result.outcomes["static_efficiency"], "carbon_g")
    strategies: dict[str, Any] = {}
    for name, jobs in result.outcomes.items():
        g = tot(jobs, "carbon_g")
        timing = two_parts(base_g, static_g, g, oracle_g)["timing"]
        strategies[name] = {
            "carbon_g": g,
            "savings_pct": pct(g),
            "share_of_oracle_saving": (base_g - g) / oracle_saving if oracle_saving > 0 else None,
            "timing_saving_g": timing["saving_g"],
            "timing_share": timing["share"],
            "energy_j": tot(jobs, "energy_j"),
            "deadline_misses": sum(j.late for j in jobs),
            "mean_delay_s": float(np.mean([j.start_s - j.nominal_s for j in jobs])) if n else 0.0,
            "mean_duration_s": float(np.mean([j.end_s - j.start_s for j in jobs])) if n else 0.0,
            "mode_share": _mode_share(jobs),
        }
        if jobs and jobs[0].cost is not None:
            strategies[name]["cost"] = tot(jobs, "cost")
            strategies[name]["objective_value"] = float(sum(j.value(result.objective.carbon_price) for j in jobs))
    priced = result.objective.carbon_price is not None
    if priced:  # the oracle is the objective's optimum: the shares of its saving are on the objective too
        v = {name: st["objective_value"] for name, st in strategies.items()}
        room, timing_v = v["baseline"] - v["oracle"], v["static_efficiency"] - v["oracle"]
        for name, st in strategies.items():
            st["share_of_oracle_saving"] = (v["baseline"] - v[name]) / room if room > 0 else None
            st["timing_share"] = (v["static_efficiency"] - v[name]) / timing_v if timing_v > 0 else None
    # a share needs its references on time: a late static efficiency (a job slower than its figures,
    # --pace-error) saves grams by missing its deadline, and no share against it compares
    late = [name for name in ("baseline", "static_efficiency", "oracle") if strategies[name]["deadline_misses"]]
    if late:
        for st in strategies.values():
            st["share_of_oracle_saving"] = st["timing_share"] = None
    # gridshift's saving in two parts (see docs/scheduling.md, "Two shares"; a run's report splits its own alike)
    shares: dict[str, Any] = two_parts(base_g, static_g, strategies["gridshift"]["carbon_g"], oracle_g)
    shares["timing"]["share"] = strategies["gridshift"]["timing_share"]  # None where a reference was late
    shares["mode"]["what"] = ("static efficiency (the frugal mode at the cron time, no carbon data) against the "
                              "reference mode at the cron time")
    shares["timing"]["what"] = ("(static efficiency - gridshift) / (static efficiency - oracle): what the forecasts "
                                "and the orchestration add")
    if priced:
        shares["mode"]["share"] = (v["baseline"] - v["static_efficiency"]) / room if room > 0 else None
        shares["on"] = "the objective (cost + carbon priced), as the oracle; saving_g stays in grams"
    if late:
        shares["mode"]["share"] = None
        shares["why_no_shares"] = (f"{', '.join(late)} missed deadlines (the job runs slower than its figures): no share "
                                   "against a late reference compares")
    s = strategies
    return {
        "jobs": n,
        "baseline_g": s["baseline"]["carbon_g"],
        "gridshift_g": s["gridshift"]["carbon_g"],
        "oracle_g": s["oracle"]["carbon_g"],
        "savings_pct": s["gridshift"]["savings_pct"],
        "oracle_savings_pct": s["oracle"]["savings_pct"],
        "deadline_misses": s["gridshift"]["deadline_misses"],
        "oracle_deadline_misses": s["oracle"]["deadline_misses"],
        "energy_baseline_j": s["baseline"]["energy_j"],
        "energy_gridshift_j": s["gridshift"]["energy_j"],
        "energy_oracle_j": s["oracle"]["energy_j"],
        "mean_delay_s": s["gridshift"]["mean_delay_s"],
        "mean_duration_baseline_s": s["baseline"]["mean_duration_s"],
        "mean_duration_gridshift_s": s["gridshift"]["mean_duration_s"],
        "mode_share": s["gridshift"]["mode_share"],
        "shares": shares,
        "gate": _gate_summary(result.outcomes["gridshift"]),
        "reserve": _reserve_used(result),
        "strategies": strategies,
        "forecast": result.forecast,
        "step_s": result.step_s,
        "trace_start": result.t0.isoformat(),
        "trace_end": (result.t0 + timedelta(seconds=result.step_s * len(result.values))).isoformat(),
        "modelled": True,
        "figures_measured": all(m.measured for m in result.modes),
        "figures_kind": _figures_kind(result.modes),
        "energy_source": "; ".join(sorted({m.source for m in result.modes})),
        "mode_power_w": {m.name: m.power_w for m in result.modes},
        "mode_speed": {m.name: m.speed for m in result.modes},
        "mode_slowdown": {m.name: 1.0 / m.speed for m in result.modes},
        "mode_source": {m.name: m.source for m in result.modes},
        **result.extra,
        **({"price": price_summary(result, strategies)} if "oracle_cost" in result.outcomes and n else {}),
    }


def _relative(x: float, ref: float) -> float | None:
    """``x`` against ``ref`` as a fraction over it (costs may be negative: relative to ``ref``'s size)."""
    return (x - ref) / abs(ref) if abs(ref) > 1e-12 else None


def price_summary(result: SimulationResult, strategies: dict[str, Any]) -> dict[str, Any]:
    """The objective, each strategy against the least-cost and the least-carbon optimum, and the trade-off."""
    obj = result.objective
    cur = obj.currency
    c_opt, k_opt = strategies["oracle_carbon"], strategies["oracle_cost"]
    tonnes = (k_opt["carbon_g"] - c_opt["carbon_g"]) / 1e6  # what the cheapest plan emits more than the cleanest
    extra_cost = c_opt["cost"] - k_opt["cost"]  # what the cleanest plan costs more than the cheapest
    per_tonne = extra_cost / tonnes if tonnes > 1e-12 else None
    what = ("carbon only (no objective.carbon_price): cost is reported, not planned on" if obj.carbon_price is None
            else f"cost only (carbon_price 0)" if obj.carbon_price == 0
            else f"cost + carbon at {obj.carbon_price:g} {cur}/t")
    against = {name: {"cost_over_cost_optimum": _relative(st["cost"], k_opt["cost"]),
                      "carbon_over_carbon_optimum": _relative(st["carbon_g"], c_opt["carbon_g"])}
               for name, st in strategies.items() if "cost" in st}
    if per_tonne is None:
        sentence = "the least-cost plan is also the least-carbon one here: no trade-off"
    else:
        sentence = (f"the least-carbon plan emits {tonnes * 1e6:.0f} g less than the least-cost plan for "
                    f"{extra_cost:.4g} {cur} more: {per_tonne:.0f} {cur} per tonne avoided")
    return {"currency": cur, "carbon_price": obj.carbon_price, "objective": what,
            "optima": {"carbon": {"carbon_g": c_opt["carbon_g"], "cost": c_opt["cost"]},
                       "cost": {"carbon_g": k_opt["carbon_g"], "cost": k_opt["cost"]}},
            "tradeoff": {"tonnes": tonnes, "extra_cost": extra_cost, "cost_per_tonne_avoided": per_tonne,
                         "sentence": sentence},
            "against_optima": against,
            "gridshift_cost_over_cost_optimum": against["gridshift"]["cost_over_cost_optimum"],
            "prices_label": "real day-ahead prices; cost = modelled energy x price"}


def _reserve_used(result: SimulationResult) -> dict[str, Any]:
    """How far into its deadline margin gridshift's job ran (s; the margin is a pace reserve or idle time)."""
    margin = float((result.extra.get("deadline_margin") or {}).get("margin_s", 0.0))
    used = [max(j.end_s - (j.deadline_s - margin), 0.0) for j in result.outcomes["gridshift"]]
    return {"margin_s": margin, "nights_into_margin": sum(1 for u in used if u > 1e-6),
            "max_used_s": max(used, default=0.0), "mean_used_s": float(np.mean(used)) if used else 0.0}


def _gate_summary(jobs: list[JobOutcome]) -> dict[str, Any]:
    """On how many nights the do-no-harm gate let gridshift plan on a forecast, and on which."""
    by: dict[str, int] = {}
    for j in jobs:
        by[j.planned_on or "static plan"] = by.get(j.planned_on or "static plan", 0) + 1
    return {"nights": len(jobs), "on_a_forecast": sum(1 for j in jobs if j.planned_on), "by_choice": by}


def _figures_kind(modes: Sequence[ModeFigures]) -> str:
    """measured, declared (typed by hand, :data:`scheduler.planner.mode_figures.DECLARED`) or modelled."""
    if all(m.measured for m in modes):
        return "measured"
    return DECLARED if any(m.source.startswith(DECLARED) for m in modes) else "modelled"


def _mode_share(jobs: list[JobOutcome]) -> dict[str, float]:
    mode_s: dict[str, float] = {}
    for j in jobs:
        for a, b, m in j.spans:
            mode_s[m] = mode_s.get(m, 0.0) + (b - a)
    total = sum(mode_s.values()) or 1.0
    return {m: v / total for m, v in sorted(mode_s.items())}
