"""``gridshift simulate POLICY --trace CSV [--column NAME] [--price-trace CSV] [--json] [--plot PNG]``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_ENV, EXIT_INPUT, fail
from flows.cli._progress import Progress


_LABELS = {
    "baseline": "baseline (nominal start, reference mode)",
    "static_efficiency": "static efficiency at nominal",
    "best_static": "best static mode + best start (perfect foresight)",
    "threshold": "threshold rule (old decide)",
    "gridshift": "gridshift (planner: start, then modes re-planned)",
    "oracle": "oracle (exact, perfect foresight)",
    "oracle_carbon": "least carbon (exact, perfect foresight)",
    "oracle_cost": "least cost (exact, perfect foresight)",
}


def _human(s: dict[str, Any], trace: str) -> str:
    from simulation.human_units import energy_unit, figure, mass_unit

    label = f"from {s['figures_kind']} mode figures"
    # one unit per column, fitted to the baseline: a short job is grams and kilojoules, a year tonnes
    base = s["strategies"].get("baseline") or next(iter(s["strategies"].values()))
    g_unit, g_scale = mass_unit(base["carbon_g"])
    e_unit, e_scale = energy_unit(base["energy_j"])
    price = s.get("price")
    cur = f"cost {price['currency']}" if price else ""
    lines = [
        f"gridshift simulate: {s['jobs']} jobs over {trace} ({s['trace_start'][:10]} .. {s['trace_end'][:10]}), "
        f"{s['forecast']} forecast",
        f"  {'strategy':<52} {'CO2 ' + g_unit:>10} {'saving':>7} {'of oracle':>9} {'timing':>7} "
        f"{'energy ' + e_unit:>10} {'misses':>6}" + (f" {cur:>10}" if price else ""),
    ]
    for name, st in s["strategies"].items():
        share, timing = st["share_of_oracle_saving"], st["timing_share"]
        lines.append(f"  {_LABELS.get(name, name):<52} {figure(st['carbon_g'], g_scale):>10} {st['savings_pct']:>6.1f}% "
                     f"{'-' if share is None or name == 'baseline' else f'{share:.0%}':>9} "
                     f"{'-' if timing is None or name in ('baseline', 'static_efficiency') else f'{timing:.0%}':>7} "
                     f"{figure(st['energy_j'], e_scale):>10} {st['deadline_misses']:>6}"
                     + (f" {st['cost']:>10.2f}" if price else ""))
    if price:
        lines += _price_lines(price, (s.get("prices_cover") or {}).get("nights_without_prices", 0))
    mode, timing = s["shares"]["mode"], s["shares"]["timing"]
    if s["shares"].get("why_no_shares"):
        lines.append(f"  no shares: {s['shares']['why_no_shares']}")
    reserve = s.get("reserve") or {}
    if reserve.get("nights_into_margin"):
        lines.append(f"  gridshift ran into its {reserve['margin_s'] / 60:.0f} min deadline margin on {reserve['nights_into_margin']} "
                     f"night(s), at most {reserve['max_used_s'] / 60:.1f} min of it")
    lines.append(f"  gridshift's saving, {figure(mode['saving_g'] + timing['saving_g'], g_scale)} {g_unit}: the mode part "
                 f"{figure(mode['saving_g'], g_scale)} {g_unit} (the frugal mode at the cron time, no carbon data"
                 + ("" if mode["share"] is None else f": {mode['share']:.0%} of the oracle's saving")
                 + f") + the timing part {figure(timing['saving_g'], g_scale)} {g_unit}"
                 + ("" if timing["share"] is None else f" ({timing['share']:.0%} of what perfect timing adds)"))
    gate = s["gate"]
    lines.append(f"  do no harm: gridshift planned on a forecast on {gate['on_a_forecast']} of {gate['nights']} nights; on "
                 "the rest no forecast had yet shown a gain on its record of past nights, so it ran the static plan")
    lines += [
        f"  gridshift: mean start shift {s['mean_delay_s'] / 3600:+.2f} h; mean run {s['mean_duration_gridshift_s'] / 3600:.2f} h "
        f"(baseline {s['mean_duration_baseline_s'] / 3600:.2f} h); modes: "
        + ", ".join(f"{m} {v:.0%}" for m, v in s["mode_share"].items()),
        f"  energy and carbon are modelled {label} ({s['energy_source']}); intensity is the real trace",
    ]
    gaps = s.get("trace_gaps") or {}
    if gaps.get("gaps"):
        lines.append(f"  the trace has {gaps['gaps']} gap(s) of more than {gaps['max_gap_h']:g} h with no data (the longest "
                     f"{gaps['longest_gap_h']:.1f} h): the {gaps['nights_skipped']} night(s) they touch were skipped")
    if s.get("forecast_coverage") is not None:
        lines.append(f"  the archive covered {s['forecast_coverage']:.1%} of what gridshift's plans asked (each plan's "
                     "horizon to the deadline); the built-in forecaster filled the rest")
    if s.get("forecast_skill"):
        lines.append(f"  forecast, at the last night's start: {s['forecast_skill']['sentence']}")
    if s.get("plot"):
        lines.append(f"  plot written to {s['plot']}")
    return "\n".join(lines)


def _price_lines(price: dict[str, Any], unpriced: int) -> list[str]:
    """The objective, gridshift against the least-cost optimum, and what a tonne avoided costs between the optima."""
    gap = price["gridshift_cost_over_cost_optimum"]
    out = [f"  objective: {price['objective']}; cost at {price['prices_label']}"]
    if price.get("trace_stats"):
        t, cur = price["trace_stats"], price["currency"]
        out.append(f"  prices: {t['hours']} intervals, mean {t['mean']:.2f} {cur}/MWh (min {t['min']:.2f}, max "
                   f"{t['max']:.2f}; {t['below_zero']} below zero); {price.get('published', '')}")
    if unpriced:
        out.append(f"  {unpriced} night(s) of the carbon trace fall outside the prices and are not simulated")
    if gap is not None:
        out.append(f"  gridshift's cost is {gap:+.2%} against the least-cost optimum")
    out.append(f"  trade-off: {price['tradeoff']['sentence']}")
    return out


@app.command()
def simulate(
    policy: Annotated[Path, typer.Argument(help="Policy YAML with a recurring job (job.cron) and a deadline.")],
    trace: Annotated[Optional[Path], typer.Option("--trace", help="Trace CSV (timestamp + gCO2/kWh column).")] = None,
    site: Annotated[Optional[list[str]], typer.Option("--site", help="NAME=CSV per site of a fleet policy (repeat): where+when against when-only and where-only, as simulate-sites.")] = None,
    column: Annotated[Optional[str], typer.Option("--column", help="Intensity column when the trace has several.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of intensity, windows and modes.")] = None,
    forecast: Annotated[str, typer.Option(help="'history' (built-in forecaster on past data) or 'noisy' (the trace plus --forecast-error); with --forecast-file: 'fused' (the default: the archive, history and the latest observation, corrected and weighted by their record) or 'issued' (the archive alone).")] = "history",
    forecast_error: Annotated[float, typer.Option(help="Relative error of the 'noisy' forecast, e.g. 0.1.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Random seed of the 'noisy' forecast.")] = 0,
    min_gain: Annotated[float, typer.Option(help="The threshold strategy's start shift: only for at least this relative forecast gain (the planner uses the policy's rules.min_gain).")] = 0.03,
    profile: Annotated[Optional[Path], typer.Option(help="Measured power-limit profile: a Zeus CSV, a stored gridshift profile JSON, or {modes: {name: {power_w, slowdown}}} (default: the simulated backend's model).")] = None,
    forecast_file: Annotated[Optional[Path], typer.Option("--forecast-file", help="Forecasts as issued: CSV of issued_at, valid_for, value; each decision sees the newest issued before it.")] = None,
    forecast_column: Annotated[Optional[str], typer.Option("--forecast-column", help="Value column of --forecast-file when it has several.")] = None,
    workers: Annotated[Optional[int], typer.Option(min=1, help="Processes to spread the jobs over (default: one per core); the result is the same.")] = None,
    pace_error: Annotated[float, typer.Option(min=0.0, max=1.0, help="Every strategy's job runs this much slower than its figures (e.g. 0.03), so the shares stay comparable; gridshift's plans use the pace seen after one interval. A check of the deadline margin.")] = 0.0,
    price_trace: Annotated[Optional[Path], typer.Option("--price-trace", help="Hourly (or finer) day-ahead prices per MWh (timestamp, price): every strategy is costed, the least-cost and least-carbon optima stand beside the oracle, and objective.carbon_price plans on the prices as published.")] = None,
    price_market: Annotated[Optional[str], typer.Option("--price-market", help="When the prices were published: SDAC (EU zones, 13:00 Europe/Berlin the day before; the default) or ERCOT (13:30 America/Chicago).")] = None,
    carbon_price: Annotated[Optional[float], typer.Option("--carbon-price", min=0.0, help="Override objective.carbon_price (currency per tonne CO2; 0 = cost only). Needs --price-trace.")] = None,
) -> None:
    """Replay the policy's recurring job over a real trace: strategies side by side, up to the exact oracle."""
    if site:
        if trace is not None:
            raise fail("give --trace (one grid) or --site NAME=CSV per site (a fleet), not both", EXIT_INPUT)
        from flows.cli.simulate_sites import run_sites

        if forecast == "noisy" and forecast_error != 0:
            raise fail("with --site the forecast is 'history' or 'noisy' with --forecast-error 0 (perfect)", EXIT_INPUT)
        run_sites(policy=policy, site=site, column=column, limit=None, year=None,
                  forecast="daily-profile" if forecast == "history" else "perfect", json_out=json_out)
        return
    if trace is None:
        raise fail("--trace CSV is required (or --site NAME=CSV per site of a fleet policy)", EXIT_INPUT)
    _simulate(policy=policy, trace=trace, column=column, json_out=json_out, plot=plot, forecast=forecast,
              forecast_error=forecast_error, seed=seed, min_gain=min_gain, profile=profile,
              forecast_file=forecast_file, forecast_column=forecast_column, workers=workers, pace_error=pace_error,
              price_trace=price_trace, price_market=price_market, carbon_price=carbon_price)


