"""Mode figures from a Zeus CSV, a stored profile, the simulator's JSON, or the backend model."""

from __future__ import annotations

from pathlib import Path

import pytest

from plans.power_limit import LimitMeasurement
from plans.profile_store import PowerProfile
from scheduler.errors import PolicyError
from scheduler.mode_figures import figures_for_policy, limit_modes, read_zeus_csv

REPO = Path(__file__).resolve().parents[2]
ZEUS = """start_time,window_name,elapsed_time,gpu0_energy
1,__GlobalPowerLimitOptimizer_250,20.0,5000
2,__GlobalPowerLimitOptimizer_200,22.0,4400
3,__GlobalPowerLimitOptimizer_150,25.0,3900
4,__GlobalPowerLimitOptimizer_100,40.0,4400
"""


@pytest.fixture
def policy():
    from scheduler.policy_io import load_policy

    return load_policy(REPO / "examples" / "nightly.yaml")


def test_zeus_csv_every_useful_limit_is_a_candidate(policy, tmp_path):
    f = tmp_path / "V100+x.csv"
    f.write_text(ZEUS)
    pts, gpus = read_zeus_csv(f)
    assert gpus == 1 and [p.power_limit_w for p in pts] == [250, 200, 150, 100]
    figs = {m.name: m for m in figures_for_policy(policy, profile=f)}
    assert figs["speed"].speed == 1.0 and figs["speed"].power_w == pytest.approx(250.0)
    # efficiency is 0.7 x 250 W = 175 W: between measured limits, so interpolated and not 'measured'
    assert not figs["efficiency"].measured and "interpolated" in figs["efficiency"].source
    assert figs["limit_150w"].speed == pytest.approx(20 / 25) and figs["limit_150w"].measured
    # 100 W is slower than 150 W and needs more energy for the same work: never offered
    assert "limit_100w" not in figs
    assert limit_modes(list(figs.values()))["limit_150w"].power_limit_w == 150


def test_stored_profile_and_mode_json(policy):
    prof = PowerProfile("H200", "abc", (LimitMeasurement(700, 1.0, 690.0), LimitMeasurement(490, 1.2, 560.0)))
    figs = {m.name: m for m in figures_for_policy(policy, profile=prof.to_json(), caps=None)}
    assert figs["speed"].power_w == pytest.approx(690.0) and figs["efficiency"].speed == pytest.approx(1 / 1.2)
    js = {"modes": {"speed": {"power_w": 700, "slowdown": 1.0}, "efficiency": {"power_w": 490, "slowdown": 1.25}}}
    figs = {m.name: m for m in figures_for_policy(policy, profile=js)}
    assert figs["efficiency"].speed == pytest.approx(0.8) and figs["efficiency"].measured


def test_backend_model_is_the_last_resort(policy):
    from backends.simulated import SimulatedBackend

    figs = {m.name: m for m in figures_for_policy(policy, backend=SimulatedBackend())}
    assert figs["speed"].speed == 1.0 and not figs["speed"].measured and "model" in figs["speed"].source
    with pytest.raises(PolicyError):
        figures_for_policy(policy)


def test_bad_zeus_csv_names_the_line(policy, tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("start_time,window_name,elapsed_time,gpu0_energy\n1,__GlobalPowerLimitOptimizer_250,x,5\n")
    with pytest.raises(PolicyError, match=r"bad.csv:2:"):
        figures_for_policy(policy, profile=f)
