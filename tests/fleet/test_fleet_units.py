"""Fleet pieces without a server: sites in the policy, the deploy-time source check, run artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.run.artifacts import artifact_key, report_from_markdown, report_markdown
from flows.deployments.deploy import check_source, source_problem
from scheduler.errors import PolicyError
from scheduler.policy.loader import load_policy
from scheduler.policy.sites import policy_at_site

REPO = Path(__file__).resolve().parents[2]


def _with_sites(tmp_path: Path, sites: list[dict], gpus: int = 1) -> Path:
    spec = yaml.safe_load((REPO / "examples" / "nightly.yaml").read_text())
    spec["job"]["gpus"] = gpus
    spec["job"]["workdir"] = str(REPO / "examples")  # the copy's job still runs beside the example
    spec["sites"] = sites
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


SITE_DE = {"name": "de", "work_pool": "gpu-de", "gpus_per_node": 2,
           "carbon": {"provider": "static", "zone": "DE", "options": {"country": "DEU"}}}
SITE_GB = {"name": "gb", "work_pool": "gpu-gb", "work_queue": "node-1", "gpus_per_node": 4, "price_per_gpu_h": 2.5,
           "carbon": {"provider": "ukgrid"}}


def test_a_site_brings_its_own_grid(tmp_path: Path) -> None:
    policy = load_policy(_with_sites(tmp_path, [SITE_DE, SITE_GB]))
    at_de = policy_at_site(policy, "de")
    assert (at_de.carbon.provider, at_de.carbon.zone, at_de.carbon.fallbacks) == ("static", "DE", ())
    assert at_de.carbon.max_staleness_s == policy.carbon.max_staleness_s
    assert policy_at_site(policy, None) is policy
    with pytest.raises(PolicyError, match="sites: de, gb"):
        policy_at_site(policy, "fr")


@pytest.mark.parametrize("sites,gpus,message", [
    ([SITE_DE, SITE_DE], 1, "names must be unique"),
    ([SITE_DE], 3, "de has 2 GPU"),
    ([{**SITE_DE, "name": "DE 1"}], 1, "sites"),
])
def test_bad_sites_are_bad_input(tmp_path: Path, sites: list[dict], gpus: int, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        load_policy(_with_sites(tmp_path, sites, gpus))


def test_the_source_is_checked_when_deploying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GRIDSHIFT_REPO", raising=False)
    monkeypatch.chdir(REPO)
    assert check_source(policy_path="examples/nightly.yaml") == {"directory": str(REPO)}
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:  # prefect deploy stops with one line and gridshift's exit status 3
        check_source()
    assert stop.value.code == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GRIDSHIFT_REPO is not set" in err
    monkeypatch.setenv("GRIDSHIFT_REPO", str(REPO))
    assert check_source()["directory"] == str(REPO)
    assert source_problem(None, "examples/missing.yaml", tmp_path)[1].endswith("policy_path does not exist in GRIDSHIFT_REPO")
    monkeypatch.setenv("GRIDSHIFT_REPO", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit):
        check_source()
    assert "nowhere: GRIDSHIFT_REPO is not a gridshift checkout" in capsys.readouterr().err


def test_prefect_yaml_resolves_the_checkout_at_deploy_time() -> None:
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    (step,) = spec["build"]
    assert step["flows.deployments.deploy.check_source"]["id"] == "source"
    (dep,) = spec["deployments"]
    # one deployment name for both routes: gridshift deploy names it after the policy's job
    assert step["flows.deployments.deploy.check_source"]["deployment"] == f"gridshift-nightly/{dep['name']}"
    assert load_policy(REPO / dep["parameters"]["policy_path"]).job.name == dep["name"]
    (pull,) = spec["pull"]
    assert pull["prefect.deployments.steps.set_working_directory"]["directory"] == "{{ source.directory }}"
    (dep,) = spec["deployments"]
    assert dep["schedules"][0]["parameters"] == {"plan": True}
    assert "env" not in dep["work_pool"].get("job_variables", {})  # one ledger, wherever the run came from


def test_a_run_artifact_carries_its_report(tmp_path: Path) -> None:
    from scheduler.store.ledger import Ledger  # noqa: F401  (the report shape is the ledger's)

    report = {"run_id": "20260101T010203-ab12cd", "status": "completed", "job": "nightly", "policy": "p.yaml",
              "backend": "simulated", "energy_label": "modelled", "decision_reason": "clean", "energy_j": 1.0,
              "duration_s": 2.0, "carbon_g": 0.1, "intensity_kind": "average", "intensity_g_per_kwh": 100.0,
              "intensity_source": "trace", "deferred_s": 0.0, "modes": [], "extra": {"site": "de", "gpus": [1]}}
    assert artifact_key(report["run_id"]) == "gridshift-run-20260101t010203-ab12cd"
    markdown = report_markdown(report)
    assert "| site | de |" in markdown
    assert report_from_markdown(markdown) == report
    assert report_from_markdown("# some other artifact") is None


def test_a_crashed_run_gets_a_ledger_row_and_an_artifact_saying_so(tmp_path: Path) -> None:
    from datetime import datetime, timedelta, timezone

    from flows.deployments.fleet_runs import crashed_report
    from scheduler.store.ledger import Ledger

    began = datetime(2026, 3, 1, 21, 0, tzinfo=timezone.utc)
    placement = {"site": "gb", "start": began.isoformat(), "finish": (began + timedelta(hours=3)).isoformat(), "gpus": 1}
    report = crashed_report(flow_run_id="6e35", flow_run_name="infallible-crayfish", job="fleet-retrain",
                            policy="examples/fleet.yaml", parameters={"site": "gb", "placement": placement},
                            started=began, ended=began + timedelta(minutes=40),
                            reason="no heartbeat for 90 s: its worker or node died")
    assert (report["status"], report["run_id"], report["duration_s"]) == ("crashed", "crashed-6e35", 2400.0)
    assert report["extra"]["site"] == "gb" and report["extra"]["placement"] == placement
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        ledger.record(report)
        assert ledger.runs(job="fleet-retrain") == [report]
    markdown = report_markdown(report)
    assert "(crashed)" in markdown and "worker or node died" in markdown
    assert report_from_markdown(markdown) == report
    never_started = crashed_report(flow_run_id="77", flow_run_name="x", job="j", policy="p", parameters={},
                                   started=None, ended=began, reason="crashed")
    assert never_started["duration_s"] == 0.0 and never_started["started_at"] == began.isoformat()


def test_a_process_whose_parent_is_gone_stops_its_job_and_itself(tmp_path) -> None:
    """The orphan watch: a flow process re-parented after its worker died stops its job's process group, sends
    itself SIGTERM, and first points its output away from the dead worker's pipe."""
    import subprocess
    import sys
    from pathlib import Path

    said = tmp_path / "said.txt"
    code = ("import os, signal, subprocess, sys, time\n"
            "from flows.fleet.orphans import stop_when_orphaned\n"
            f"said = open({str(said)!r}, 'a', buffering=1)\n"
            "job = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
            "said.write(f'job {job.pid}\\n')\n"
            "signal.signal(signal.SIGTERM, lambda *_: (said.write(f'stopped, job {job.wait(timeout=30)}\\n'), sys.exit(0)))\n"
            "with stop_when_orphaned(said.write, poll_s=0.1, grace_s=5, parent=os.getppid() + 999999):\n"
            "    time.sleep(30)\n"
            "said.write('not stopped\\n')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=str(Path(__file__).resolve().parents[2]))
    text = said.read_text()
    assert "stopped, job -15" in text, text  # the job's group got SIGTERM, then the flow process
    assert "is gone; its job was stopped" in text
    assert "not stopped" not in text and done.stdout == ""  # and its output went to /dev/null
