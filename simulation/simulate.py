"""Replay a policy's recurring job over a whole carbon trace, strategies side by side.

For every cron occurrence whose whole window lies inside the trace, each strategy runs the same job
(``expected_duration_s`` of work, counted in reference-mode seconds):

- **baseline**: start at the nominal (cron) time, reference (clean) mode throughout;
- **static_efficiency**: nominal start, the mode with the least energy per unit of work that meets
  the deadline: what a user picks with no carbon data at all;
- **best_static**: one mode and one start, the best pair with perfect foresight;
- **threshold**: the old rule (start from ``best_start_over_modes`` on the forecast, then the flow's
  :class:`scheduler.planner.deciders.ThresholdDecider`, percentile thresholds every interval), with the
  policy's clean/dirty modes;
- **gridshift**: the planner (:func:`scheduler.planner.plan_slots` on the flow's inputs,
  :func:`scheduler.planner.deciders.plan_inputs`, from the same :class:`scheduler.run_spec.RunSpec`) where the
  product calls it: once at the earliest start to choose the start (the deployment's planning run),
  then every ``rules.interval_s`` of the run a fresh forecast and a fresh plan with the work left, the
  running mode (dwell) and the deadline margin; it executes the plan until the next decision;
- **oracle**: the exact optimum with perfect foresight, no margin and no dwell, on the finest grid
  the other strategies use, so it bounds every one of them from below.

With prices (``simulate --price-trace``) every strategy is also costed at the true prices, the
objective may price carbon (``objective.carbon_price``: cost + carbon_price x tonnes, and then
gridshift's plans read the day-ahead prices as the market published them, never earlier), the oracle
is the exact optimum of that objective, and two more exact optima stand beside it: **oracle_carbon**
(least carbon) and **oracle_cost** (least cost), the ends of the trade-off. Only nights whose whole
window has prices are simulated.

Carbon is integrated exactly over the real (piecewise-constant) trace. Power and speed per mode are
:class:`scheduler.planner.ModeFigures` (a measured profile, or a model: each says which), so energy
and carbon here are **modelled**; the intensities are real. Time is never read from the clock.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from concurrent.futures import ALL_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence

import numpy as np

from carbon.prices.series import PriceSeries
from carbon.series import IntensitySeries
from carbon.trace_file import MAX_GAP, series_gaps
from scheduler.policy.cron import cron_occurrences
from scheduler.errors import PolicyError
from scheduler.planner import ModeFigures, Objective, PlanConstraints
from scheduler.run_spec import RunSpec, resolve_run
from scheduler.policy.types import PlanRule, Policy
from scheduler.loop.gate import ForecastChoice, NightPlanner
from simulation.sim_forecast import GridForecaster, forecast_candidates
from simulation.sim_gate import NightRecords
from simulation.sim_price import SimPrices
from simulation.summary import SimulationResult
from simulation.strategies import (JobOutcome, TruthGrid, as_threshold_policy, best_static, gridshift_run, oracle_run,
                                   pace_modes, static_run, threshold_run)

__all__ = ["STRATEGIES", "JobOutcome", "SimulationResult", "nominal_starts", "simulate", "resample"]

_MIN_JOBS_PER_WORKER = 16  # below this a worker costs more to start than it saves
STRATEGIES = ("baseline", "static_efficiency", "best_static", "threshold", "gridshift", "oracle")
#: with prices: the two single-objective optima, beside the objective's own (oracle)
OPTIMA = ("oracle_carbon", "oracle_cost")


def resample(series: IntensitySeries, step_s: float | None = None) -> tuple[datetime, float, np.ndarray]:
    """(origin, step_s, values) on a regular grid; the value in force at each step (gaps carry forward).

    ``step_s`` defaults to the trace's median spacing.
    """
    if len(series) < 2:
        raise ValueError("a trace needs at least two points to be simulated")
    starts = np.array([p.start.timestamp() for p in series.points])
    vals = np.array([p.g_per_kwh for p in series.points])
    step = float(np.median(np.diff(starts))) if step_s is None else float(step_s)
    t0 = starts[0]
    end = series.points[-1].end.timestamp()
    grid = t0 + np.arange(int((end - t0) // step)) * step
    idx = np.searchsorted(starts, grid, side="right") - 1
    return datetime.fromtimestamp(t0, tz=timezone.utc), step, vals[np.clip(idx, 0, len(vals) - 1)]


def _cost(j: JobOutcome, objective: Objective) -> float:
    return j.value(objective.carbon_price) + objective.time_value_per_h * (j.end_s - j.start_s) / 3600.0


def _gcd_s(*xs: float) -> float:
    out = 0
    for x in xs:
        out = math.gcd(out, int(round(x)))
    return float(max(out, 1))


@dataclass(frozen=True)
class _JobContext:
    """What every job of one simulation shares (sent once to each worker process)."""

    policy: Policy
    spec: RunSpec  # the planner's run specification, as the flow resolves it
    threshold_spec: RunSpec  # the threshold strategy's (the policy's own rule, or the default relative one)
    truth: TruthGrid
    t0: datetime
    modes: tuple[ModeFigures, ...]
    forecaster: GridForecaster
    wanted: tuple[str, ...]
    objective: Objective
    constraints: PlanConstraints
    interval_s: float
    grid_s: float
    min_gain: float
    records: NightRecords  # the do-no-harm gate's record of every forecast, night by night
    nominals: dict[float, int]  # night index by cron time (trace seconds)
    pace_error: float = 0.0
    prices: SimPrices | None = None


def _simulate_job(ctx: _JobContext, ns: float) -> dict[str, JobOutcome]:
    """Every wanted strategy on the occurrence nominally at ``ns`` (trace seconds).

    With ``pace_error`` every strategy's job runs that much slower than its figures: each chooses
    on what it knows (the figures; the perfect-foresight ones, the true speeds) and runs at the
    true speeds, so shares and misses stay comparable across strategies.
    """
    job, truth, modes = ctx.policy.job, ctx.truth, ctx.modes
    true = pace_modes(modes, ctx.pace_error)
    assert job.deadline_s is not None
    dl = ns + job.deadline_s
    earliest = ns + job.earliest_start_s
    work = job.expected_duration_s
    clean = [m.name for m in modes].index(ctx.policy.rules.clean_mode)
    prices, cp = ctx.prices, ctx.objective.carbon_price
    out: dict[str, JobOutcome] = {"baseline": static_run(truth, true, clean, ns, work, ns, dl, prices)}
    if "static_efficiency" in ctx.wanted:  # (always: the summary's two shares need it)
        fits = [k for k, m in enumerate(modes) if ns + work / m.speed <= dl + 1e-6] or [clean]
        frugal = min(fits, key=lambda k: modes[k].joules_per_work_s)
        out["static_efficiency"] = static_run(truth, true, frugal, ns, work, ns, dl, prices)
    best = best_static(truth, true, earliest, dl, work, ctx.grid_s, ns, prices, cp)
    if "best_static" in ctx.wanted:
        out["best_static"] = best
    if "threshold" in ctx.wanted:
        out["threshold"] = threshold_run(ctx.threshold_spec, truth, ctx.t0, modes, ctx.forecaster, nominal_s=ns,
                                         min_gain=ctx.min_gain, pace_error=ctx.pace_error, prices=prices)
    out["gridshift"] = _gridshift(ctx, ns)
    out["oracle"] = _optimum(ctx, ns, ctx.objective, best)
    if prices is not None:  # the ends of the trade-off: least carbon, least cost (the oracle when it is one)
        for name, single in (("oracle_carbon", Objective()), ("oracle_cost", Objective(carbon_price=0.0))):
            same = ctx.objective.time_value_g_per_h == 0 and cp == single.carbon_price
            out[name] = out["oracle"] if same else _optimum(
                ctx, ns, single, best_static(truth, true, earliest, dl, work, ctx.grid_s, ns, prices, single.carbon_price))
    return out


def _optimum(ctx: _JobContext, ns: float, objective: Objective, best: JobOutcome) -> JobOutcome:
    """The exact optimum of ``objective`` on the night at ``ns``. The DP's work quantum may cost it up to
    max_rounding against a schedule counted exactly; the best single-mode schedule ``best`` is in its
    search space, so the optimum is the better of the two."""
    true = pace_modes(ctx.modes, ctx.pace_error)
    dp = oracle_run(ctx.policy, ctx.truth, ctx.t0, true, nominal_s=ns, grid_s=ctx.grid_s, objective=objective,
                    prices=ctx.prices)
    return dp if _cost(dp, objective) <= _cost(best, objective) else best


def _gridshift(ctx: _JobContext, ns: float) -> JobOutcome:
    """The product's two runs for the night at ``ns``: the planning run (gate, then the start), then the training run."""
    job = ctx.policy.job
    k = ctx.nominals[ns]
    records = ctx.records
    if getattr(ctx.spec.rules, "forecast_gate", True):
        choice = records.choice(k)
    else:  # rules.forecast_gate: false: the forecast from the first night
        choice = ForecastChoice(next(iter(records.candidates)), "rules.forecast_gate is off")
    earliest = ns + job.earliest_start_s
    reference = max(ns, earliest)
    if choice.label is None:  # the static plan: the cron start (priced: the prices' start), modes on a flat signal
        start, read = (records.static_start(k) if records.prices is not None else reference), records.observed_reader()
    else:
        start = max((records.start_plan(choice.label, k).start - ctx.t0).total_seconds(), earliest)
        read = records.reader(choice.label, k)
    outcome = gridshift_run(ctx.spec, ctx.truth, ctx.modes, read, nominal_s=ns, start_s=start, choice=choice,
                            pace_error=ctx.pace_error, prices=ctx.prices)
    return replace(outcome, planned_on=choice.label or "")


