"""The batch-size optimiser: priced walks, edge optima far from the default, history fold, concurrency."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plans.batch_size import BatchSizeConfig, BatchSizeOptimizer, Trial
from plans.zeus_trace import GridshiftPolicy, JobInfo, oracle, simulate, synthetic_trace
from scheduler.store.batch_size_history import batch_size_config
from scheduler.policy.types import BatchSizeSearch

SIZES = (8, 16, 32, 64, 128, 256)


def drive(cost_of, *, n=30, seed=0, config=None):
    """Run n recurrences against a noiseless cost curve; returns the sequence of proposals."""
    cfg = config or BatchSizeConfig(SIZES, 64)
    rng = np.random.default_rng(seed)
    history: list[Trial] = []
    seq = []
    for _ in range(n):
        b = BatchSizeOptimizer.from_history(cfg, history).propose(rng).batch_size
        c = cost_of(b)
        history.append(Trial(b, cost=c if c is not None else 1e9, reached=c is not None))
        seq.append(b)
    return seq, history


def test_walks_down_until_worse_then_exploits():
    curve = {8: 3.0, 16: 1.9, 32: 1.0, 64: 1.2, 128: 1.5, 256: None}
    seq, _ = drive(curve.get)
    assert seq[:3] == [64, 32, 16]  # 16 is > 15% worse than 32: the down walk ends there
    assert 8 not in seq  # never walks past a clearly worse size
    assert 256 not in seq  # cheaper size found below the default: no up walk (unimodal)
    assert seq[-10:].count(32) >= 9


def test_walks_up_when_nothing_below_is_cheaper():
    curve = {8: 3.0, 16: 2.0, 32: 1.5, 64: 1.2, 128: 1.0, 256: None}
    seq, _ = drive(curve.get)
    assert seq[:4] == [64, 32, 128, 256]
    assert seq[-10:].count(128) >= 9


def test_same_history_same_state():
    curve = {8: 3.0, 16: 1.9, 32: 1.0, 64: 1.2, 128: 1.5, 256: None}
    _, hist = drive(curve.get, n=12)
    cfg = BatchSizeConfig(SIZES, 64)
    a = BatchSizeOptimizer.from_history(cfg, hist).propose(np.random.default_rng(5))
    b = BatchSizeOptimizer.from_history(cfg, hist).propose(np.random.default_rng(5))
    assert a == b


def test_concurrent_run_does_not_duplicate_exploration():
    cfg = BatchSizeConfig(SIZES, 64)
    hist = [Trial(64, cost=1.0, reached=True)]
    rng = np.random.default_rng(0)
    first = BatchSizeOptimizer.from_history(cfg, hist).propose(rng)
    assert (first.batch_size, first.phase) == (32, "explore")
    second = BatchSizeOptimizer.from_history(cfg, hist + [Trial(32, pending=True)]).propose(rng)
    assert (second.batch_size, second.phase) == (64, "concurrent")


def test_first_run_is_the_default():
    p = BatchSizeOptimizer(BatchSizeConfig(SIZES, 64)).propose(np.random.default_rng(0))
    assert (p.batch_size, p.phase) == (64, "default")


def test_config_validation():
    with pytest.raises(ValueError):
        BatchSizeConfig(SIZES, 7)
    with pytest.raises(ValueError):
        BatchSizeConfig((), 7)
    with pytest.raises(ValueError):
        BatchSizeConfig(SIZES, 64, prior_cv=0)


@settings(deadline=None, max_examples=30)
@given(
    best=st.sampled_from(SIZES[:-1]),
    noise=st.floats(min_value=0.0, max_value=0.08),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_converges_to_the_cheapest_on_a_unimodal_noisy_curve(best, noise, seed):
    rng = np.random.default_rng(seed + 1)
    i_best = SIZES.index(best)

    def cost(b):
        i = SIZES.index(b)
        return (1.0 + 0.4 * abs(i - i_best)) * float(rng.lognormal(0.0, noise))

    seq, _ = drive(cost, n=40, seed=seed)
    assert seq[-10:].count(best) >= 7


# -- the optimum at the edge of the search space, far from the default (issue 21, acceptance 3) -------
@pytest.mark.parametrize("shape, recurrences", [("edge-small", 8), ("edge-large", 8), ("fine-tune", 8)])
def test_finds_an_edge_optimum_far_from_the_default_on_every_seed(shape, recurrences):
    # synthetic traces (plans/zeus_trace/synthetic.py), Zeus's simulator rules: edge-small's cheapest
    # size is the smallest, 8x below the default; edge-large's the largest, 16x above; fine-tune's
    # the smallest, 8x below, with whole epochs and noise
    trace = synthetic_trace(shape)
    info = JobInfo.of(trace, eta=0.5, beta=2.0)
    best = oracle(trace, eta=0.5)[1]
    assert best in (trace.batch_sizes[0], trace.batch_sizes[-1])
    assert abs(math.log2(best / trace.default_b)) >= 3
    for seed in range(10):
        policy = GridshiftPolicy(info, rng=np.random.default_rng([seed, 1]))
        res = simulate(policy, trace, recurrences=50, seed=seed, eta=0.5, beta=2.0)
        first = next(e.recurrence for e in res.entries if e.batch_size == best and e.reached)
        assert first <= recurrences, (shape, seed, first)
        settled = [e.batch_size for e in res.entries if e.reached][-10:]
        assert settled.count(best) >= 9, (shape, seed, settled)


@settings(deadline=None, max_examples=25)
@given(
    edge=st.sampled_from(["low", "high"]),
    bump=st.floats(min_value=0.0, max_value=0.1),
    noise=st.floats(min_value=0.0, max_value=0.03),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_walks_through_dearer_sizes_to_an_edge_optimum(edge, bump, noise, seed):
    # the held-back failure's shape: the sizes between the default and the cheapest (at an edge, 3
    # doublings away) are up to 10 % dearer than the default; a rule that stops at the first worse
    # size, or extrapolates its trend, never gets there. (With 5 % run noise and a 8 % bump some
    # seeds do not walk through: docs/plans.md, "what it does not find".)
    sizes = (8, 16, 32, 64, 128, 256, 512)
    default = 64
    target = 8 if edge == "low" else 512
    rng = np.random.default_rng(seed + 1)

    def cost(b):
        if b == target:
            c = 0.75
        elif b == default:
            c = 1.0
        elif (b < default) == (target < default):
            c = 1.0 + bump
        else:
            c = 1.0 + 0.3 * abs(math.log2(b / default))
        return c * float(rng.lognormal(0.0, noise))

    seq, _ = drive(cost, n=40, seed=seed, config=BatchSizeConfig(sizes, default))
    assert target in seq[:6]
    assert seq[-10:].count(target) >= 8


def test_real_runs_build_exactly_the_optimiser_the_benchmark_measures():
    search = BatchSizeSearch(sizes=(8, 16, 32), default=16, beta=3.0)
    info = JobInfo(batch_sizes=(8, 16, 32), power_limits_w={b: (100, 200) for b in (8, 16, 32)}, default_b=16,
                   max_epochs=10, eta=0.5, beta=3.0, max_power_w=200.0)
    assert GridshiftPolicy(info, rng=np.random.default_rng(0)).bso.config == batch_size_config(search)
    # no early stop in the policy: the walks are priced without a cap
    assert batch_size_config(BatchSizeSearch(sizes=(8, 16), default=16, beta=None)).beta == math.inf
