"""A pausable job's windows across flow runs: under a deployment a long pause ends the run with its
next window to schedule, and the next run carries on from the state and reports every window."""

from __future__ import annotations

import json
from datetime import timedelta

from backends.simulated import SimulatedBackend
from flows.supervise import SupervisedRun, supervise
from flows.job.windows import next_window_parameters, resume_state, resumed_run
from scheduler.report import RunReport
from tests.flows.test_supervise_plan import FIGURES, _monitor, _policy, _series
from tests.flows.test_supervise_timeline import T0, FakeClock, FakeJob


class PausableFakeJob(FakeJob):
    """Stops like a checkpointing job: exit 143 after kill(); its work survives into the next start."""

    stopped = False

    def wait(self, timeout_s: float | None = None) -> int | None:
        if self.stopped:
            return 143
        return super().wait(timeout_s)

    def kill(self) -> None:
        self.stopped = True


def _window_run(clock: FakeClock, job_state: dict, out: SupervisedRun, starts: list[dict[str, str]]) -> SupervisedRun:
    policy = _policy(work_h=2, deadline_h=6, checkpointable=True, resume_overhead_s=300)
    backend = SimulatedBackend(clock=clock.monotonic)
    monitor = _monitor(_series(lambda m: 100.0 if m < 60 or 240 <= m < 300 else 600.0))

    def start_job(env: dict[str, str]) -> PausableFakeJob:
        starts.append(env)
        job = PausableFakeJob(clock, backend, policy.job.expected_duration_s, 1.25)
        job.done_s = job_state.get("done_s", 0.0)
        job_state["job"] = job
        return job

    def sleep(s: float) -> None:
        raise AssertionError("a deployment's run must not sleep through a pause")

    run = supervise(policy=policy, backend=backend, caps=backend.capabilities(), control=True, monitor=monitor,
                    first_reading=monitor.read(clock()), start_job=start_job, now=clock, log=lambda s: None, out=out,
                    deadline=T0 + timedelta(hours=6), figures=FIGURES, sleep=sleep, defer_pauses_over_s=120.0,
                    progress=lambda: job_state["job"].progress() if "job" in job_state else None)
    if "job" in job_state:
        job_state["done_s"] = job_state["job"].done_s
    return run


def test_a_long_pause_under_a_deployment_ends_the_run_and_the_next_run_reports_both_windows() -> None:
    clock = FakeClock()
    job_state: dict = {}
    starts: list[dict[str, str]] = []
    first = _window_run(clock, job_state, SupervisedRun(), starts)
    assert first.next_window is not None and first.next_window >= T0 + timedelta(hours=3)
    assert first.exit_code is None and [w.ended_by for w in first.windows] == ["pause"]
    assert 0 < first.work_done_s < 2 * 3600

    # the state travels as a flow-run parameter: JSON, and only what the deployment's flow takes
    params = next_window_parameters({"policy_path": "p.yaml", "plan": True, "ledger_path": None, "command": None},
                                    {"policy_path", "plan", "run_id", "nominal_start", "planned_start", "ledger_path",
                                     "resume"}, first, run_id="r-1", nominal=T0)
    assert params["plan"] is False and params["run_id"] == "r-1" and "command" not in params
    assert params["planned_start"] == first.next_window.isoformat()
    state = json.loads(json.dumps(params["resume"]))

    # Prefect starts the next window's run at its scheduled time
    clock.t = first.next_window
    second = _window_run(clock, job_state, resumed_run(state), starts)
    assert second.exit_code == 0 and second.next_window is None
    assert [w.ended_by for w in second.windows] == ["pause", "exit"]
    assert second.spans[: len(first.spans)] == first.spans  # the first window's spans, carried
    assert starts[-1]["GRIDSHIFT_RESUME"] == "1" and "GRIDSHIFT_RESUME" not in starts[0]
    assert clock.t <= T0 + timedelta(hours=6)

    report = RunReport(run_id="r-1", policy="p.yaml", job="long", status="completed", backend="simulated",
                       measured=False, nominal_start=T0, started_at=second.windows[0].start, ended_at=clock.t,
                       deferred_s=0.0, duration_s=(clock.t - T0).total_seconds(), energy_j=second.energy_j,
                       carbon_g=second.carbon_g, intensity_g_per_kwh=None, intensity_kind="average",
                       intensity_source="trace", modes=tuple(second.spans), decision_reason=second.reason,
                       windows=tuple(second.windows)).to_json()
    assert [w["ended_by"] for w in report["windows"]] == ["pause", "exit"]
    assert sum(w["energy_j"] for w in report["windows"]) == report["energy_j"]


def test_a_resume_state_from_another_version_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="version"):
        resumed_run({"version": 99})
    assert resume_state(resumed_run(None))["windows"] == []
