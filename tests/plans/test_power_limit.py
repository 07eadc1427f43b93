"""The JIT profiling state machine and the local limit search (no GPU, no clock)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plans.errors import BadProfile
from plans.power_limit import (
    BeginWindow,
    CancelWindow,
    Done,
    EndWindow,
    EpochEnd,
    LimitMeasurement,
    Measured,
    Measuring,
    PowerLimitProfiler,
    Profiling,
    Ready,
    SetLimit,
    StepBegin,
    Warmup,
    combine_ranks,
    local_limit_search,
)
from plans.selectors import Energy, ZeusCost


def run_steps(prof, state, n):
    acts = []
    for _ in range(n):
        state, a = prof.step(state, StepBegin())
        acts.extend(a)
    return state, acts


def test_walks_every_limit_high_to_low_then_selects():
    prof = PowerLimitProfiler([200, 300, 250], Energy(), wait_steps=1, warmup_steps=2, profile_steps=3)
    s = prof.initial()
    assert s == Ready(0, 2)
    s, a = run_steps(prof, s, 2)
    assert a == [SetLimit(300.0)] and isinstance(s, Warmup)
    s, a = run_steps(prof, s, 2)
    assert a == [BeginWindow("gridshift-power-limit-300W")] and isinstance(s, Profiling)
    s, a = run_steps(prof, s, 3)
    assert a == [EndWindow("gridshift-power-limit-300W")] and isinstance(s, Measuring)
    energy = {300.0: 30.0, 250.0: 24.0, 200.0: 27.0}
    s, a = prof.step(s, Measured(time_s=3.0, energy_j=energy[300.0], steps=3))
    assert a == (SetLimit(250.0),) and s == Warmup(1, 2, s.measurements)
    for limit in (250.0, 200.0):
        s, _ = run_steps(prof, s, 2 + 3)
        assert isinstance(s, Measuring)
        s, a = prof.step(s, Measured(time_s=3.3, energy_j=energy[limit], steps=3))
    assert isinstance(s, Done) and s.selected_w == 250.0 and a == (SetLimit(250.0),)
    assert [m.power_limit_w for m in s.measurements] == [300.0, 250.0, 200.0]
    assert s.measurements[0].energy_per_step_j == 10.0 and s.measurements[0].time_per_step_s == 1.0
    assert prof.step(s, StepBegin()) == (s, ())  # terminal


def test_epoch_end_restarts_the_limit_next_epoch():
    prof = PowerLimitProfiler([200, 300], Energy(), wait_steps=0, warmup_steps=1, profile_steps=5)
    s, _ = run_steps(prof, prof.initial(), 2)  # set 300, warm-up done, window open
    assert isinstance(s, Profiling)
    s, a = prof.step(s, EpochEnd())
    assert a == (CancelWindow("gridshift-power-limit-300W"), SetLimit(300.0)) and s == Ready(0, 1)
    s, a = run_steps(prof, s, 1)
    assert a == [SetLimit(300.0)] and isinstance(s, Warmup)  # same limit again
    s, a = prof.step(s, EpochEnd())
    assert a == (SetLimit(300.0),) and isinstance(s, Ready)  # no window was open during warm-up
    assert prof.step(Ready(0, 3), EpochEnd()) == (Ready(0, 3), ())


def test_resume_from_stored_profile_skips_profiling():
    prof = PowerLimitProfiler([200, 300], ZeusCost(0.5))
    ms = (LimitMeasurement(300, 1.0, 300.0), LimitMeasurement(200, 1.2, 220.0))
    done = prof.resume(ms)
    # cost: 300 W -> 0.5*300 + 0.5*300*1.0 = 300; 200 W -> 0.5*220 + 0.5*300*1.2 = 290
    assert isinstance(done, Done) and done.selected_w == 200.0 and done.measurements == ms


def test_bad_inputs():
    with pytest.raises(BadProfile):
        PowerLimitProfiler([], Energy())
    with pytest.raises(ValueError):
        PowerLimitProfiler([100], Energy(), profile_steps=0)
    with pytest.raises(BadProfile):
        LimitMeasurement(100, 0.0, 1.0)
    prof = PowerLimitProfiler([100], Energy())
    with pytest.raises(BadProfile):
        prof.step(prof.initial(), Measured(1.0, 1.0, 1))


def test_combine_ranks_sums_energy_and_maxes_time():
    m = combine_ranks([Measured(2.0, 10.0, 4), Measured(2.5, 12.0, 4)])
    assert m == Measured(2.5, 22.0, 4)
    with pytest.raises(BadProfile):
        combine_ranks([Measured(1, 1, 2), Measured(1, 1, 3)])
    with pytest.raises(BadProfile):
        combine_ranks([])


@settings(deadline=None, max_examples=60)
@given(
    n=st.integers(min_value=1, max_value=12),
    argmin=st.integers(min_value=0, max_value=11),
    slope_lo=st.floats(min_value=0.1, max_value=5.0),
    slope_hi=st.floats(min_value=0.1, max_value=5.0),
    start=st.one_of(st.none(), st.integers(min_value=0, max_value=11)),
)
def test_local_search_finds_the_minimum_of_a_unimodal_cost(n, argmin, slope_lo, slope_hi, start):
    grid = [100 + 25 * i for i in range(n)]
    k = min(argmin, n - 1)

    def cost(p: int) -> float:
        i = grid.index(p)
        return 1000.0 + (slope_lo * (k - i) if i < k else slope_hi * (i - k))

    calls: list[int] = []

    def counted(p: int) -> float:
        calls.append(p)
        return cost(p)

    start_w = None if start is None else grid[min(start, n - 1)]
    assert local_limit_search(grid, counted, start_w=start_w) == grid[k]
    assert len(calls) == len(set(calls)) and len(calls) <= n


def test_local_search_profiles_few_limits_from_a_warm_start():
    grid = [100, 125, 150, 175, 200, 225, 250]
    c = {100: 1899.35, 125: 1655.76, 150: 1617.85, 175: 1593.13, 200: 1604.94, 225: 1642.98, 250: 1666.14}
    seen: list[int] = []
    assert local_limit_search(grid, lambda p: seen.append(p) or c[p], start_w=175) == 175
    assert sorted(seen) == [125, 150, 175, 200, 225]  # two past the best each way
    seen.clear()
    assert local_limit_search(grid, lambda p: seen.append(p) or c[p]) == 175
    assert 100 not in seen  # the slow lowest limit is never paid for


def test_local_search_walks_past_a_bump():
    # real per-epoch costs (Zeus trace, cifar100 b=128 on A40): local minima at 125 and 175 W, best 225 W
    c = {100: 4895.9, 125: 3610.4, 150: 3877.2, 175: 3702.2, 200: 3777.2, 225: 3601.2, 250: 3687.8, 275: 3941.5, 300: 3978.9}
    assert local_limit_search(sorted(c), c.__getitem__, start_w=175) == 225
    assert local_limit_search(sorted(c), c.__getitem__) == 225