def _market_of(pol: Any, given: str | None) -> Any:
    """The publication rule: --price-market, else the policy's price source's market or zone, else SDAC."""
    from carbon.prices.day_ahead import SDAC, market_for
    from scheduler.errors import PolicyError

    if given is not None:
        found = market_for(given)
        if found is None:
            raise PolicyError(f"--price-market {given!r}: unknown day-ahead market (known: SDAC, ERCOT)")
        return found
    source = pol.price
    named = (source.options.get("market") or source.zone) if source is not None else None
    return market_for(str(named)) if named and market_for(str(named)) else SDAC


def _read_prices(pol: Any, path: Path | None, market: str | None, carbon_price: float | None) -> Any:
    """The price trace, each price stamped when its market published it (None: no --price-trace)."""
    from scheduler.errors import PolicyError

    if path is None:
        if carbon_price is not None:
            raise PolicyError("--carbon-price prices carbon against the energy's price: give --price-trace FILE")
        return None
    from carbon.prices.trace import read_price_trace
    from scheduler.run_spec import price_currency

    found = _market_of(pol, market)
    currency = price_currency(pol.price) if pol.price is not None and market is None else found.currency
    return read_price_trace(path, zone=found.name, currency=currency or found.currency, market=found)


def _gridshift_asks(result: Any, policy: Any, step_s: float) -> list[tuple[int, int]]:
    """(grid index, steps to the deadline) of each forecast gridshift's plans asked for: the earliest
    start of each job, then every re-plan interval while it ran."""
    import numpy as np

    interval = policy.rules.interval_s
    asks = []
    for j in result.outcomes["gridshift"]:
        moments = [j.nominal_s + policy.job.earliest_start_s]
        moments += list(np.arange(j.start_s, j.end_s, interval))
        asks += [(int(t // step_s), int(np.ceil((j.deadline_s - t) / step_s)) + 1) for t in moments if t < j.deadline_s]
    return asks


def _last_start_skill(result: Any, policy: Any, forecaster: Any) -> dict[str, Any] | None:
    """The record the last job's start decision stood on (a fused forecast keeps one), for the report and --json."""
    from simulation.sim_forecast import FusedForecaster, start_window

    jobs = result.outcomes["gridshift"]
    if not isinstance(forecaster, FusedForecaster) or not jobs:
        return None
    j, job, step = jobs[-1], policy.job, result.step_s
    earliest = j.nominal_s + job.earliest_start_s
    i0 = int(earliest // step)
    window = start_window(origin_s=i0 * step, reference_s=max(j.nominal_s, earliest),
                          latest_start_s=j.deadline_s - job.expected_duration_s, run_s=job.expected_duration_s, step_s=step)
    return forecaster.skill(result.values, i0, window).as_dict()


def _simulate(*, policy: Path, trace: Path, column: str | None, json_out: bool, plot: Path | None, forecast: str,
              forecast_error: float, seed: int, min_gain: float, profile: Path | None,
              forecast_file: Path | None = None, forecast_column: str | None = None, workers: int | None = None,
              pace_error: float = 0.0, price_trace: Path | None = None, price_market: str | None = None,
              carbon_price: float | None = None) -> None:

    from backends.simulated import SimulatedBackend
    from carbon.errors import BadTrace
    from carbon.trace_file import TraceCheck, read_trace
    from scheduler.errors import PolicyError
    from scheduler.policy.loader import load_policy
    from carbon.forecasts.issued import read_issued_forecasts
    from scheduler.planner.mode_figures import figures_for_policy
    from simulation.sim_forecast import DailyProfileForecaster, FusedForecaster, IssuedForecaster, NoisyTraceForecaster
    from simulation.simulate import resample, simulate

    t_begin = time.perf_counter()
    try:
        pol = load_policy(policy)
        prices = _read_prices(pol, price_trace, price_market, carbon_price)
        if carbon_price is not None:
            pol = pol.model_copy(update={"objective": pol.objective.model_copy(update={"carbon_price": carbon_price})})
        check = TraceCheck()
        series = read_trace(trace, column=column, check=check)
        for line in check.warnings:
            typer.echo(f"warning: {line}", err=True)
        if profile is not None:
            modes = figures_for_policy(pol, profile=profile, policy_path=policy)
        else:
            modes = figures_for_policy(pol, backend=SimulatedBackend(), policy_path=policy)
        if forecast_file is not None:
            t0, step_s, _ = resample(series)
            issued = read_issued_forecasts(forecast_file, column=forecast_column)
            raw = IssuedForecaster(issued, origin_s=t0.timestamp(), step_s=step_s)
            if forecast == "issued":
                forecaster: Any = raw
                label = f"issued forecasts ({forecast_file.name}, newest covering each time before each decision)"
            elif forecast in ("history", "fused"):
                forecaster = FusedForecaster({forecast_file.name: raw.as_issued,
                                              "history": DailyProfileForecaster(step_s=step_s).forecast}, step_s=step_s)
                label = (f"fused ({forecast_file.name} as issued + history + latest observation, corrected and weighted "
                         "by the last 28 nights before each decision)")
            else:
                raise PolicyError(f"with --forecast-file, --forecast is 'fused' or 'issued', not {forecast!r}")
        elif forecast == "history":
            _, step_s, _ = resample(series)
            forecaster = DailyProfileForecaster(step_s=step_s)
            label = "history (daily-profile forecaster on past data)"
        elif forecast == "noisy":
            if not 0 <= forecast_error <= 1:
                raise PolicyError("--forecast-error must be between 0 and 1")
            forecaster = NoisyTraceForecaster(error=forecast_error, seed=seed)
            label = f"noisy (trace + {forecast_error:.0%} error, seed {seed})"
        else:
            raise PolicyError(f"--forecast must be 'history' or 'noisy', not {forecast!r}")
        with Progress("simulating", unit="jobs") as progress:  # a year takes a while: say how far on a terminal
            result = simulate(pol, series, modes, forecaster, forecast_label=label, min_gain=min_gain, workers=workers,
                              pace_error=pace_error, progress=progress, prices=prices)
        coverage = None
        if forecast_file is not None:  # how much of what the planner asked the archive answered
            coverage = raw.coverage(_gridshift_asks(result, pol, step_s))
        skill = _last_start_skill(result, pol, forecaster)
    except (PolicyError, BadTrace) as exc:
        raise fail(exc, EXIT_INPUT) from None
    except ValueError as exc:
        raise fail(f"{trace}: {exc}", EXIT_INPUT) from None
    summary = result.summary()
    summary["trace"] = str(trace)
    summary["trace_check"] = check.as_dict()
    if coverage is not None:
        summary["forecast_coverage"] = coverage
    if skill is not None:
        summary["forecast_skill"] = skill
    if summary["jobs"] == 0 and prices is not None and summary.get("prices_cover", {}).get("nights_without_prices"):
        raise fail(f"{price_trace}: no night's window has prices all through (the prices cover "
                   f"{prices.start:%Y-%m-%d} to {prices.end:%Y-%m-%d}); nothing to simulate", EXIT_INPUT)
    if summary["jobs"] == 0:
        raise fail(f"{trace}: the trace is shorter than one job window; nothing to simulate", EXIT_INPUT)
    if prices is not None:
        summary["price"]["trace"] = str(price_trace)
        summary["price"]["published"] = _market_of(pol, price_market).describe()
        values = prices.values()  # said beside the figures: a file in ct/kWh would be 10x off, and would show here
        summary["price"]["trace_stats"] = {"hours": len(values), "mean": sum(values) / len(values), "min": min(values),
                                           "max": max(values), "below_zero": sum(v < 0 for v in values),
                                           "start": prices.start.isoformat(), "end": prices.end.isoformat()}
    summary["runtime_s"] = time.perf_counter() - t_begin
    if plot is not None:
        from simulation.sim_plot import PlotUnavailable, plot_simulation

        try:
            written = plot_simulation(result, plot, title=f"{pol.job.name} on {trace.name}: {label}",
                                      earliest_offset_s=pol.job.earliest_start_s)
        except PlotUnavailable as exc:
            raise fail(str(exc), EXIT_ENV) from None
        summary["plot"] = str(written.resolve())
    typer.echo(json.dumps(summary, sort_keys=True) if json_out else _human(summary, trace.name))
