"""Issue 14, acceptance 1: a fleet of three nodes on a real local Prefect server.

Three process workers stand for three nodes in three zones (each a site with a trace-fed carbon source
and a fake NVML of 2 GPUs); eight runs of two deployments (one needs 2 GPUs, one 1) are placed by
``gridshift submit``'s code path (site and start together, GPU bookings from Prefect), then run by the
workers. Checked from the runs' own reports: no node ever ran more GPUs than it has (and never the same
GPU twice at once), each run ran at its planned site and started at its planned time, every run held its
GPU slots only while it trained (no waiting inside a worker), and `gridshift runs --from prefect` shows
all eight once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from tests.fakes.fake_nvml import default_state, write_state
from tests.flows.local_server import BIN, REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.waits]

SITES = ("fl1", "fl2", "fl3")  # names of this test's own (the session server is shared with other tests)
JOBS = {"fleet-wide": 2, "fleet-narrow": 1}  # job name -> GPUs
STEP_S = 10
#: the clean hours begin this long after the runs are placed: time for the workers to boot the eight
#: flow processes ahead of their starts (eight Prefect processes at once take over a minute on 2 busy cores)
LEAD_S = 120
#: a process worker boots a flow run's process this long before its scheduled time and Prefect holds the
#: run in Pending until then (WaitForScheduledTime), so training starts on time; no GPU slot is taken early
PREFETCH_S = 600
#: the site's booking margin past a run's planned finish (an 8 s job; the flow's report takes some seconds)
CHANGEOVER_S = 30


def _trace(path: Path, t0: datetime, clean: tuple[int, int], level: float) -> None:
    """Dirty (500) except a clean stretch [clean) in steps of STEP_S, at ``level``."""
    rows = [f"{t0 + timedelta(seconds=STEP_S * i):%Y-%m-%dT%H:%M:%S}+00:00,"
            f"{level if clean[0] <= i < clean[1] else 500.0}" for i in range(-30, 120)]
    path.write_text("timestamp,g_per_kwh\n" + "\n".join(rows) + "\n")


def _policy(path: Path, name: str, gpus: int, traces: dict[str, Path]) -> None:
    sites = "\n".join(f"""  - name: {s}
    work_pool: pool-{s}
    gpus_per_node: 2
    changeover_s: {CHANGEOVER_S}
    carbon: {{provider: trace, zone: {s}, options: {{path: "{traces[s]}", replay: aligned}}}}""" for s in SITES)
    path.write_text(f"""
carbon: {{provider: trace, options: {{path: "{traces[SITES[0]]}", replay: aligned}}}}
modes:
  speed: {{power_limit_fraction: 1.0}}
  efficiency: {{power_limit_fraction: 0.7, max_slowdown: 0.3}}
rules: {{kind: plan, slot_s: {STEP_S}, min_dwell_s: 0, deadline_margin_s: 0, min_gain: 0, interval_s: 60}}
job:
  name: {name}
  command: [{sys.executable}, -c, "import time; time.sleep(8)"]
  expected_duration_s: 8
  cron: "0 3 * * *"
  deadline_s: 900
  gpus: {gpus}
