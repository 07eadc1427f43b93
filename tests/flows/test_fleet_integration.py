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

pytestmark = pytest.mark.slow

SITES = ("n1", "n2", "n3")
STEP_S = 10


def _trace(path: Path, t0: datetime, clean: tuple[int, int], level: float) -> None:
    """Dirty (500) except a clean stretch [clean) in steps of STEP_S, at ``level``."""
    rows = [f"{t0 + timedelta(seconds=STEP_S * i):%Y-%m-%dT%H:%M:%S}+00:00,"
            f"{level if clean[0] <= i < clean[1] else 500.0}" for i in range(-30, 120)]
    path.write_text("timestamp,g_per_kwh\n" + "\n".join(rows) + "\n")


def _policy(path: Path, name: str, gpus: int, traces: dict[str, Path]) -> None:
    sites = "\n".join(f"""  - name: {s}
    work_pool: pool-{s}
    gpus_per_node: 2
    carbon: {{provider: trace, zone: {s}, options: {{path: "{traces[s]}", replay: aligned}}}}""" for s in SITES)
    path.write_text(f"""
carbon: {{provider: trace, options: {{path: "{traces['n1']}", replay: aligned}}}}
modes:
  speed: {{power_limit_fraction: 1.0}}
  efficiency: {{power_limit_fraction: 0.7, max_slowdown: 0.3}}
rules: {{kind: plan, slot_s: {STEP_S}, min_dwell_s: 0, deadline_margin_s: 0, interval_s: 60}}
job:
  name: {name}
  command: [{sys.executable}, -c, "import time; time.sleep(12)"]
  expected_duration_s: 12
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
                "PYTHONPATH": str(REPO), "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "0"}
        log = open(tmp_path / f"worker-{site}.log", "wb")
        procs.append(subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", f"pool-{site}",
                                       "--type", "process"], env=wenv, cwd=REPO, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def test_three_nodes_eight_runs(prefect_server, tmp_path, monkeypatch):
    env = prefect_server.env_for(tmp_path)
    api = prefect_server.url
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.deploy import deploy_policy
    from flows.placing import submit_placed_run

    monkeypatch.setenv("GRIDSHIFT_HOME", env["GRIDSHIFT_HOME"])
    traces = {s: tmp_path / f"{s}.csv" for s in SITES}
    policies = {"wide": (tmp_path / "wide.yaml", 2), "narrow": (tmp_path / "narrow.yaml", 1)}
    with temporary_settings(updates={PREFECT_API_URL: api}):
        for site in SITES:  # placeholders for the policy check; the real traces start after the deploys
            _trace(traces[site], datetime.now(timezone.utc), (0, 0), 500.0)
        for name, (path, gpus) in policies.items():
            _policy(path, name, gpus, traces)
            dep = deploy_policy(path, work_pool="pool-plan", schedule=False)
            assert set(dep.sites) == set(SITES)
        # the traces start now: n1 cleanest early, n2 a little later, n3 cleanest of all but later still
        t0 = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=20)
        _trace(traces["n1"], t0, (0, 6), 100.0)
        _trace(traces["n2"], t0, (3, 9), 150.0)
        _trace(traces["n3"], t0, (6, 12), 50.0)
        placed = {}
        for i in range(8):
            name = ("wide", "narrow")[i % 2]
            run = submit_placed_run(str(policies[name][0]), deployment=f"gridshift-nightly/{name}")
            placed[run.flow_run_id] = run
    assert len({r.placement.site for r in placed.values()}) >= 2  # the GPUs of one node do not take all eight

    workers = _workers(env, tmp_path)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            runs = httpx.post(f"{api}/flow_runs/filter", json={"flow_runs": {"tags": {"all_": ["gridshift"]}}},
                              timeout=10).json()
            if runs and all(r["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") for r in runs):
                break
            time.sleep(2)  # polling the server for the runs' states, not timing the code under test
    finally:
        for proc in workers:
            try:
                os.killpg(proc.pid, 15)
                proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, 9)
    states = {r["id"]: (r["state_type"], r["state_name"]) for r in runs}
    assert all(s == "COMPLETED" for s, _ in states.values()), states
    assert len(runs) == 8, [r["name"] for r in runs]  # no run had to wait for GPUs (AwaitingGPUs)

    out = run_cli([str(BIN / "gridshift"), "runs", "--from", "prefect", "--json", "--limit", "100"], env)
    assert out.returncode == 0, out.stderr
    reports = json.loads(out.stdout)
    assert len(reports) == 8 and len({r["run_id"] for r in reports}) == 8
    by_start = {}
    for report in reports:
        extra = report["extra"]
        plan = extra["placement"]
        assert extra["site"] == plan["site"]
        started, held = datetime.fromisoformat(report["started_at"]), datetime.fromisoformat(extra["gpus_acquired_at"])
        planned = datetime.fromisoformat(plan["start"])
        assert planned - timedelta(seconds=2) <= started <= planned + timedelta(seconds=30), (planned, started)
        assert (started - held).total_seconds() < 10  # slots taken just before training, not while waiting
        assert len(extra["gpus"]) == plan["gpus"]
        by_start[report["run_id"]] = (extra["site"], started, datetime.fromisoformat(report["ended_at"]), set(extra["gpus"]))
    for site in SITES:
        mine = [v for v in by_start.values() if v[0] == site]
        for _, start, _, _ in mine:
            active = [v for v in mine if v[1] <= start < v[2]]
            assert sum(len(v[3]) for v in active) <= 2
            devices = [d for v in active for d in v[3]]
            assert len(devices) == len(set(devices))
