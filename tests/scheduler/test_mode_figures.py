"""Mode figures from a Zeus CSV, a stored profile, the simulator's JSON, or the backend model."""

from __future__ import annotations

from pathlib import Path

import pytest

from plans.power_limit import LimitMeasurement
from plans.profile_store import PowerProfile
from scheduler.errors import PolicyError
from scheduler.planner.mode_figures import figures_for_policy, limit_modes, read_zeus_csv

REPO = Path(__file__).resolve().parents[2]
ZEUS = """start_time,window_name,elapsed_time,gpu0_energy
1,__GlobalPowerLimitOptimizer_250,20.0,5000
2,__GlobalPowerLimitOptimizer_200,22.0,4400
3,__GlobalPowerLimitOptimizer_150,25.0,3900
4,__GlobalPowerLimitOptimizer_100,40.0,4400
"""


@pytest.fixture
def policy():
    from scheduler.policy.loader import load_policy

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
    # typed by hand: declared, never "measured"
    assert figs["efficiency"].speed == pytest.approx(0.8) and not figs["efficiency"].measured
    assert figs["efficiency"].source == "declared in profile"


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


MODES_JSON = """{
  "modes": {
    "speed": {"power_w": 700, "slowdown": 1.0},
    "efficiency": {"power_w": 490, "slowdown": SLOWDOWN}
  }
}
"""


@pytest.mark.parametrize("slowdown, why", [("NaN", "positive finite number, got nan"), ("Infinity", "got inf"),
                                           ("1e300", "1e.300 is implausible"), ("0", "got 0"), ("-1.2", "got -1.2"),
                                           ('"slow"', "must be a number")])
def test_a_bad_figure_in_a_modes_file_names_its_line(policy, tmp_path, slowdown, why):
    f = tmp_path / "modes.json"
    f.write_text(MODES_JSON.replace("SLOWDOWN", slowdown))
    with pytest.raises(PolicyError, match=rf"^{f}:4: modes.efficiency.slowdown: .*{why}"):
        figures_for_policy(policy, profile=f)


def test_a_bad_power_in_a_modes_file_names_its_line(policy, tmp_path):
    f = tmp_path / "modes.json"
    f.write_text(MODES_JSON.replace("SLOWDOWN", "1.2").replace('"power_w": 700', '"power_w": -700'))
    with pytest.raises(PolicyError, match=rf"^{f}:3: modes.speed.power_w: .*got -700"):
        figures_for_policy(policy, profile=f)


def test_gridshifts_own_modelled_table_stays_modelled(policy):
    table = {"modes": {"speed": {"power_w": 700, "slowdown": 1.0}, "efficiency": {"power_w": 490, "slowdown": 1.2}},
             "modelled": True, "source": "simulated H200 model"}
    figs = {m.name: m for m in figures_for_policy(policy, profile=table)}
    assert figs["efficiency"].source == "simulated H200 model" and not figs["efficiency"].measured


@pytest.mark.parametrize("value", ["nan", "inf", "-5"])
def test_a_non_finite_zeus_row_names_its_line(policy, tmp_path, value):
    f = tmp_path / "bad.csv"
    f.write_text(ZEUS.replace("22.0", value))
    with pytest.raises(PolicyError, match=rf"bad.csv:3: elapsed_time and energy must be positive finite"):
        figures_for_policy(policy, profile=f)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_stored_profile_with_a_non_finite_figure_is_refused(policy, tmp_path, value):
    import json

    data = PowerProfile("H200", "abc", (LimitMeasurement(700, 1.0, 690.0),)).to_json()
    data["measurements"][0]["time_per_step_s"] = value
    f = tmp_path / "stored.json"
    f.write_text(json.dumps(data))
    with pytest.raises(PolicyError, match=rf"^{f}: .*implausible measurement"):
        figures_for_policy(policy, profile=f)
