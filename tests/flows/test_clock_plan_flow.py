"""A clock plan through a real run: gridshift hands examples/train_torch.py the speed mode's plan,
switches to the efficiency mode mid-run, the job swaps plans (dry run: GRIDSHIFT_NVML_READ_ONLY=1)
and reports the switches, and each span says what the job confirmed. Needs torch (tests/requires.py).

The job is a real subprocess; the control loop's clock is injected as in test_mode_file.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from backends.simulated import SimulatedBackend
from carbon.monitor import CarbonMonitor, SourceSpec
from carbon.providers.trace import TraceProvider
from flows.job.process import start_command
from flows.job.mode_file import ModeFileChannel
from flows.supervise import supervise
from plans.dvfs.plan_file import load_plan
from scheduler.settings.clock_plans import ModePlan
from scheduler.planner.thresholds import decide
from scheduler.policy.types import Policy
from scheduler.run_spec import resolve_run
from tests.fakes.clock_plans import make_plan, write_plan
from tests.flows.test_mode_file import InjectedTimeJob, _signal
from tests.flows.test_supervise_timeline import FakeClock
from tests.requires import need

REPO = Path(__file__).resolve().parents[2]
PHASES = ("forward", "backward", "optimizer")


@pytest.mark.slow  # a torch subprocess: its import alone takes seconds on a loaded 2-core machine
def test_the_job_runs_each_modes_plan_and_the_spans_confirm_it(tmp_path: Path) -> None:
    need("torch")
    plans = {"speed": write_plan(tmp_path / "fast.json", make_plan((1980, 1410, 1980), phases=PHASES)),
             "efficiency": write_plan(tmp_path / "slow.json", make_plan((1410, 1200, 1410), phases=PHASES))}
    policy = Policy.model_validate({
        "carbon": {"provider": "trace"},
        "modes": {"speed": {"power_limit_fraction": 1.0, "batch_size": 64, "clock_plan": str(plans["speed"])},
                  "efficiency": {"power_limit_fraction": 0.6, "batch_size": 32, "clock_plan": str(plans["efficiency"])}},
        "rules": {"kind": "absolute", "clean_below_g_per_kwh": 200, "dirty_above_g_per_kwh": 300,
                  "min_dwell_s": 0, "interval_s": 600},
        "job": {"name": "torch-plans", "expected_duration_s": 3600},
        "backend": {"name": "simulated"},
    })
    clock = FakeClock()
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = CarbonMonitor(sources=[SourceSpec("trace", lambda: TraceProvider(series=_signal(), replay="aligned"))],
                            forecast_horizon=timedelta(hours=6), history_window=timedelta(hours=1))
    reading = monitor.read(clock())
    channel = ModeFileChannel(tmp_path, resolve_run(policy).batch_sizes(None), plans)
    argv = [sys.executable, str(REPO / "examples" / "train_torch.py"), "--epochs", "4", "--steps-per-epoch", "25",
            "--width", "64", "--mode-poll-s", "0.02", "--step-overhead-s", "0.02"]
    jobs: list[InjectedTimeJob] = []
    lines: list[str] = []

    def start_job(env: dict[str, str]) -> InjectedTimeJob:
        env = {**env, "GRIDSHIFT_NVML_READ_ONLY": "1", "PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")}
        assert env["GRIDSHIFT_CLOCK_PLAN"] == str(plans["speed"])
        jobs.append(InjectedTimeJob(start_command(argv, on_line=lines.append, env=env), clock,
                                    tmp_path / "result.json", tmp_path / "mode.json"))
        return jobs[0]

    run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                    first=decide(policy, reading.series, now=clock(), start_at=clock()), first_reading=reading,
                    start_job=start_job, now=clock, log=lambda _: None, mode_file=channel,
                    clock_plans={m: ModePlan(mode=m, path=p, plan=load_plan(p)) for m, p in plans.items()})
    assert run.exit_code == 0, run.tail
    assert [s.mode for s in run.spans] == ["speed", "efficiency"]
    assert jobs[0].seen_modes[-1]["clock_plan"] == str(plans["efficiency"])  # the mode file named the new plan
    ran = run.extra["job_result"]["clock_plans"]
    assert [(r["mode_seq"], Path(r["plan"]).name, r["dry_run"]) for r in ran] == [(0, "fast.json", True),
                                                                                  (1, "slow.json", True)]
    assert all(r["switches"] > 0 for r in ran)
    assert any("clock_plan=" + str(plans["efficiency"]) in line for line in lines)  # the job ran it from then on
    for span, name in zip(run.spans, ("fast.json", "slow.json")):
        (plan,) = [s for s in span.settings_detail if s.name == "clock_plan"]
        assert (plan.value, plan.applied_by, plan.confirmed) == (name, "job", False)  # a dry run changes no clock
        assert "run by the job in dry run" in plan.how and "no clock changed" in span.settings
        (size,) = [s for s in span.settings_detail if s.name == "batch_size"]
        assert size.confirmed  # train_torch acknowledges its batch sizes
