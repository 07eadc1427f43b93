"""Placements per minute and latency at 24 concurrent ``gridshift submit`` processes: per-site booking
against the single placing lock it replaced, measured in the same run on one real Prefect server.

Each round deploys a fresh two-site policy (2 GPUs a site, a 1-hour job, no deadline: every submit is
``--now``), starts ``--submits`` processes that each import gridshift's CLI and Prefect, say they are
ready, and wait; then releases them all at once. Each then runs what ``gridshift submit POLICY --now
--json`` runs (the CLI's own function), so the archive, the forecasts and the client set-ups are in the
time. Timed from the release (after their imports) to each process's placement:

- ``per-site booking`` (gridshift today): plan outside any lock, then hold only the chosen site's
  placing lock to re-read its bookings and book, planning again when they changed
  (:func:`flows.fleet.placing.submit_placed_run`);
- ``single lock`` (the baseline, gridshift before issue 32): hold every site's placing lock from
  reading the bookings to creating the run (the same product functions, composed as before).

After each round it checks, from the runs on the server: no error, no site booked past its GPUs at
any moment, and the free GPUs booked at once (the first ``gpus`` runs start at their placement, the
rest are queued in arrival order). Everything is measured (wall clock, this machine, real server on
SQLite unless ``--database-url``); the load average is printed next to each figure.

    python benchmarks/placement.py [--submits 24] [--rounds 1] [--json] [--database-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: what each submit process runs: import, say ready, wait for the release, place, print timings
_SUBMITTER = r"""
import json, os, resource, sys, time
from pathlib import Path
# the imports a submit makes, before the clock: gridshift's CLI, Prefect's client, and the modules they load lazily
import flows.cli, flows.cli.deploy, flows.fleet.placing, flows.fleet.site_lock, flows.fleet.gpus, flows.sources
import scheduler.policy.loader, scheduler.service.placement, scheduler.planner.inputs, carbon.providers.static
import prefect, prefect.client.orchestration, prefect.client.schemas.filters, prefect.states
ready, go, out, mode, policy = sys.argv[1:6]
Path(ready).touch()
while not os.path.exists(go):
    time.sleep(0.02)
t0 = float(Path(go).read_text() or 0) or time.time()
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
error = None
try:
    if mode == "per-site":
        from flows.cli.deploy import submit
        submit(Path(policy), deployment=None, now=True, key=None, json_out=True)
    else:
        sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
        from placement import single_lock_submit
        single_lock_submit(policy)
except BaseException as exc:  # reported, not raised: the benchmark counts errors
    if not (isinstance(exc, SystemExit) and not exc.code):
        error = f"{type(exc).__name__}: {exc}"
cpu1 = resource.getrusage(resource.RUSAGE_SELF)
Path(out).write_text(json.dumps({"released": t0, "placed": time.time(), "error": error,
                                 "cpu_s": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime}))
"""


def single_lock_submit(policy_path: str) -> str:
    """Gridshift before issue 32: every site's placing lock held from reading the bookings to creating the run.

    The lock as it was: Prefect's ``concurrency()`` on all the sites' placing limits in one request,
    asked again every second while taken (:func:`flows.fleet.gpus.take_slots`).
    """
    from contextlib import ExitStack
    from datetime import timezone

    from flows.fleet.gpus import take_slots
    from flows.fleet.names import placing_limit_name
    from prefect.client.orchestration import get_client

    from flows.fleet.placing import _create_placed_run, _site_forecasts, fleet_bookings, plan_placement
    from scheduler.policy.loader import load_policy

    policy = load_policy(policy_path)
    sites = [s.name for s in policy.sites]
    forecasts = _site_forecasts(policy, datetime.now(timezone.utc))
    with ExitStack() as stack:
        assert take_slots([placing_limit_name(s) for s in sorted(sites)], 1, wait_s=600, lease_s=60, stack=stack)
        now = datetime.now(timezone.utc)
        placed = plan_placement(policy, nominal=now, now=now, start_now=True, bookings=fleet_bookings(sites, now),
                                forecasts=forecasts)
        target = f"gridshift-nightly/{policy.job.name}-{placed.site}"
        with get_client(sync_client=True) as client:  # (the client as it was then: one per call)
            run = _create_placed_run(client, policy, policy_path, placed, key=None, nominal=now, now=now,
                                     deployment=(target, client.read_deployment_by_name(target).id),
                                     ledger_path=None, workdir=None)
    return run.flow_run_id


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) {five:.2f} (5 min)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _policy(path: Path, job: str, sites: list[str]) -> None:
    entries = "\n".join(f"""  - name: {s}
    work_pool: pool-{s}
    gpus_per_node: 2
    carbon: {{provider: static, options: {{country: {c}}}}}""" for s, c in zip(sites, ("DEU", "GBR")))
    path.write_text(f"""
