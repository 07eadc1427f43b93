"""``gridshift simulate POLICY --trace CSV [--column NAME] [--json] [--plot PNG]``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from flows.cli import app
from flows.cli._errors import EXIT_ENV, EXIT_INPUT, fail


def _human(s: dict[str, Any], trace: str) -> str:
    from flows.cli._units import energy_unit, figure, mass_unit

    label = "modelled" if s["modelled"] else "measured profile"
    # one unit per column, fitted to the baseline: a short job is grams and kilojoules, a year tonnes
    g_unit, g_scale = mass_unit(s["baseline_g"])
    e_unit, e_scale = energy_unit(s["energy_baseline_j"])
    rows = [("baseline", s["baseline_g"], "-", s["energy_baseline_j"]),
            ("gridshift", s["gridshift_g"], f"{s['savings_pct']:.1f}%", s["energy_gridshift_j"]),
            ("oracle", s["oracle_g"], f"{s['oracle_savings_pct']:.1f}%", s["energy_oracle_j"])]
    lines = [
        f"gridshift simulate: {s['jobs']} jobs over {trace} ({s['trace_start'][:10]} .. {s['trace_end'][:10]}), "
        f"{s['forecast']} forecast",
        f"  {'strategy':<10} {'CO2 ' + g_unit:>10} {'saving':>8} {'energy ' + e_unit:>10}",
        *(f"  {name:<10} {figure(g, g_scale):>10} {saving:>8} {figure(e, e_scale):>10}" for name, g, saving, e in rows),
        f"  deadline misses {s['deadline_misses']}; mean start shift {s['mean_delay_s'] / 3600:+.2f} h; "
        f"mean run {s['mean_duration_gridshift_s'] / 3600:.2f} h (baseline {s['mean_duration_baseline_s'] / 3600:.2f} h)",
        "  modes: " + ", ".join(f"{m} {v:.0%}" for m, v in s["mode_share"].items()),
        f"  energy and carbon are {label} ({s['energy_source']}); intensity is the real trace",
    ]
    if s.get("plot"):
        lines.append(f"  plot written to {s['plot']}")
    return "\n".join(lines)


@app.command()
def simulate(
    policy: Annotated[Path, typer.Argument(help="Policy YAML with a recurring job (job.cron) and a deadline.")],
    trace: Annotated[Path, typer.Option("--trace", help="Trace CSV (timestamp + gCO2/kWh column).")],
    column: Annotated[Optional[str], typer.Option("--column", help="Intensity column when the trace has several.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of intensity, windows and modes.")] = None,
    forecast: Annotated[str, typer.Option(help="'history' (built-in forecaster on past data) or 'noisy' (the trace plus --forecast-error).")] = "history",
    forecast_error: Annotated[float, typer.Option(help="Relative error of the 'noisy' forecast, e.g. 0.1.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Random seed of the 'noisy' forecast.")] = 0,
    min_gain: Annotated[float, typer.Option(help="Shift only when the forecast promises at least this relative gain.")] = 0.03,
    profile: Annotated[Optional[Path], typer.Option(help="JSON of measured power_w/slowdown per mode (default: the simulated backend's model).")] = None,
) -> None:
    """Replay the policy's recurring job over a real trace: baseline vs gridshift vs a perfect-foresight oracle."""
    _simulate(policy=policy, trace=trace, column=column, json_out=json_out, plot=plot, forecast=forecast,
              forecast_error=forecast_error, seed=seed, min_gain=min_gain, profile=profile)


def _simulate(*, policy: Path, trace: Path, column: str | None, json_out: bool, plot: Path | None, forecast: str,
              forecast_error: float, seed: int, min_gain: float, profile: Path | None) -> None:
    import numpy as np

    from backends.simulated import SimulatedBackend
    from carbon.errors import BadTrace
    from carbon.trace_file import read_trace
    from scheduler.errors import PolicyError
    from scheduler.policy_io import load_policy
    from simulation.sim_forecast import DailyProfileForecaster, NoisyTraceForecaster
    from simulation.simulate import model_from_backend, model_from_profile, resample, simulate

    t_begin = time.perf_counter()
    try:
        pol = load_policy(policy)
        series = read_trace(trace, column=column)
        if profile is not None:
            try:
                model = model_from_profile(json.loads(profile.read_text()), where=str(profile))
            except (OSError, ValueError) as exc:
                raise PolicyError(f"{profile}: cannot read profile: {exc}") from None
        else:
            model = model_from_backend(pol, SimulatedBackend())
        if forecast == "history":
            _, step_s, _ = resample(series)
            forecaster: Any = DailyProfileForecaster(step_s=step_s)
            label = "history (daily-profile forecaster on past data)"
        elif forecast == "noisy":
            if not 0 <= forecast_error <= 1:
                raise PolicyError("--forecast-error must be between 0 and 1")
            forecaster = NoisyTraceForecaster(error=forecast_error, rng=np.random.default_rng(seed))
            label = f"noisy (trace + {forecast_error:.0%} error, seed {seed})"
        else:
            raise PolicyError(f"--forecast must be 'history' or 'noisy', not {forecast!r}")
        result = simulate(pol, series, model, forecaster, forecast_label=label, min_gain=min_gain)
    except (PolicyError, BadTrace) as exc:
        raise fail(exc, EXIT_INPUT) from None
    except ValueError as exc:
        raise fail(f"{trace}: {exc}", EXIT_INPUT) from None
    summary = result.summary()
    summary["trace"] = str(trace)
    summary["runtime_s"] = time.perf_counter() - t_begin
    if summary["jobs"] == 0:
        raise fail(f"{trace}: the trace is shorter than one job window; nothing to simulate", EXIT_INPUT)
    if plot is not None:
        from simulation.sim_plot import PlotUnavailable, plot_simulation

        try:
            written = plot_simulation(result, plot, title=f"{pol.job.name} on {trace.name}: {label}",
                                      earliest_offset_s=pol.job.earliest_start_s)
        except PlotUnavailable as exc:
            raise fail(str(exc), EXIT_ENV) from None
        summary["plot"] = str(written.resolve())
    typer.echo(json.dumps(summary, sort_keys=True) if json_out else _human(summary, trace.name))
