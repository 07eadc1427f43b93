"""The Zeus trace simulator, the Zeus replica and the benchmark, on synthetic traces in Zeus's CSV format.

tests/data/zeus/ holds synthetic traces (see generate.py there); the cifar100/V100 rows at b = 1024
and b = 64 carry the numbers of the spec's worked examples (zeus-trace-simulator.md section 13).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from plans.errors import BadTraceFile, SimulationAborted
from plans.zeus_trace import (
    JobInfo,
    RunObservation,
    ZeusReplica,
    charge_run,
    default_cost,
    jit_power_limit,
    load_trace_job,
    oracle,
    run_pair,
    simulate,
)

DATA = Path(__file__).parent.parent / "data" / "zeus"
TRAIN = DATA / "summary_train.csv"
V100 = DATA / "summary_power_v100.csv"
A40 = DATA / "summary_power_a40.csv"
WORKLOADS = ("cifar100", "imagenet", "squad", "librispeech", "movielens-1m", "sentiment140")


@pytest.fixture(scope="module")
def cifar():
    return load_trace_job(TRAIN, V100, "cifar100")


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# -- section 2: join ------------------------------------------------------------------------------
def test_join_gives_maxpower_b_and_default(cifar):
    assert cifar.gpu == "v100"
    assert cifar.max_power_w == 250.0
    assert cifar.batch_sizes == (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    assert cifar.default_b == 1024
    assert cifar.power_limits_w[1024] == (100, 125, 150, 175, 200, 225, 250)
    assert load_trace_job(TRAIN, A40, "cifar100").max_power_w == 300.0
    # exact-equality match on the target: only the 0.6 rows, in file order (runs 1, 10, 2, ..., 9)
    assert cifar.target_epochs[1024] == (74, 71, 80, 71, 70, 80, 77, 97, 77, 90)


def test_join_is_an_intersection(tmp_path):
    rows = list(csv.reader(V100.open()))
    kept = [rows[0]] + [r for r in rows[1:] if not (r[0] == "cifar100" and r[2] == "8")]
    power = tmp_path / "summary_power_v100.csv"
    with power.open("w", newline="") as fh:
        csv.writer(fh).writerows(kept)
    assert 8 not in load_trace_job(TRAIN, power, "cifar100").batch_sizes


def test_bad_traces_are_typed_errors(tmp_path):
    with pytest.raises(BadTraceFile, match="unknown workload"):
        load_trace_job(TRAIN, V100, "mnist")
    with pytest.raises(BadTraceFile, match="cannot read"):
        load_trace_job(tmp_path / "nope.csv", V100, "cifar100")
    bad = tmp_path / "bad.csv"
    bad.write_text("dataset,network\ncifar100,shufflenetv2\n")
    with pytest.raises(BadTraceFile, match="missing column"):
        load_trace_job(bad, V100, "cifar100")


# -- section 13: worked examples -----------------------------------------------------------------
def test_worked_example_jit_choice(cifar):
    prof = {p: (cifar.time_per_epoch_s[1024][p], cifar.avg_power_w[1024][p]) for p in cifar.power_limits_w[1024]}
    assert jit_power_limit(prof, eta=0.5) == 175
    c = {p: (0.5 * w + 0.5 * 250) * t for p, (t, w) in prof.items()}
    assert round(c[175], 2) == 1593.13 and round(c[200], 2) == 1604.94 and round(c[100], 2) == 1899.35


def test_worked_example_1_profiled_reached(cifar):
    ch = charge_run(cifar, 1024, 175, target_epoch=77.0, cost_bound=math.inf, profiled_limits_w=cifar.power_limits_w[1024], eta=0.5)
    e_bar = sum(cifar.energy_per_epoch_j(1024, p) for p in cifar.power_limits_w[1024]) / 7
    t_bar = sum(cifar.time_per_epoch_s[1024][p] for p in cifar.power_limits_w[1024]) / 7
    e = e_bar + 76 * cifar.energy_per_epoch_j(1024, 175)
    t = t_bar + 76 * cifar.time_per_epoch_s[1024][175]
    assert ch.reached and ch.epochs == 77
    assert rel(ch.energy_j, e) < 1e-12 and rel(ch.time_s, t) < 1e-12
    assert rel(ch.cost, 0.5 * e + 0.5 * 250 * t) < 1e-12
    # the spec's printed figures, to their printed precision
    assert round(t_bar, 6) == 8.618095 and abs(e_bar - 1182.6627) < 1e-4
    assert abs(ch.energy_j - 87284.50) < 0.01 and abs(ch.time_s - 632.831) < 1e-3
    assert abs(ch.cost - 122746.18) < 0.01


def test_worked_example_2_early_stopped(cifar):
    bound = 2 * 51056.24
    ch = charge_run(cifar, 64, 100, target_epoch=19.0, cost_bound=bound, profiled_limits_w=cifar.power_limits_w[64], eta=0.5)
    c_ep = 0.5 * cifar.energy_per_epoch_j(64, 100) + 125 * cifar.time_per_epoch_s[64][100]
    assert abs(c_ep - 5391.52) < 0.01 and math.floor(bound / c_ep) == 18
    assert not ch.reached and ch.epochs == 18
    e_bar = sum(cifar.energy_per_epoch_j(64, p) for p in cifar.power_limits_w[64]) / 7
    t_bar = sum(cifar.time_per_epoch_s[64][p] for p in cifar.power_limits_w[64]) / 7
    e = e_bar + 17 * cifar.energy_per_epoch_j(64, 100)
    t = t_bar + 17 * cifar.time_per_epoch_s[64][100]
    assert rel(ch.energy_j, e) < 1e-12 and rel(ch.time_s, t) < 1e-12
    assert abs(ch.energy_j - 47426.41) < 0.01 and abs(ch.time_s - 587.910) < 1e-3
    assert abs(ch.cost - 97201.90) < 0.02
    # a profiled run can end slightly above the bound (the surcharge is not in c_ep)
    assert ch.cost < bound


def test_never_ran_and_unprofiled(cifar):
    ch = charge_run(cifar, 64, 100, target_epoch=19.0, cost_bound=100.0, profiled_limits_w=(), eta=0.5)
    assert ch.never_ran and ch.cost == 0 and ch.energy_j == 0
    ch = charge_run(cifar, 1024, 250, target_epoch=None, cost_bound=math.inf, profiled_limits_w=(), eta=0.5)
    assert not ch.reached and ch.epochs == 100  # an empty target_epoch is charged all max_epochs
    assert rel(ch.energy_j, 100 * cifar.energy_per_epoch_j(1024, 250)) < 1e-12


def test_worked_example_2_walk_ends_at_128(cifar):
    """A miss while walking down ends the direction: the replica goes up next."""
    info = JobInfo.of(cifar, eta=0.5, beta=2.0)
    z = ZeusReplica(info, seed=0)

    def obs(b, cost, reached):
        return RunObservation(b, 100, 1.0, 1.0, cost, reached, 10.0, False, False, math.inf)

    seq = []
    for b, cost, reached in [(1024, 122746.18, True), (512, 90000.0, True), (256, 60000.0, True), (128, 51056.24, True), (64, 97201.90, False)]:
        assert z.propose() == b
        seq.append(b)
        z.observe(obs(b, cost, reached))
    assert z.propose() == 2048  # down walk ended at 128; Up starts
    z.observe(obs(2048, 1e6, False))
    # round 2 over the survivors, from round 1's cheapest size (128): down first
    assert z.propose() == 128


# -- section 8: the loop -------------------------------------------------------------------------
def test_replica_recurrence_one_is_default_profiled(cifar):
    res = simulate(ZeusReplica(JobInfo.of(cifar, eta=0.5, beta=2.0), seed=3), cifar, recurrences=3, seed=3, eta=0.5, beta=2.0)
    first = res.entries[0]
    assert (first.batch_size, first.power_limit_w, first.reached) == (1024, 175, True)
    assert len(res.recurrence_costs) == 3
    assert abs(sum(res.recurrence_costs) - res.cumulative_cost) < 1e-6 * res.cumulative_cost


def test_fatal_case_surfaces(cifar):
    class Stubborn(ZeusReplica):
        def propose(self) -> int:
            return 4096  # never reaches the target

    with pytest.raises(SimulationAborted, match="default batch size did not converge"):
        simulate(Stubborn(JobInfo.of(cifar, eta=0.5, beta=2.0), seed=0), cifar, recurrences=2, seed=0, eta=0.5, beta=2.0)


def test_simulation_is_deterministic(cifar):
    a, b = run_pair(cifar, recurrences=20, seed=1, eta=0.5, beta=2.0)
    c, d = run_pair(cifar, recurrences=20, seed=1, eta=0.5, beta=2.0)
    assert a.entries == c.entries and b.entries == d.entries


def test_oracle_and_default(cifar):
    cost, b, p = oracle(cifar, eta=0.5)
    assert cost <= default_cost(cifar, eta=0.5)
    assert b in cifar.batch_sizes and p in cifar.power_limits_w[b]
    exp = np.mean([t for t in cifar.target_epochs[1024] if t is not None and t <= 100])
    assert rel(default_cost(cifar, eta=0.5), exp * (0.5 * cifar.energy_per_epoch_j(1024, 250) + 125 * cifar.time_per_epoch_s[1024][250])) < 1e-12


# -- self-check on SYNTHETIC traces (nothing is tuned on them; the real-trace figures are in
# test_zeus_real_traces.py) -------------------------------------------------------------------------
@pytest.mark.parametrize("power", [V100, A40], ids=["v100", "a40"])
def test_synthetic_self_check_gridshift_beats_the_replica(power):
    ratios = []
    for w in WORKLOADS:
        trace = load_trace_job(TRAIN, power, w)
        ours, zeus = [], []
        for seed in range(5):
            g, z = run_pair(trace, recurrences=50, seed=seed, eta=0.5, beta=2.0)
            ours.append(g.cumulative_cost)
            zeus.append(z.cumulative_cost)
        o = 50 * oracle(trace, eta=0.5)[0]
        assert np.mean(ours) < np.mean(zeus), w
        ratios.append((np.mean(ours) / o, np.mean(zeus) / o))
    g_gap, z_gap = np.mean(ratios, axis=0) - 1.0
    assert g_gap < 0.6 * z_gap  # clearly closer to the oracle on average
