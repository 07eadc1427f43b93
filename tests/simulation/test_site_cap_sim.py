"""The capped-site simulation (issue 34, acceptance 2 and the evidence): the cap and the events' lower caps
held in every slot, misses counted only where the exact MILP says a plan meeting every deadline exists."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from carbon.events import GridEvent, site_scope
from carbon.series import IntensityPoint, IntensitySeries
from scheduler.errors import PolicyError
from scheduler.planner import ModeFigures
from scheduler.policy.types import Policy
from simulation.site_cap import simulate_site_cap

UTC = timezone.utc
START = datetime(2021, 8, 1, tzinfo=UTC)
MODES = [ModeFigures("speed", 700.0, 1.0, "test", False), ModeFigures("efficiency", 490.0, 0.83, "test", False),
         ModeFigures("cap_262w", 262.0, 0.50, "test", False, only_under_cap=True)]


def _policy(cap_w: float | None) -> Policy:
    return Policy.model_validate({"carbon": {"provider": "static"},
        "modes": {"speed": {"power_limit_fraction": 1.0}, "efficiency": {"power_limit_fraction": 0.7}},
        "rules": {"kind": "plan", "slot_s": 1800, "min_dwell_s": 0, "deadline_margin_s": 0},
        "job": {"name": "j", "command": ["true"], "expected_duration_s": 3 * 3600, "cron": "0 1 * * *",
                "earliest_start_s": -4 * 3600, "deadline_s": 7 * 3600},
        "sites": [{"name": "dc", "work_pool": "p", "gpus_per_node": 8, "carbon": {"provider": "static"},
                   "power_cap_w": cap_w, "changeover_s": 0}]})


def _trace(days: int) -> IntensitySeries:
    hours = np.arange(days * 24)
    values = 300 + 150 * np.sin(2 * np.pi * hours / 24)
    return IntensitySeries.of(IntensityPoint(START + timedelta(hours=int(h)), timedelta(hours=1), float(v))
                              for h, v in zip(hours, values))


def test_the_cap_and_an_event_hold_in_every_slot_and_misses_are_checked_against_the_exact_plan() -> None:
    # 3 runs of 3 h a night (2100 W flat out) under 1200 W; on the second night an event halves the cap
    event = GridEvent(datetime(2021, 8, 2, 23, tzinfo=UTC), datetime(2021, 8, 3, 3, tzinfo=UTC), site_scope("dc"),
                      reduce_pct=50.0, id="e1")
    res = simulate_site_cap(_policy(1200.0), "dc", _trace(4), MODES, runs=3, events=[event], limit=2, exact=True)
    s = res.summary()
    assert s["nights"] == 2 and s["event_nights"] == 1 and s["event_slots"] == 8
    assert s["slots_over_cap"]["gridshift"] == 0 and s["cap_held_in_every_slot"]
    assert s["slots_over_cap"]["uncapped"] > 0                     # the cap binds: it is below the runs' power
    assert s["exact_feasible_nights"] == 2 and s["misses_where_feasible"] == 0
    assert s["max_power_w"] <= 1200.0 + 1e-6


def test_a_site_without_a_cap_is_one_clear_error() -> None:
    with pytest.raises(PolicyError, match="power_cap_w"):
        simulate_site_cap(_policy(None), "dc", _trace(2), MODES, runs=2)
