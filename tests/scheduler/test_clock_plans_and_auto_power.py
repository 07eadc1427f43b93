"""Clock plans named by modes (loaded and checked before a job starts) and the pure power-limit choice
for ``power_limit_select`` modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.simulated import SimulatedBackend
from backends.types import Capabilities, DeviceInfo
from plans.power_limit import LimitMeasurement
from plans.profile_store import PowerProfile, ProfileStore
from scheduler.settings.auto_power import choose_power_limit, job_fingerprint, profiles_dir
from scheduler.settings.clock_plans import load_clock_plans
from scheduler.errors import PolicyError
from scheduler.policy.types import Mode
from scheduler.policy.loader import load_policy
from tests.fakes.clock_plans import make_plan, write_plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"


def _policy_file(tmp_path: Path, efficiency: str) -> Path:
    text = EXAMPLE.read_text().replace("    power_limit_fraction: 0.6\n", efficiency)
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    (tmp_path / "train_tiny.py").write_bytes((EXAMPLE.parent / "train_tiny.py").read_bytes())  # the job beside its policy
    return p


def _h200(measured: bool = True) -> Capabilities:
    return Capabilities(backend="nvidia", devices=(DeviceInfo(0, "NVIDIA H200"),), power_limit_range_w=(200.0, 700.0),
                        default_power_limit_w=700.0, sm_clocks_mhz=tuple(range(1980, 344, -15)), measured=measured)


# -- clock plans ---------------------------------------------------------------------------------
def test_a_mode_plan_loads_relative_to_the_policy_and_describes_its_modelled_saving(tmp_path: Path) -> None:
    (tmp_path / "plans").mkdir()
    write_plan(tmp_path / "plans" / "eff.json", make_plan([1980, 1410, 1200], energy_change_pct=-7.5, time_change_pct=1.2))
    path = _policy_file(tmp_path, "    clock_plan: plans/eff.json\n")
    policy = load_policy(path)
    plans = load_clock_plans(policy, path, _h200())
    assert list(plans) == ["efficiency"]
    mp = plans["efficiency"]
    assert mp.path == (tmp_path / "plans" / "eff.json").resolve()
    summary = mp.to_json()
    assert summary["predicted_energy_saving_pct"] == pytest.approx(7.5) and summary["predicted_slowdown_pct"] == 1.2
    assert summary["modelled"] is True and "ClockPlanRunner" in summary["executed_by"]
    assert "modelled: energy -7.5%" in mp.describe()
    # a simulated device stands in for any GPU model; its clock table still applies
    assert load_clock_plans(policy, path, SimulatedBackend().capabilities())["efficiency"].plan == mp.plan


@pytest.mark.parametrize("content, caps, fragment", [
    (None, None, "no such clock plan file"),
    ("{oops", None, "not JSON"),
    (make_plan([1980, 1410]).model_dump_json(), Capabilities(backend="nvidia", devices=(DeviceInfo(0, "NVIDIA A100"),)),
     "this GPU is 'NVIDIA A100'"),
    (make_plan([1980, 1411]).model_dump_json(), None, None),
    (make_plan([1980, 1411]).model_dump_json(), "h200", "not supported by this GPU"),
])
def test_a_bad_plan_is_a_policy_error_naming_the_file(tmp_path: Path, content, caps, fragment) -> None:
    plan_path = tmp_path / "bad.json"
    if content is not None:
        plan_path.write_text(content)
    path = _policy_file(tmp_path, "    clock_plan: bad.json\n")
    caps = _h200() if caps == "h200" else caps
    if fragment is None:
        assert load_clock_plans(load_policy(path), path, caps)
        return
    with pytest.raises(PolicyError) as err:
        load_clock_plans(load_policy(path), path, caps)
    msg = str(err.value)
    # a file that cannot be a plan at all is found by load_policy (at the policy's line); a plan the
    # device cannot run, by load_clock_plans against the device
    assert (msg.startswith(f"{plan_path}:") or msg.startswith(f"{path}:")) and str(plan_path) in msg
    assert fragment in msg and "'efficiency'" in msg


# -- power_limit_select --------------------------------------------------------------------------
# time/energy per step: lower limits are slower but (down to 400 W) cheaper, as Zeus profiles look
PROFILE = PowerProfile(gpu_model="NVIDIA H200", fingerprint="fp", measurements=(
    LimitMeasurement(700.0, 1.00, 600.0),
    LimitMeasurement(600.0, 1.02, 560.0),
    LimitMeasurement(500.0, 1.08, 520.0),
    LimitMeasurement(400.0, 1.25, 500.0),
    LimitMeasurement(300.0, 1.70, 540.0),
))


def test_the_selector_picks_from_a_stored_profile() -> None:
    assert choose_power_limit(Mode(power_limit_select="energy"), _h200(), PROFILE, 300.0).power_limit_w == 400.0
    assert choose_power_limit(Mode(power_limit_select="time"), _h200(), PROFILE, 300.0).power_limit_w == 700.0
    choice = choose_power_limit(Mode(power_limit_select="max_slowdown", max_slowdown=0.1), _h200(), PROFILE, None)
    assert choice.power_limit_w == 500.0 and choice.warning == ""
    assert "max_slowdown selector" in choice.reason and "measured profile of 5 limits" in choice.reason


def test_the_carbon_selector_uses_the_current_intensity() -> None:
    mode = Mode(power_limit_select="carbon", eta=0.5)
    clean = choose_power_limit(mode, _h200(), PROFILE, 20.0, max_ci_g_per_kwh=800.0)
    dirty = choose_power_limit(mode, _h200(), PROFILE, 800.0, max_ci_g_per_kwh=800.0)
    assert clean.power_limit_w > dirty.power_limit_w
    assert "carbon selector at 800 g/kWh" in dirty.reason


def test_profile_limits_outside_the_device_range_are_ignored() -> None:
    caps = Capabilities(backend="nvidia", devices=(DeviceInfo(0, "NVIDIA H200"),), power_limit_range_w=(450.0, 700.0),
                        default_power_limit_w=700.0)
    assert choose_power_limit(Mode(power_limit_select="energy"), caps, PROFILE, None).power_limit_w == 500.0


def test_without_a_profile_the_device_default_and_one_warning_saying_how_to_profile() -> None:
    choice = choose_power_limit(Mode(power_limit_select="energy"), _h200(), None, 300.0, fingerprint="abc123")
    assert choice.power_limit_w == 700.0
    assert "\n" not in choice.warning
    for fragment in ("no stored power-limit profile", "NVIDIA H200", "abc123", "device default (700 W)",
                     "plans.integrations.power_limit.PowerLimitCallback", "GRIDSHIFT_PROFILE_DIR", "GRIDSHIFT_WORKLOAD_FINGERPRINT"):
        assert fragment in choice.warning
    with pytest.raises(ValueError):
        choose_power_limit(Mode(power_limit_w=300.0), _h200(), PROFILE, None)


def test_fingerprint_and_store_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDSHIFT_HOME", str(tmp_path))
    assert profiles_dir() == tmp_path / "profiles"
    fp = job_fingerprint("nightly", ("python", "train.py"))
    assert fp == job_fingerprint("nightly", ["python", "train.py"]) != job_fingerprint("nightly", ["python", "x.py"])
    store = ProfileStore(profiles_dir())
    store.save(PowerProfile(gpu_model="NVIDIA H200", fingerprint=fp, measurements=PROFILE.measurements))
    assert store.load("NVIDIA H200", fp) is not None
