"""Issue 32: a fleet that survives its server and its nodes, with real servers, workers and flow processes.

- On Prefect's production setup (PostgreSQL + Redis messaging and lease storage, started by the test
  session: tests/flows/local_services.py) with a process worker at Prefect's default poll (10 s): two
  runs on a 2-GPU site ending 1 s apart hand their GPUs to the two runs queued behind them within
  10 s (acceptance 5); then the worker's process group is SIGKILLed while a run trains, and within
  150 s the run is no longer Running, its slot is free and no process of it is alive (acceptance 3).
- On SQLite with Prefect's default (in-memory) lease storage: the server is stopped for 120 s while a
  placed run trains and started again; the run ends Completed with its report artifact, the ledger
  agrees, the slots equal the running runs, and a burst of 4 submits never oversubscribes a site while
  the other has a GPU free (acceptance 2).
"""

from __future__ import annotations

import json
import os
import signal
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

TERMINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
#: the job: sleep N seconds, or ``file:PATH:S``: until PATH exists, then S seconds more (two runs the test
#: ends 1 s apart once everything is in place, however long a loaded machine took to get there)
_SLEEP = ("import os, sys, time; a = sys.argv[1]; f = a.startswith('file:'); "
          "p, d = a[5:].rsplit(':', 1) if f else ('', a); "
          "[time.sleep(0.2) for _ in iter(lambda: os.path.exists(p), True)] if f else None; "
          "time.sleep(float(d))")


def _policy(path: Path, name: str, sites: dict[str, int], job_s: str, expected_s: int) -> None:
    """A policy without a deadline (every submit starts as soon as a GPU is free) on static-carbon sites."""
    entries = "\n".join(f"""  - name: {site}
    work_pool: pool-{site}
    gpus_per_node: {gpus}
    changeover_s: 5
    carbon: {{provider: static, options: {{country: {country}}}}}""" for (site, gpus), country in
                        zip(sites.items(), ("GBR", "DEU")))
    path.write_text(f"""
carbon: {{provider: static, options: {{country: GBR}}}}
modes:
  speed: {{power_limit_fraction: 1.0}}
  efficiency: {{power_limit_fraction: 0.7, max_slowdown: 0.3}}
rules: {{kind: plan, slot_s: 300, min_dwell_s: 0, deadline_margin_s: 0, interval_s: 60}}
job:
  name: {name}
  command: [{sys.executable}, -c, "{_SLEEP}", "{job_s}"]
  expected_duration_s: {expected_s}
  cron: "0 3 * * *"
  gpus: 1
backend: {{name: nvidia, options: {{control: false}}}}
sites:
{entries}
""")


