"""The policy hook: a mode may let a selector choose its power limit."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from plans.selectors import MaxSlowdown, ZeusCost, make_selector
from scheduler.policy.types import Mode


def test_mode_with_selector():
    m = Mode(power_limit_select="zeus_cost", eta=0.7)
    sel = make_selector(m.power_limit_select, eta=m.eta)
    assert isinstance(sel, ZeusCost) and sel.eta == 0.7
    m = Mode(power_limit_select="max_slowdown", max_slowdown=0.05)
    sel = make_selector(m.power_limit_select, max_slowdown=m.max_slowdown)
    assert isinstance(sel, MaxSlowdown) and sel.factor == pytest.approx(1.05)
    assert Mode().power_limit_select is None


def test_mode_selector_excludes_a_fixed_limit():
    with pytest.raises(ValidationError, match="power_limit_select"):
        Mode(power_limit_select="energy", power_limit_w=300)
    with pytest.raises(ValidationError):
        Mode(power_limit_select="fastest")


def test_auto_power_limit_profiler_over_the_device_range():
    from backends.simulated import SimulatedBackend
    from scheduler.settings.auto_power import auto_power_limit_profiler

    caps = SimulatedBackend().capabilities()
    prof = auto_power_limit_profiler(Mode(power_limit_select="zeus_cost"), caps, step_w=100)
    assert prof is not None and prof.limits_w == (700.0, 600.0, 500.0, 400.0, 300.0, 200.0)
    assert isinstance(prof.select, ZeusCost)
    assert auto_power_limit_profiler(Mode(power_limit_w=300), caps) is None
