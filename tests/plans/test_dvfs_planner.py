"""The clock planner against exact oracles (brute force, Pareto DP, HiGHS MILP), plus its properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plans.dvfs import oracle
from plans.dvfs.errors import PlanInputError
from plans.dvfs.model import build_tables
from plans.dvfs import evaluate_assignment
from plans.dvfs.planner import phase_boundaries, plan_dvfs, solve_arrays
from plans.dvfs.profiles.synthetic import gpt3xl_layer_profile

SETTINGS = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def instances(draw, max_n: int = 6, max_m: int = 4):
    """Random small instances from the section-5 model family: option 0 is the fastest clock."""
    n = draw(st.integers(2, max_n))
    m = draw(st.integers(2, max_m))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.55, 1.0, m))[::-1]
    x[0] = 1.0
    t0 = rng.uniform(10e-6, 1000e-6, n)
    beta = rng.uniform(0.0, 1.0, n)
    t = t0[:, None] * (beta[:, None] / x[None, :] + (1 - beta[:, None]))
    dyn = rng.uniform(100, 600, n)
    p = 120 + dyn[:, None] * (0.3 * x + 0.7 * x**3)[None, :]
    e = t * p
    eps = draw(st.sampled_from([0.0, 0.01, 0.03, 0.1, 0.3]))
    tau = draw(st.sampled_from([0.0, 5e-6, 30e-6, 200e-6]))
    esw = tau * 120
    mask = rng.random(n) < draw(st.sampled_from([0.5, 1.0]))
    return t, e, eps, tau, esw, mask


def _energy(t, e, a, tau, esw):
    return evaluate_assignment(t, e, a, tau_sw_s=tau, eps_sw_j=esw)


@SETTINGS
@given(instances())
def test_planner_matches_brute_force_within_0_1_percent(inst) -> None:
    t, e, eps, tau, esw, mask = inst
    budget = oracle.budget_for(t, 0, eps)
    best, _ = oracle.brute_force(t, e, budget, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask)
    a, status, lower, _, _ = solve_arrays(t, e, 0, epsilon=eps, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask)
    E, T, _ = _energy(t, e, a, tau, esw)
    assert T <= budget * (1 + 1e-9)
    assert best * (1 - 1e-9) <= E <= best * 1.001
    assert lower <= best * (1 + 1e-9)
    switches = np.flatnonzero(np.diff(a)) + 1
    assert mask[switches].all()


@settings(deadline=None, max_examples=15)
@given(instances(max_n=8, max_m=4))
def test_oracles_agree_pareto_milp_brute(inst) -> None:
    t, e, eps, tau, esw, mask = inst
    budget = oracle.budget_for(t, 0, eps)
    bf = oracle.brute_force(t, e, budget, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask, limit=70_000)[0]
    pd = oracle.pareto_dp(t, e, budget, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask)[0]
    mi = oracle.milp(t, e, budget, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask)[0]
    assert pd == pytest.approx(bf, rel=1e-9)
    assert mi == pytest.approx(bf, rel=1e-6)


@SETTINGS
@given(instances())
def test_lagrangian_path_is_feasible_never_beats_the_oracle_and_bounds_it(inst) -> None:
    t, e, eps, tau, esw, mask = inst
    budget = oracle.budget_for(t, 0, eps)
    best, _ = oracle.brute_force(t, e, budget, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask)
    a, _, lower, _, used = solve_arrays(t, e, 0, epsilon=eps, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask, method="lagrangian")
    E, T, _ = _energy(t, e, a, tau, esw)
    assert T <= budget * (1 + 1e-9)
    assert E >= best * (1 - 1e-9)
    assert lower <= best * (1 + 1e-9)


@SETTINGS
@given(instances(), st.floats(0.0, 0.2), st.floats(0.0, 0.2))
def test_energy_is_non_increasing_in_epsilon(inst, eps_a, eps_b) -> None:
    t, e, _, tau, esw, mask = inst
    lo, hi = sorted((eps_a, eps_b))
    a_lo = solve_arrays(t, e, 0, epsilon=lo, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask)[0]
    a_hi = solve_arrays(t, e, 0, epsilon=hi, tau_sw_s=tau, eps_sw_j=esw, boundaries=mask)[0]
    assert _energy(t, e, a_hi, tau, esw)[0] <= _energy(t, e, a_lo, tau, esw)[0] * (1 + 1e-12)


@settings(deadline=None, max_examples=15)
@given(instances(max_n=6, max_m=4), st.integers(0, 2**31 - 1))
def test_zero_switch_cost_is_the_multiple_choice_knapsack_optimum(inst, seed) -> None:
    t, e, eps, _, _, _ = inst
    # the same family at a larger size as well: MCKP optimum from the MILP without switch costs
    rng = np.random.default_rng(seed)
    big_t = np.concatenate([t] * 6) * rng.uniform(0.9, 1.1, (6 * len(t), 1))
    big_e = np.concatenate([e] * 6)
    for tt, ee in ((t, e), (big_t, big_e)):
        budget = oracle.budget_for(tt, 0, eps)
        mckp = oracle.milp(tt, ee, budget)[0]
        a = solve_arrays(tt, ee, 0, epsilon=eps, tau_sw_s=0.0, eps_sw_j=0.0)[0]
        assert _energy(tt, ee, a, 0.0, 0.0)[0] == pytest.approx(mckp, rel=1e-3)
        assert _energy(tt, ee, a, 0.0, 0.0)[0] >= mckp * (1 - 1e-6)


@SETTINGS
@given(instances())
def test_infinite_switch_cost_gives_the_best_single_static_clock(inst) -> None:
    t, e, eps, _, _, _ = inst
    budget = oracle.budget_for(t, 0, eps)
    a = solve_arrays(t, e, 0, epsilon=eps, tau_sw_s=float("inf"), eps_sw_j=0.0)[0]
    assert len(set(a.tolist())) == 1
    fits = t.sum(axis=0) <= budget * (1 + 1e-12)
    assert e.sum(axis=0)[a[0]] == pytest.approx(e.sum(axis=0)[fits].min())


@settings(deadline=None, max_examples=25)
@given(instances(max_n=6, max_m=3), st.floats(0.0, 2e-3))
def test_minimum_segment_duration_is_respected(inst, dmin) -> None:
    t, e, eps, tau, esw, mask = inst
    budget = oracle.budget_for(t, 0, eps)
    best, _ = oracle.brute_force(t, e, budget, tau_sw_s=tau, eps_sw_j=esw, d_min_s=dmin, boundaries=mask)
    a, _, lower, _, _ = solve_arrays(t, e, 0, epsilon=eps, tau_sw_s=tau, eps_sw_j=esw, d_min_s=dmin, boundaries=mask)
    E, T, S = _energy(t, e, a, tau, esw)
    assert T <= budget * (1 + 1e-9) and E >= best * (1 - 1e-9) and lower <= best * (1 + 1e-9)
    if S:
        starts = np.concatenate(([0], np.flatnonzero(np.diff(a)) + 1))
        seg = np.add.reduceat(t[np.arange(len(a)), a], starts)
        assert np.all(seg >= dmin * (1 - 1e-9))


def test_zero_budget_slack_with_only_the_default_feasible_keeps_the_default() -> None:
    t = np.array([[1.0, 2.0], [1.0, 3.0]]) * 1e-4
    e = np.array([[5.0, 1.0], [5.0, 1.0]])
    a, status, *_ = solve_arrays(t, e, 0, epsilon=0.0, tau_sw_s=0.0)
    assert a.tolist() == [0, 0] and status == 2


def test_synthetic_profile_plans() -> None:
    tables = build_tables(gpt3xl_layer_profile())
    per_kernel = plan_dvfs(tables, epsilon=0.02, tau_sw_s=0.0, d_min_s=0.0)
    with_cost = plan_dvfs(tables, epsilon=0.02, tau_sw_s=5e-3)
    static = plan_dvfs(tables, epsilon=0.02, tau_sw_s=float("inf"))
    assert per_kernel.success and with_cost.success and static.success
    assert per_kernel.energy_j <= with_cost.energy_j * (1 + 1e-12) <= static.energy_j * (1 + 1e-12)
    assert per_kernel.switches > 0 and static.switches == 0 and static.static_clock_mhz is not None
    assert with_cost.slowdown_pct <= 2.0 + 1e-9 and with_cost.modelled
    # 24 layers x all 110 clocks runs through the Lagrangian path (its speed is a benchmark, not a test)
    big = plan_dvfs(tables.stack_layers(24), epsilon=0.02, tau_sw_s=5e-3, clock_floor_mhz=0)
    assert big.success and big.method == "lagrangian" and big.gap < 0.01


def test_phase_boundaries_are_respected() -> None:
    tables = build_tables(gpt3xl_layer_profile())
    res = plan_dvfs(tables, epsilon=0.05, tau_sw_s=0.0, d_min_s=0.0, boundaries="phase")
    mask = phase_boundaries(tables.phases)
    for seg in res.segments[1:]:
        assert mask[seg.start_item]
    assert phase_boundaries(["a.f.x", "a.f.y", "a.b.x"], level=2).tolist() == [False, False, True]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilon=-0.1), "epsilon"),
        (dict(epsilon=0.1, tau_sw_s=-1.0), "tau_sw_s"),
        (dict(epsilon=0.1, d_min_s=float("nan")), "d_min_s"),
        (dict(epsilon=0.1, method="magic"), "method"),
        (dict(epsilon=0.1, boundaries=np.ones(3, dtype=bool)), "one flag per item"),
        (dict(epsilon=0.1, method="exact", d_min_s=1.0), "exact"),
    ],
)
def test_input_validation(kwargs, match) -> None:
    t = np.ones((2, 2))
    with pytest.raises(PlanInputError, match=match):
        solve_arrays(t, t, 0, **kwargs)
    with pytest.raises(PlanInputError, match="positive"):
        solve_arrays(-t, t, 0, epsilon=0.1)
    with pytest.raises(PlanInputError, match="default option"):
        solve_arrays(t, t, 5, epsilon=0.1)
