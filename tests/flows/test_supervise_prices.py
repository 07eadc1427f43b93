"""A run with a price source: the loop plans on the prices published, reports the cost, and survives a price outage.

The clock is injected (tests/flows/test_supervise_timeline.py's fake job and clock), the prices are a
file read by the trace price source as the EU day-ahead market publishes them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from backends.simulated import SimulatedBackend
from carbon.errors import ProviderUnreachable
from carbon.prices import PriceReader
from flows.supervise import supervise
from scheduler.policy.types import Policy
from tests.flows.test_supervise_plan import FIGURES, _monitor, _series, _timeline
from tests.flows.test_supervise_timeline import T0, FakeClock, FakeJob

H = 3600.0


def _prices(tmp_path: Path) -> Path:
    """50 EUR/MWh, except 02:00-04:00 UTC: -60 (a market paying for energy)."""
    rows = [f"{(T0 + timedelta(hours=h)).isoformat()},{-60 if 2 <= h < 4 else 50}" for h in range(-24, 24)]
    path = tmp_path / "prices.csv"
    path.write_text("timestamp,price\n" + "\n".join(rows) + "\n")
    return path


def _policy(prices: Path, carbon_price: float | None) -> Policy:
    return Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.6}},
        "rules": {"kind": "plan", "min_dwell_s": 1800, "interval_s": 600, "deadline_margin_s": 600, "slot_s": 300},
        "objective": {} if carbon_price is None else {"carbon_price": carbon_price},
        "price": {"provider": "trace", "zone": "DE-LU", "options": {"path": str(prices)}},
        "job": {"name": "priced", "expected_duration_s": 5 * H, "deadline_s": 8 * H},
        "backend": {"name": "simulated"},
    })


def _run(policy: Policy, **kwargs: object):  # type: ignore[no-untyped-def]
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = _monitor(_series(lambda minute: 300.0))
    job = FakeJob(clock, backend, policy.job.expected_duration_s, 1.25)

    def sleep(s: float) -> None:
        clock.t += timedelta(seconds=s)

    return supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                     first_reading=monitor.read(clock()), start_job=lambda env: job, now=clock, log=lambda line: None,
                     deadline=T0 + timedelta(seconds=policy.job.deadline_s or 0), figures=FIGURES, sleep=sleep,
                     progress=job.progress, **kwargs)


def test_cost_only_runs_flat_out_while_the_market_pays(tmp_path: Path) -> None:
    run = _run(_policy(_prices(tmp_path), 0.0))
    speed = [(a, b) for mode, a, b in _timeline(run.spans) if mode == "speed"]
    assert speed and all(120 - 1 <= a and b <= 240 + 1 for a, b in speed)  # speed only while prices are below zero
    assert sum(b - a for a, b in speed) >= 110
    cost = run.extra["cost"]
    assert cost["currency"] == "EUR" and cost["source"] == "trace[DE-LU]" and cost["spans_without_prices"] == 0
    assert cost["total"] == sum(s["cost"] for s in cost["spans"]) and "modelled energy" in cost["label"]
    assert "EUR/MWh" in run.reason


def test_a_carbon_objective_only_reports_the_cost(tmp_path: Path) -> None:
    run = _run(_policy(_prices(tmp_path), None))
    assert {mode for mode, _, _ in _timeline(run.spans)} == {"efficiency"}  # flat carbon: the frugal mode throughout
    assert run.extra["cost"]["total"] > 0 and "g/kWh" in run.reason


class _Down:
    name, market, currency = "down", None, "EUR"

    def prices(self, **_: datetime) -> None:
        raise ProviderUnreachable("no route to host", provider="down")

    def close(self) -> None:
        pass


def test_without_prices_a_priced_run_plans_on_carbon_and_says_so(tmp_path: Path) -> None:
    run = _run(_policy(_prices(tmp_path), 0.0), prices=PriceReader([("down", lambda: _Down())]))  # type: ignore[list-item]
    assert run.exit_code == 0
    assert any("prices unavailable" in w for w in run.warnings)
    assert any("planning on carbon alone" in w for w in run.warnings)
    assert run.extra["cost"]["total"] is None and "no prices" in run.extra["cost"]["error"]


def test_the_report_and_the_artifact_show_the_cost() -> None:
    from flows.report.human import human_report
    from flows.run.artifacts import report_markdown
    from tests.flows.test_run_chart import deferred_report

    report = deferred_report()
    report.setdefault("extra", {})["cost"] = {"total": 3.711e-05, "currency": "USD", "source": "trace[ERCOT]",
                                              "spans": [], "spans_without_prices": 0,
                                              "label": "modelled energy x the published day-ahead price"}
    assert "  cost       0.00003711 USD (modelled energy x the published day-ahead price, trace[ERCOT])" in human_report(report)
    assert "| cost | 0.00003711 USD | modelled energy x the published day-ahead price |" in report_markdown(report)
