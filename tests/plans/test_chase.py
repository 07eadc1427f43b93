"""Chase-style replay: carbon-aware limits cut carbon against the fixed maximum at a bounded slowdown."""

from __future__ import annotations

from datetime import timedelta

import pytest

from carbon.providers.trace import load_sample_trace
from plans.carbon_replay import fixed_limit, modelled_profile, replay
from plans.power_limit import LimitMeasurement
from plans.selectors import CarbonAware

# the real V100 cifar100/ShuffleNetV2 b=1024 profile shape from the Zeus traces (spec section 13), per epoch
T = [11.276667, 9.216667, 8.493333, 8.213333, 7.843333, 7.670000, 7.613333]
E = [979.535, 1007.345, 1112.38, 1132.9189, 1249.05, 1368.46, 1428.95]
V100 = tuple(LimitMeasurement(p, t, e) for p, t, e in zip(range(100, 251, 25), T, E))


def test_carbon_aware_cuts_carbon_at_bounded_slowdown():
    series = load_sample_trace()
    steps = 40 * 3600 / V100[-1].time_per_step_s
    base = replay(V100, series, steps=steps, choose=fixed_limit(250))
    sel = CarbonAware(0.5, max_ci_g_per_kwh=max(series.values()), hysteresis=0.02, min_dwell_s=1800, max_slowdown=1.05)
    ours = replay(V100, series, steps=steps, choose=sel)
    cut = 1 - ours.carbon_g / base.carbon_g
    slowdown = ours.duration_s / base.duration_s - 1
    print(f"fixed max {base.carbon_g:.0f} g, carbon-aware {ours.carbon_g:.0f} g: cut {cut:.1%}, slowdown {slowdown:.1%}")
    assert cut > 0.10
    assert 0 <= slowdown <= 0.05


def test_switches_follow_the_signal():
    """On a step signal, the selector caps the GPU while dirty and frees it while clean."""
    from carbon.series import IntensityPoint, IntensitySeries

    start = load_sample_trace().start
    pts = [IntensityPoint(start + timedelta(hours=i), timedelta(hours=1), 100.0 if (i // 6) % 2 == 0 else 900.0) for i in range(48)]
    series = IntensitySeries.of(pts)
    sel = CarbonAware(0.5, max_ci_g_per_kwh=900.0, hysteresis=0.02, min_dwell_s=3600)
    res = replay(V100, series, steps=20 * 3600 / 7.6, choose=sel, interval_s=1800)
    assert res.switches >= 2
    assert max(res.limits_w) == 250 and min(res.limits_w) < 250


def test_modelled_h200_profile_shape():
    prof = modelled_profile()
    assert prof[0].power_limit_w == 700 and prof[-1].power_limit_w == 200
    assert all(a.time_per_step_s <= b.time_per_step_s for a, b in zip(prof, prof[1:]))
    with pytest.raises(ValueError):
        replay(prof, load_sample_trace(), steps=0, choose=fixed_limit(700))
