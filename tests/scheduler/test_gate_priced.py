"""The do-no-harm gate under a priced objective: scored on cost + carbon priced, against a static plan
that already moves to the cheap hours (prices are published, not forecast)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from carbon.prices import PricePoint, PriceSeries
from scheduler.loop.gate import NightPlanner
from scheduler.planner import ModeFigures
from scheduler.planner.grid import GridSignal
from scheduler.planner.objective import price_signal
from scheduler.policy.types import Policy
from scheduler.run_spec import resolve_run

NOMINAL = datetime(2024, 3, 2, 1, tzinfo=timezone.utc)
FIGURES = [ModeFigures("speed", 700.0, 1.0), ModeFigures("efficiency", 490.0, 1 / 1.2)]
EARLIEST = NOMINAL - timedelta(hours=4)


def _planner(carbon_price: float) -> NightPlanner:
    policy = Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {}, "efficiency": {"power_limit_fraction": 0.7}},
        "rules": {"kind": "plan", "min_dwell_s": 1800, "interval_s": 900, "slot_s": 900, "deadline_margin_s": 900},
        "objective": {"carbon_price": carbon_price},
        "job": {"expected_duration_s": 3 * 3600, "earliest_start_s": -4 * 3600, "deadline_s": 7 * 3600, "cron": "0 1 * * *"},
    })
    return NightPlanner(resolve_run(policy), FIGURES)


def _hourly(values: list[float]) -> GridSignal:
    return GridSignal(np.array(values, dtype=float), 3600.0, 0.0, epoch=EARLIEST)


# the night from 21:00: cheap early, clean late (price and carbon pull apart)
PRICES = [10, 10, 10, 12, 40, 60, 60, 60, 60, 60, 60, 60]
CARBON = [500, 500, 500, 480, 300, 150, 150, 150, 150, 150, 150, 150]


def _price() -> tuple[object, GridSignal]:
    series = PriceSeries.of([PricePoint(EARLIEST + timedelta(hours=h - 24), timedelta(hours=1),
                                        float(PRICES[h % 12] if h >= 24 else 30), EARLIEST - timedelta(days=2))
                             for h in range(36)], currency="EUR")
    return price_signal(series, EARLIEST), _hourly(PRICES)


def test_the_static_plan_moves_to_the_cheap_hours() -> None:
    price, _ = _price()
    static = _planner(0.0).static_plan(nominal=NOMINAL, price=price, value_now=500.0)  # type: ignore[arg-type]
    assert static.start == EARLIEST and static.cost is not None  # the cheap hours are the first ones


def test_cost_only_leaves_no_room_for_a_carbon_forecast() -> None:
    price, observed_price = _price()
    gain = _planner(0.0).gain(_hourly(CARBON), _hourly(CARBON), nominal=NOMINAL, price=price,  # type: ignore[arg-type]
                              observed_price=observed_price)
    assert gain == pytest.approx(0.0, abs=1e-12)


def test_a_high_carbon_price_lets_a_good_forecast_pay() -> None:
    price, observed_price = _price()
    planner = _planner(500.0)
    gain = planner.gain(_hourly(CARBON), _hourly(CARBON), nominal=NOMINAL, price=price,  # type: ignore[arg-type]
                        observed_price=observed_price)
    assert gain is not None and gain > 0.05
    wrong = planner.gain(_hourly(CARBON[::-1]), _hourly(CARBON), nominal=NOMINAL, price=price,  # type: ignore[arg-type]
                         observed_price=observed_price)
    assert wrong is not None and wrong <= 0  # a forecast that is backwards earns no trust