def _worker(env: dict[str, str], tmp_path: Path, site: str, *, gpus: int, defaults: bool) -> subprocess.Popen[bytes]:
    """A process worker for ``site`` with a fake NVML, in its own session (its group is the node's worker).

    ``defaults``: Prefect's default poll and prefetch (10 s each); else a 1 s poll, for tests that wait on other things.
    """
    state = tmp_path / f"nvml-{site}.json"
    write_state(state, default_state(gpus=gpus))
    wenv = {**env, "GRIDSHIFT_NVML_MODULE": "tests.fakes.fake_nvml", "GRIDSHIFT_FAKE_NVML_STATE": str(state),
            "PYTHONPATH": str(REPO)}
    if not defaults:
        wenv["PREFECT_WORKER_QUERY_SECONDS"] = "1"
    log = open(tmp_path / f"worker-{site}.log", "ab")
    return subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", f"pool-{site}", "--type", "process"],
                            env=wenv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _until(what: str, check, timeout_s: float, explain=None):
    """Poll ``check`` until it is truthy; on timeout fail with ``explain()`` (what the servers and logs say)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1)  # polling real servers and processes, not timing the code under test
    raise AssertionError(f"not within {timeout_s:.0f} s: {what}" + (f"\n{explain()}" if explain else ""))


def _explain(api: str, runs: list[str], tmp_path: Path) -> str:
    """Each run's state and its last log lines, and the tail of every worker's log: why a wait failed."""
    out = []
    for r in runs:
        run = _run(api, r)
        logs = httpx.post(f"{api}/logs/filter", timeout=30, json={
            "logs": {"flow_run_id": {"any_": [r]}}, "sort": "TIMESTAMP_DESC", "limit": 15}).json()
        out.append(f"run {r} {run.get('name')}: {run.get('state_type')} {run.get('state_name')} "
                   f"tags={run.get('tags')}")
        out += [f"    {g['timestamp']} {g['message'][:300]}" for g in reversed(logs)]
    for log in sorted(tmp_path.glob("worker-*.log")):
        out.append(f"{log.name}, last lines:")
        out += ["    " + line for line in log.read_text(errors="replace").splitlines()[-30:]]
    return "\n".join(out)


def _until_or_none(check, timeout_s: float):
    try:
        return _until("", check, timeout_s)
    except AssertionError:
        return None


def _run(api: str, run_id: str) -> dict:
    return httpx.get(f"{api}/flow_runs/{run_id}", timeout=30).json()


def _slots(api: str, limit: str) -> int:
    return int(httpx.get(f"{api}/v2/concurrency_limits/{limit}", timeout=30).json()["active_slots"])


def _report(api: str, run_id: str) -> dict | None:
    """The gridshift report artifact the flow run wrote, if any."""
    from flows.run.artifacts import report_from_markdown

    found = httpx.post(f"{api}/artifacts/filter", timeout=30, json={
        "artifacts": {"flow_run_id": {"any_": [run_id]}, "key": {"like_": "gridshift-run-%"}}}).json()
    reports = [report_from_markdown(a["data"]) for a in found if isinstance(a.get("data"), str)]
    return next((r for r in reports if r), None)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)


def _processes_of(run_id: str) -> list[int]:
    """Live processes whose environment names the flow run (its flow process and the job it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if run_id.encode() in (entry / "environ").read_bytes():
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if stat[0] != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def _submit(gridshift, policy: Path) -> str:
    out = gridshift("submit", str(policy), "--now", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["flow_run_id"]


@pytest.mark.waits(minutes=6)  # its share of the run's waiting (tests/conftest.py): 6 min in CI, 2026-12-07
@pytest.mark.timeout(900)
def test_queued_runs_take_freed_gpus_at_once_and_a_dead_worker_leaves_nothing_running(own_prefect_server_pg, tmp_path,
                                                                                      monkeypatch):
    server = own_prefect_server_pg
    env, api = server.env_for(tmp_path), server.url
    from flows.fleet.names import gpu_limit_name

    monkeypatch.setenv("GRIDSHIFT_HOME", env["GRIDSHIFT_HOME"])

    def gridshift(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli([str(BIN / "gridshift"), *args], env, timeout=300)

    site, limit = "pgq", gpu_limit_name("pgq")
    first, second, queued = (tmp_path / f"{n}.yaml" for n in ("first", "second", "queued"))
    release = tmp_path / "release"  # both running jobs end 1 s apart once it exists
    _policy(first, "pg-first", {site: 2}, f"file:{release}:0", 120)
    _policy(second, "pg-second", {site: 2}, f"file:{release}:1", 120)
    _policy(queued, "pg-queued", {site: 2}, "30", 30)
    worker = _worker(env, tmp_path, site, gpus=2, defaults=True)
    workers = [worker]
    try:
        for path in (first, second, queued):
            out = gridshift("deploy", str(path), "--pool", f"pool-{site}", "--no-schedule")
            assert out.returncode == 0, out.stderr
        running = [_submit(gridshift, first), _submit(gridshift, second)]
        _until("both GPUs are held", lambda: _slots(api, limit) == 2, 120)
        behind = [_submit(gridshift, queued), _submit(gridshift, queued)]
        assert all(_run(api, r)["parameters"]["placement"]["queued"] for r in behind)
        # the queued runs reach the worker (its 10 s poll) and wait in line for the GPUs: then the two end
        _until("both queued runs wait in line for the GPUs", lambda: all(
            _run(api, r)["state_type"] == "RUNNING" for r in behind), 180, lambda: _explain(api, behind, tmp_path))
        release.touch()
        reports = _until("the four runs wrote their reports",
                         lambda: (lambda rs: rs if all(rs) else None)([_report(api, r) for r in running + behind]),
                         420, lambda: _explain(api, running + behind, tmp_path))
        ended = sorted(datetime.fromisoformat(r["ended_at"]) for r in reports[:2])
        started = sorted(datetime.fromisoformat(r["started_at"]) for r in reports[2:])
        waits = [(s - e).total_seconds() for e, s in zip(ended, started)]
        print(f"queued runs' jobs started {waits[0]:.1f} s and {waits[1]:.1f} s after the GPU they took freed "
              f"(the first two ended {(ended[1] - ended[0]).total_seconds():.1f} s apart)")
        assert all(0 < w < 10 for w in waits), (waits, reports)

        # acceptance 3: the worker's process group dies (kill -9) while a run trains
        _policy(first, "pg-first", {site: 2}, "600", 600)  # redeployed: a long job for the node to die under
        out = gridshift("deploy", str(first), "--pool", f"pool-{site}", "--no-schedule")
        assert out.returncode == 0, out.stderr
        victim = _submit(gridshift, first)
        _until("the run trains, holding its slot", lambda: _run(api, victim)["state_type"] == "RUNNING"
               and _slots(api, limit) == 1 and len(_processes_of(victim)) >= 2, 300)
        parents = {pid: (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                   for pid in _processes_of(victim)}
        print(f"worker {worker.pid}; the run's processes and their parents: {parents}")
        os.killpg(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        worker.wait()
        _until("the run is no longer Running", lambda: _run(api, victim)["state_type"] != "RUNNING", 150,
               lambda: _explain(api, [victim], tmp_path))
        _until("its slot is free", lambda: _slots(api, limit) == 0, 150 - (time.monotonic() - killed))
        _until("no process of it is alive", lambda: not _processes_of(victim), 150 - (time.monotonic() - killed))
        print(f"worker killed: run {_run(api, victim)['state_type']}, slot free and no process left after "
              f"{time.monotonic() - killed:.0f} s")
    finally:
        _stop(workers)


def _trained(api: str, runs: list[str]) -> list[dict]:
    """The reports of finished runs, or [] while any of ``runs`` is not finished."""
    states = [_run(api, r)["state_type"] for r in runs]
    if not all(s in TERMINAL for s in states):
        return []
    return [_report(api, r) or {} for r in runs]


@pytest.mark.waits(minutes=12)  # its share of the run's waiting (tests/conftest.py): 12 min in CI, 2026-12-07
@pytest.mark.timeout(900)
def test_a_server_restart_mid_run_leaks_no_gpu_and_loses_no_report(prefect_server, tmp_path, monkeypatch):
    """Acceptance 2 of issue 32, on Prefect's default in-memory lease storage (what a user runs first)."""
    server = prefect_server
    env, api = server.env_for(tmp_path), server.url
    from flows.fleet.names import gpu_limit_name

    monkeypatch.setenv("GRIDSHIFT_HOME", env["GRIDSHIFT_HOME"])

    def gridshift(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli([str(BIN / "gridshift"), *args], env, timeout=300)

    sites = {"oa": 1, "ob": 1}  # oa is the cleaner: a lone run goes there
    long_run, burst = tmp_path / "long.yaml", tmp_path / "burst.yaml"
    _policy(long_run, "outage-long", sites, "60", 60)
    _policy(burst, "outage-burst", sites, "8", 8)
    workers = [_worker(env, tmp_path, site, gpus=1, defaults=False) for site in sites]
    try:
        for path in (long_run, burst):
            out = gridshift("deploy", str(path), "--pool", "pool-oa", "--no-schedule")
            assert out.returncode == 0, out.stderr
        assert "keeps concurrency leases in memory" in out.stderr  # deploy says what a restart does
        run = _submit(gridshift, long_run)
        _until("the run trains on oa, holding its slot", lambda: _run(api, run)["state_type"] == "RUNNING"
               and _slots(api, gpu_limit_name("oa")) == 1 and len(_processes_of(run)) >= 2, 300)
        time.sleep(10)  # mid-run: the job has 50 s to go, and ends while the server is away
        server.stop()
        time.sleep(120)  # the outage itself
        server.start()
        back = time.monotonic()
        report = _until("the run is Completed with its report", lambda: (lambda r: _report(api, run) if
                        r["state_type"] == "COMPLETED" else None)(_run(api, run)), 180,
                        lambda: _explain(api, [run], tmp_path))
        _until("every site's active slots equal its running runs",
               lambda: all(_slots(api, gpu_limit_name(s)) == 0 for s in sites), 180 - (time.monotonic() - back))
        settled = time.monotonic() - back
        assert report["status"] == "completed", report
        # the run's log lines reach the server in batches, after its state: wait for them, then show what came
        said = _until_or_none(lambda: httpx.post(f"{api}/logs/filter", timeout=30, json={"logs": {
            "flow_run_id": {"any_": [run]}, "text": {"query": '"a lease the server lost"'}}}).json(), 60)
        if not said:
            lines = [g["message"] for g in httpx.post(f"{api}/logs/filter", timeout=30, json={
                "logs": {"flow_run_id": {"any_": [run]}}, "limit": 200}).json()]
            raise AssertionError("the run's release named no lease the restart forgot (the slot check must have "
                                 "freed it); its log:\n" + "\n".join(lines[-40:]))
        listed = gridshift("runs", "--job", "outage-long", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [r["status"] for r in json.loads(listed.stdout)] == ["completed"]  # the ledger agrees
        print(f"server back: run Completed with its report and the slots settled {settled:.0f} s later")

        burst_runs = [_submit(gridshift, burst) for _ in range(4)]
        placed = [_run(api, r)["parameters"]["placement"] for r in burst_runs]
        # a loaded machine takes seconds a submit, so a burst run may end before the last submits: judge each
        # placement by the bookings made before it, not by a count
        assert not placed[0]["queued"] and placed[0]["site"] == "oa", placed  # the cleaner site's free GPU, at once
        for site in sites:  # never two runs booked on a 1-GPU site at once
            spans = sorted((_utc(p["start"]), _utc(p["finish"])) for p in placed if p["site"] == site)
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (site, placed)
        reports = _until("the burst trained", lambda: (lambda rs: rs if rs and all(rs) else None)(
            _trained(api, burst_runs)), 400, lambda: _explain(api, burst_runs, tmp_path))
        # a run waited only while every site's GPU was taken: booked, or still held by a run past its booked
        # finish (until Prefect had it finished, changeover 5 s), or promised to a run standing in line there
        # (a queued run not yet holding its GPUs: the placer puts later runs behind it)
        server_runs = [_run(api, r) for r in burst_runs]
        ends = [max(_utc(r["ended_at"]), _utc(sr["end_time"])) for r, sr in zip(reports, server_runs)]
        holds = [_utc(r["extra"]["gpus_acquired_at"]) for r in reports]

        def taken(site: str, at: datetime, before: int) -> bool:
            return any(q["site"] == site and (_utc(q["start"]) <= at < max(_utc(q["finish"]), ends[j]) + timedelta(seconds=5)
                                              or (q["queued"] and at < holds[j]))
                       for j, q in enumerate(placed[:before]))

        for i, p in enumerate(placed):
            if p["queued"]:
                at = _utc(p["placed_at"])
                assert all(taken(s, at, i) for s in sites), "\n".join(
                    [f"run {i} was queued at {at:%H:%M:%S.%f} although a site had a GPU free; the burst:"]
                    + [f"  {j}: {q['site']} queued={q['queued']} placed {_utc(q['placed_at']):%H:%M:%S.%f} booked "
                       f"{_utc(q['start']):%H:%M:%S.%f}-{_utc(q['finish']):%H:%M:%S.%f} GPUs held from "
                       f"{holds[j]:%H:%M:%S.%f}, ended {ends[j]:%H:%M:%S.%f}" for j, q in enumerate(placed)])
        for site in sites:  # never two runs on a 1-GPU site at once
            spans = sorted((datetime.fromisoformat(r["extra"]["gpus_acquired_at"]), datetime.fromisoformat(r["ended_at"]))
                           for r in reports if r["extra"]["site"] == site)
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (site, spans)
    finally:
        _stop(workers)
        if not server.healthy():
            server.start()