#: the context forked workers inherit (set just before the pool forks), so it is not pickled to each
_FORKED: _JobContext | None = None


#: jobs finished by the forked workers, for the progress line (shared memory, set up before the fork)
_DONE: Any = None
#: how often the progress line hears from the workers, s
_PROGRESS_POLL_S = 0.5


def _simulate_chunk(offsets: Sequence[float], ctx: _JobContext | None = None) -> list[dict[str, JobOutcome]]:
    ctx = ctx if ctx is not None else _FORKED
    assert ctx is not None
    out = []
    for ns in offsets:
        out.append(_simulate_job(ctx, ns))
        if _DONE is not None:
            with _DONE.get_lock():
                _DONE.value += 1
    return out


def _map_jobs(ctx: _JobContext, offsets: list[float], workers: int | None,
              progress: Callable[[int, int], None] | None = None) -> list[dict[str, JobOutcome]]:
    """Jobs are independent: spread them over ``workers`` processes (default: one per core), in order.

    Forked workers inherit the context (trace, forecaster, a forecast archive) without copying or
    pickling it; only the job offsets and outcomes cross. Where fork is unavailable it runs in-process.
    ``progress(done, total)`` is called as jobs finish (from a counter the workers share).
    """
    global _FORKED, _DONE
    tell = progress or (lambda done, total: None)
    tell(0, len(offsets))
    n = workers if workers is not None else (os.cpu_count() or 1)
    n = min(n, len(offsets) // _MIN_JOBS_PER_WORKER)
    if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        out = []
        for ns in offsets:
            out += _simulate_chunk([ns], ctx)
            tell(len(out), len(offsets))
        return out
    # one contiguous block per worker: a night's gate reads the record of the nights before it, which
    # a block must replay anew at its start (28 start plans of the 12 h job cost ~1 s; eight blocks
    # cost 6 % more CPU than two for the 12 h year, measured)
    size = -(-len(offsets) // n)
    chunks = [offsets[k * size:(k + 1) * size] for k in range(n)]
    fork = multiprocessing.get_context("fork")
    _FORKED, _DONE = ctx, fork.Value("i", 0)
    try:
        with ProcessPoolExecutor(n, mp_context=fork) as pool:
            futures = [pool.submit(_simulate_chunk, chunk) for chunk in chunks]
            while wait(futures, timeout=_PROGRESS_POLL_S, return_when=ALL_COMPLETED).not_done:
                tell(_DONE.value, len(offsets))
            parts = [f.result() for f in futures]
        tell(len(offsets), len(offsets))
    finally:
        _FORKED, _DONE = None, None
    return [outcome for part in parts for outcome in part]


def nominal_starts(cron: str, t0: datetime, end: datetime, *, tz: str, earliest_start_s: float,
                   deadline_s: float) -> list[datetime]:
    """The occurrences of ``cron`` in ``tz`` (read as Prefect and ``serve`` read it) whose whole
    window, from the earliest start to the deadline, lies in the trace ``[t0, end)``."""
    first = t0 + timedelta(seconds=max(-earliest_start_s, 0.0))
    last = end - timedelta(seconds=deadline_s)
    return [n for n in cron_occurrences(cron, first, end, tz=tz) if n <= last]


def simulate(
    policy: Policy,
    trace: IntensitySeries,
    modes: Sequence[ModeFigures],
    forecaster: GridForecaster,
    *,
    forecast_label: str = "daily-profile",
    min_gain: float = 0.03,
    strategies: Sequence[str] = STRATEGIES,
    workers: int | None = None,
    pace_error: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
    prices: PriceSeries | None = None,
) -> SimulationResult:
    """Replay ``policy``'s recurring job over ``trace`` (see the module docstring).

    ``workers``: processes to spread the jobs over (default: one per core; 1 runs in this process).
    The result does not depend on it: every forecaster answers from the trace and the decision time alone.
    ``pace_error``: every strategy's job runs this much slower (relative) than its figures in every
    mode (a check of the deadline margin that keeps the shares comparable: see :func:`_simulate_job`).
    ``progress(done, total)`` hears of finished jobs (a terminal's progress line). ``prices``: a price
    trace, each price stamped with its publication time (:func:`carbon.prices.trace.read_price_trace`);
    every strategy is costed on it, and a priced objective plans on it as it was published.
    """
    job = policy.job
    if job.cron is None:
        raise PolicyError("job.cron: simulate needs a recurring job (set job.cron, e.g. '0 1 * * *')")
    if job.deadline_s is None:
        raise PolicyError("job.deadline_s: simulate needs a deadline to know how far a job may move")
    names = [m.name for m in modes]
    threshold_policy = as_threshold_policy(policy)
    for m in (policy.rules.clean_mode, threshold_policy.rules.dirty_mode):
        if m not in names:
            raise PolicyError(f"modes.{m}: no power/speed figures for this mode")
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise PolicyError(f"unknown strategy {unknown[0]!r} (strategies: {', '.join(STRATEGIES)})")
    # static efficiency splits every saving into its mode part and its timing part: always run
    wanted = [s for s in STRATEGIES if s in strategies or s in ("baseline", "static_efficiency", "gridshift", "oracle")]
    t0, step, values = resample(trace)
    truth = TruthGrid(values, step, 0.0, epoch=t0)
    end = t0 + timedelta(seconds=step * len(values))
    nominals = nominal_starts(job.cron, t0, end, tz=job.timezone, earliest_start_s=job.earliest_start_s,
                              deadline_s=job.deadline_s)
    gaps = series_gaps(trace)
    nominals, skipped = _outside_gaps(nominals, gaps, earliest_s=job.earliest_start_s, deadline_s=job.deadline_s)
    sim_prices = SimPrices(prices, t0) if prices is not None else None
    every_night, unpriced = nominals, 0
    if sim_prices is not None:  # only nights the prices cover, from the earliest start to the deadline
        kept = [n for n in nominals if sim_prices.covers((n - t0).total_seconds() + job.earliest_start_s,
                                                         (n - t0).total_seconds() + job.deadline_s)]
        nominals, unpriced = kept, len(nominals) - len(kept)
    if policy.objective.carbon_price is not None and sim_prices is None:
        raise PolicyError("objective.carbon_price: the simulation needs the prices (--price-trace FILE)")
    rule = policy.rules
    # a threshold policy is planned with its own dwell and interval, on slots of the trace's resolution
    plan_rule = rule if isinstance(rule, PlanRule) else PlanRule(clean_mode=rule.clean_mode, dirty_mode=rule.dirty_mode,
                                                                 min_dwell_s=rule.min_dwell_s, interval_s=rule.interval_s,
                                                                 slot_s=step)
    # the run specification the flow resolves: the product's constraints and objective (the same rounding bound too)
    spec = resolve_run(policy.model_copy(update={"rules": plan_rule}))
    if sim_prices is not None and sim_prices.currency:  # the objective's currency is the prices'
        spec = replace(spec, objective=replace(spec.objective, currency=sim_prices.currency))
    constraints, objective = spec.constraints, spec.objective
    assert constraints is not None
    grid_s = _gcd_s(step, plan_rule.slot_s, plan_rule.interval_s, threshold_policy.rules.interval_s)
    offsets = [(n - t0).total_seconds() for n in nominals]
    # the gate's record is of carbon forecasts: on a carbon objective it holds the nights the prices miss too,
    # so adding a price trace changes no plan; a priced objective's record needs each night's prices
    recorded = offsets if objective.priced else [(n - t0).total_seconds() for n in every_night]
    records = NightRecords(NightPlanner(spec, modes), truth, forecast_candidates(forecaster), recorded,
                           earliest_s=job.earliest_start_s, deadline_s=job.deadline_s, slot_s=constraints.slot_s,
                           prices=sim_prices)
    ctx = _JobContext(policy=policy, spec=spec, threshold_spec=resolve_run(threshold_policy), truth=truth, t0=t0,
                      modes=tuple(modes), forecaster=forecaster, wanted=tuple(wanted), objective=objective, constraints=constraints,
                      interval_s=plan_rule.interval_s, grid_s=grid_s, min_gain=min_gain,
                      records=records, nominals={ns: k for k, ns in enumerate(recorded)}, pace_error=pace_error,
                      prices=sim_prices)
    out: dict[str, list[JobOutcome]] = {s: [] for s in (*wanted, *(OPTIMA if sim_prices is not None else ()))}
    for per_job in _map_jobs(ctx, offsets, workers, progress):
        for name, outcome in per_job.items():
            out[name].append(outcome)
    margin = {"margin_s": constraints.deadline_margin_s,
              "kept_as": "pace reserve" if constraints.pace_tolerance > 0 else "time before the deadline",
              "pace_tolerance": constraints.pace_tolerance, "pace_error": pace_error}
    longest = max(((b - a).total_seconds() for a, b in gaps), default=0.0)
    extra: dict[str, Any] = {"deadline_margin": margin,
                             "trace_gaps": {"gaps": len(gaps), "longest_gap_h": longest / 3600.0,
                                            "max_gap_h": MAX_GAP.total_seconds() / 3600.0, "nights_skipped": skipped}}
    if sim_prices is not None:
        extra["prices_cover"] = {"nights_without_prices": unpriced}
    return SimulationResult(t0=t0, step_s=step, values=values, outcomes=out, modes=tuple(modes),
                            forecast=forecast_label, clean_mode=policy.rules.clean_mode, extra=extra, objective=objective)


def _outside_gaps(nominals: list[datetime], gaps: Sequence[tuple[datetime, datetime]], *, earliest_s: float,
                  deadline_s: float) -> tuple[list[datetime], int]:
    """The nights whose window (earliest start to deadline) touches no gap, and how many were skipped."""
    if not gaps:
        return nominals, 0
    keep = [n for n in nominals
            if not any(a < n + timedelta(seconds=deadline_s) and b > n + timedelta(seconds=earliest_s) for a, b in gaps)]
    return keep, len(nominals) - len(keep)
