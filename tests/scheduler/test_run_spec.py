"""The run as data (scheduler.run_spec), the deciders' one plan type, and the do-no-harm start gate."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.planner.deciders import ThresholdDecider, make_decider
from scheduler.planner.thresholds import ModeState, decide
from scheduler.policy.loader import load_policy, parse_policy
from scheduler.run_spec import resolve_run

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)

THRESHOLD_POLICY = """
schema_version: 1
carbon: {provider: static, options: {g_per_kwh: 300}}
modes:
  speed: {power_limit_fraction: 1.0}
  efficiency: {power_limit_fraction: 0.6, max_slowdown: 0.25}
rules: {kind: absolute, clean_below_g_per_kwh: 200, dirty_above_g_per_kwh: 400, min_dwell_s: 600, interval_s: 300}
job: {name: t, command: [python, train_tiny.py], expected_duration_s: 3600, deadline_s: 7200, checkpointable: true}
"""


def _series(values: list[float]) -> IntensitySeries:
    return IntensitySeries(zone="Z", points=tuple(
        IntensityPoint(start=T0 + timedelta(minutes=5 * k), duration=timedelta(minutes=5), g_per_kwh=v, kind="average",
                       source="test") for k, v in enumerate(values)))


def test_the_spec_answers_where_the_job_runs_and_whether_it_may_pause() -> None:
    path = REPO / "examples" / "policy.yaml"
    own = resolve_run(load_policy(path), policy_path=path)
    assert own.job.argv == ("python", "train_tiny.py", "--epochs", "20") and own.job.cwd == path.absolute().parent
    assert own.planned and own.constraints is not None and own.backend_name == "auto"
    given = resolve_run(load_policy(path), policy_path=path, command=["python", "other.py"], backend_name="simulated")
    # a command after `--` runs in the current folder (job.workdir unset), under the --backend override
    assert given.job.argv == ("python", "other.py") and given.job.cwd is None and given.backend_name == "simulated"
    assert given.job.fingerprint != own.job.fingerprint
    threshold = resolve_run(parse_policy(THRESHOLD_POLICY, base_dir=REPO / "examples"))
    assert not threshold.planned and threshold.constraints is None and threshold.job.pausable


def test_threshold_rules_answer_with_an_open_ended_plan_of_decide_s_choice() -> None:
    policy = parse_policy(THRESHOLD_POLICY, base_dir=REPO / "examples")
    series = _series([500.0] * 6 + [100.0] * 30)
    decider = make_decider(resolve_run(policy), [], deadline=T0 + timedelta(hours=2), pausable=False)
    assert isinstance(decider, ThresholdDecider) and not decider.planned
    first = decider.decide(T0, series, running=None, since=None, started_before=False)
    want = decide(policy, series, now=T0, remaining_work_s=3600, deadline=T0 + timedelta(hours=2) - timedelta(seconds=300))
    assert [s.mode for s in first.segments] == [want.mode] == ["efficiency"] and first.reason == want.reason
    assert first.mode_at(T0 + timedelta(days=365)) == "efficiency"  # held until the loop re-decides
    # clean from 30 min on, but the dwell of 600 s counts from the decision that switched
    decider.advance("efficiency", 300.0, None)
    at = T0 + timedelta(minutes=5)
    kept = decider.decide(at, series, running="efficiency", since=T0, started_before=False)
    assert kept.segments[0].mode == "efficiency"
    later = T0 + timedelta(minutes=30)
    switched = decider.decide(later, series, running="efficiency", since=T0, started_before=False)
    expect = decide(policy, series, ModeState("efficiency", T0), now=later, remaining_work_s=decider.remaining_s,
                    deadline=T0 + timedelta(hours=2) - timedelta(seconds=300), slowdown=decider.factors)
    assert switched.segments[0].mode == expect.mode == "speed"


def test_a_closed_gate_keeps_the_cron_start_and_says_why() -> None:
    from scheduler.planner.inputs import plan_start
    from scheduler.policy.loader import load_policy

    policy = load_policy(Path(__file__).resolve().parents[2] / "examples" / "nightly.yaml")
    nominal = T0 + timedelta(hours=4)
    kept = plan_start(policy, IntensitySeries.of([]), nominal=nominal, now=T0, static="no record yet")
    assert kept.start_at == nominal and kept.mode == "speed" and kept.plan is None
    assert "cron start is kept: no record yet" in kept.reason