backend: {{name: nvidia, options: {{control: false}}}}
sites:
{sites}
""")


def _workers(env: dict[str, str], tmp_path: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for site in SITES:
        state = tmp_path / f"nvml-{site}.json"
        write_state(state, default_state(gpus=2))
        wenv = {**env, "GRIDSHIFT_NVML_MODULE": "tests.fakes.fake_nvml", "GRIDSHIFT_FAKE_NVML_STATE": str(state),
                "PYTHONPATH": str(REPO), "PREFECT_WORKER_QUERY_SECONDS": "1",
                "PREFECT_WORKER_PREFETCH_SECONDS": str(PREFETCH_S)}
        log = open(tmp_path / f"worker-{site}.log", "wb")
        procs.append(subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", f"pool-{site}",
                                       "--type", "process"], env=wenv, cwd=REPO, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def _stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for proc in workers:
        try:
            os.killpg(proc.pid, 15)
        except ProcessLookupError:
            continue
    for proc in workers:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def _utc(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


@pytest.mark.timeout(900)  # a server start, three worker boots and eight flow processes on a shared 2-core machine
def test_three_nodes_eight_runs(prefect_server, tmp_path, monkeypatch):
    env = prefect_server.env_for(tmp_path)
    api = prefect_server.url
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.deploy import deploy_policy
    from flows.placing import submit_placed_run

    monkeypatch.setenv("GRIDSHIFT_HOME", env["GRIDSHIFT_HOME"])
    traces = {s: tmp_path / f"{s}.csv" for s in SITES}
    policies = {name: tmp_path / f"{name}.yaml" for name in JOBS}
    workers = _workers(env, tmp_path)  # they boot while the deployments are made
    try:
        with temporary_settings(updates={PREFECT_API_URL: api}):
            for site in SITES:  # placeholders for the policy check; the real traces start after the deploys
                _trace(traces[site], datetime.now(timezone.utc), (0, 0), 500.0)
            deployments = []
            for name, path in policies.items():
                _policy(path, name, JOBS[name], traces)
                dep = deploy_policy(path, work_pool="pool-plan", schedule=False)
                assert set(dep.sites) == set(SITES)
                deployments += [full.split("/", 1)[1] for full in dep.sites.values()]
            # the traces start now: fl1 cleanest early, fl2 a little later, fl3 cleanest of all but later still
            t0 = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=LEAD_S)
            _trace(traces["fl1"], t0, (0, 6), 100.0)
            _trace(traces["fl2"], t0, (3, 9), 150.0)
            _trace(traces["fl3"], t0, (6, 12), 50.0)
            placed = {}
            for i in range(8):
                name = list(JOBS)[i % 2]
                run = submit_placed_run(str(policies[name]), deployment=f"gridshift-nightly/{name}")
                placed[run.flow_run_id] = run
        assert len({r.placement.site for r in placed.values()}) >= 2  # the GPUs of one node do not take all eight
        query = {"flow_runs": {"tags": {"all_": ["gridshift"]}}, "deployments": {"name": {"any_": deployments}}}
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            runs = httpx.post(f"{api}/flow_runs/filter", json=query, timeout=10).json()
            if runs and all(r["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") for r in runs):
                break
            time.sleep(2)  # polling the server for the runs' states, not timing the code under test
    finally:
        _stop(workers)
    states = {r["id"]: (r["state_type"], r["state_name"]) for r in runs}
    assert all(s == "COMPLETED" for s, _ in states.values()), states
    assert len(runs) == 8, [r["name"] for r in runs]  # no run had to wait for GPUs (AwaitingGPUs)
    by_id = {r["id"]: r for r in runs}
    for flow_run_id, submitted in placed.items():  # Prefect holds each run to the placement's start
        scheduled = _utc(by_id[flow_run_id]["expected_start_time"])
        assert abs((scheduled - submitted.placement.plan.start).total_seconds()) < 1.0
        assert by_id[flow_run_id]["parameters"]["site"] == submitted.placement.site

    out = run_cli([str(BIN / "gridshift"), "runs", "--from", "prefect", "--json", "--limit", "100"], env)
    assert out.returncode == 0, out.stderr
    reports = [r for r in json.loads(out.stdout) if r["job"] in JOBS]
    assert len(reports) == 8 and len({r["run_id"] for r in reports}) == 8
    occupied = []
    for report in reports:
        extra = report["extra"]
        plan = extra["placement"]
        assert extra["site"] == plan["site"]
        started, held = _utc(report["started_at"]), _utc(extra["gpus_acquired_at"])
        planned = _utc(plan["start"])
        # trains at its planned start (the worker's pick-up and the flow's own set-up are the slack)
        assert planned - timedelta(seconds=2) <= held <= started <= planned + timedelta(seconds=45), (planned, held, started)
        assert (started - held).total_seconds() < 20  # slots taken just before training, not held while waiting
        assert len(extra["gpus"]) == plan["gpus"] == JOBS[report["job"]]
        occupied.append((extra["site"], held, _utc(report["ended_at"]), set(extra["gpus"])))
    for site in SITES:  # at no moment does a node run more GPUs than it has, nor one GPU twice
        mine = [o for o in occupied if o[0] == site]
        for _, start, _, _ in mine:
            active = [o for o in mine if o[1] <= start < o[2]]
            assert sum(len(o[3]) for o in active) <= 2
            devices = [d for o in active for d in o[3]]
            assert len(devices) == len(set(devices))