carbon: {{provider: static, options: {{country: DEU}}}}
modes:
  speed: {{power_limit_fraction: 1.0}}
  efficiency: {{power_limit_fraction: 0.7, max_slowdown: 0.3}}
rules: {{kind: plan, slot_s: 300, min_dwell_s: 0, deadline_margin_s: 0, interval_s: 900}}
job:
  name: {job}
  command: [python, -c, "pass"]
  expected_duration_s: 3600
  cron: "0 1 * * *"
  gpus: 1
backend: {{name: simulated}}
sites:
{entries}
""")


def _cpu_s(pid: int) -> float:
    """CPU seconds used so far by process group ``pid``'s processes (the server and its children), from /proc."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pid:  # its process group
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _round(mode: str, n: int, env: dict[str, str], work: Path, api: str, tag: str, server_pid: int) -> dict[str, Any]:
    from flows.deployments.deploy import deploy_policy
    from prefect.settings import PREFECT_API_URL, temporary_settings

    sites = [f"{tag}a", f"{tag}b"]
    policy = work / f"{tag}.yaml"
    _policy(policy, f"bench-{tag}", sites)
    with temporary_settings(updates={PREFECT_API_URL: api}), contextlib.redirect_stdout(io.StringIO()):
        deploy_policy(policy, work_pool=f"pool-{tag}", schedule=False)  # (Prefect prints a table per deployment)
    go = work / f"{tag}.go"
    procs, outs = [], []
    for i in range(n):
        ready, out = work / f"{tag}-{i}.ready", work / f"{tag}-{i}.json"
        outs.append(out)
        procs.append((ready, subprocess.Popen([sys.executable, "-c", _SUBMITTER, str(ready), str(go), str(out), mode,
                                                str(policy)], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE, text=True)))
    while not all(r.exists() for r, _ in procs):
        time.sleep(0.05)  # waiting for the processes' imports, outside the measured time
    load = _load()
    server_cpu = _cpu_s(server_pid)
    go.write_text(repr(time.time()))
    errs = [p.communicate(timeout=600)[1] for _, p in procs]
    server_cpu = _cpu_s(server_pid) - server_cpu
    results = [json.loads(o.read_text()) if o.exists() else {"released": time.time(), "placed": time.time(),
                                                             "error": f"no result: {err[-500:]}"}
               for o, err in zip(outs, errs)]
    released = min(r["released"] for r in results)
    latencies = sorted(r["placed"] - released for r in results)
    span = latencies[-1]
    errors = [r["error"] for r in results if r["error"]]
    runs = httpx.post(f"{api}/flow_runs/filter", timeout=30, json={
        "flow_runs": {"tags": {"all_": ["placed"]}}, "deployments": {"name": {"like_": f"bench-{tag}%"}},
        "limit": 200}).json()
    return {"mode": mode, "submits": n, "placed": len(runs), "errors": errors + [e for e in errs if "Traceback" in e],
            "submits_printing_error_lines": sum(1 for e in errs if "| ERROR" in e or " ERROR " in e),
            "placements_per_min": 60.0 * len(results) / span, "p50_s": latencies[len(latencies) // 2],
            "p95_s": latencies[min(len(latencies) - 1, int(round(0.95 * (len(latencies) - 1))))],
            "span_s": span, "cpu_s_per_submit": sum(r.get("cpu_s", 0.0) for r in results) / len(results),
            "server_cpu_s": server_cpu,
            "load_at_release": load, "load_after": _load(), **_check(runs, sites)}


def _check(runs: list[dict[str, Any]], sites: list[str]) -> dict[str, Any]:
    """No site booked past its 2 GPUs at any moment; the free GPUs booked at once; the rest queued in arrival order."""
    def t(iso: str) -> datetime:
        return datetime.fromisoformat(iso)

    placements = [r["parameters"]["placement"] for r in runs]
    worst = 0
    for site in sites:
        mine = [(t(p["start"]), t(p["finish"]) + timedelta(seconds=60)) for p in placements if p["site"] == site]
        for lo, _ in mine:
            worst = max(worst, sum(1 for a, b in mine if a <= lo < b))
    at_once = [p for p in placements if not p["queued"]]
    queued_in_order = all(
        [t(p["start"]) for p in sorted((q for q in placements if q["queued"] and q["site"] == s),
                                       key=lambda q: q["placed_at"])]
        == sorted(t(p["start"]) for p in placements if p["queued"] and p["site"] == s) for s in sites)
    return {"most_runs_booked_on_a_site_at_once": worst, "booked_at_once": len(at_once),
            "queued_in_arrival_order": queued_in_order}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submits", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each mode, alternating")
    parser.add_argument("--database-url", default=None, help="PREFECT_API_DATABASE_CONNECTION_URL for the server")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gridshift-placement-") as tmp:
        work = Path(tmp)
        port = _free_port()
        api = f"http://127.0.0.1:{port}/api"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=str(work / "prefect-home"), PREFECT_API_URL=api, PREFECT_SERVER_ANALYTICS_ENABLED="false",
                   PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW="ignore", GRIDSHIFT_HOME=str(work / "home"),
                   PREFECT_SERVER_DATABASE_TIMEOUT="30", PYTHONPATH=str(REPO))
        if args.database_url:
            env["PREFECT_API_DATABASE_CONNECTION_URL"] = args.database_url
        log = open(work / "server.log", "wb")
        server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port),
                                   "--analytics-off", "--no-ui"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{api}/health", timeout=2).json() is True:
                        break
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.5)
            else:
                raise SystemExit(f"the Prefect server did not start (log: {work / 'server.log'})")
            os.environ.update(GRIDSHIFT_HOME=env["GRIDSHIFT_HOME"], PREFECT_HOME=env["PREFECT_HOME"])
            rows = []
            for r in range(args.rounds):
                for mode in ("single-lock", "per-site"):
                    rows.append(_round(mode, args.submits, env, work, api, f"r{r}{'s' if mode == 'single-lock' else 'p'}",
                                       server.pid))
        finally:
            os.killpg(server.pid, 15)
            server.wait(timeout=30)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.submits} concurrent `gridshift submit --now` processes, 2 sites x 2 GPUs, timed from their release "
          f"(after imports) to each placement; measured, real Prefect server "
          f"({'PostgreSQL' if args.database_url else 'SQLite'}), this machine ({os.cpu_count()} cores)")
    for row in rows:
        print(f"  {row['mode']:>12}: {row['placements_per_min']:6.1f} placements/min, p50 {row['p50_s']:5.1f} s, "
              f"p95 {row['p95_s']:5.1f} s, all placed in {row['span_s']:5.1f} s, {row['cpu_s_per_submit']:.2f} s CPU "
              f"a submit, server {row['server_cpu_s']:.1f} s CPU; {row['placed']} runs, "
              f"{len(row['errors'])} errors ({row['submits_printing_error_lines']} printed an ERROR line), at most {row['most_runs_booked_on_a_site_at_once']} runs booked on a site "
              f"at once, {row['booked_at_once']} booked to start at once, queued in arrival order: "
              f"{row['queued_in_arrival_order']}  [{row['load_at_release']}; after: {row['load_after']}]")
        for error in row["errors"][:3]:
            print(f"      error: {error[-300:]}")


if __name__ == "__main__":
    main()
