"""``batch_size: auto`` through the run flow, with the real tiny training job as a subprocess.

One Prefect server for the session (``prefect_harness``); the simulated backend meters energy
(modelled), the job's time is real. The job trains until its loss target: larger batches need more
epochs, and each epoch carries a fixed data-loading stand-in, so the cheapest size is the smallest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from plans.batch_size import BatchSizeOptimizer
from scheduler.settings.auto_power import job_fingerprint
from scheduler.store.batch_size_history import BatchSizeHistory, batch_size_config
from scheduler.store.ledger import Ledger
from scheduler.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "examples" / "train_tiny.py"

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _policy(tmp_path: Path, *, sizes: list[int], default: int, job_args: list[str], beta: float = 2.0) -> Path:
    policy = {
        "carbon": {"provider": "static", "options": {"country": "USA"}},
        "modes": {"speed": {"power_limit_fraction": 1.0, "batch_size": "auto"},
                  "efficiency": {"power_limit_fraction": 0.6, "batch_size": "auto"}},
        "rules": {"kind": "absolute", "clean_below_g_per_kwh": 5000, "dirty_above_g_per_kwh": 6000},
        "job": {"name": "tiny-auto", "expected_duration_s": 5,
                "command": [sys.executable, str(TINY), "--samples", "4000", *job_args],
                "batch_size_search": {"sizes": sizes, "default": default, "eta": 0.5, "beta": beta}},
        "backend": {"name": "simulated"},
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def _run(policy: Path, ledger: Path, run_id: str) -> dict:
    from flows.training import carbon_aware_training

    state = carbon_aware_training(policy_path=str(policy), run_id=run_id, backend_name="simulated",
                                  ledger_path=str(ledger), return_state=True)
    state.result(raise_on_failure=False)
    with Ledger(ledger) as led:
        report = led.get(run_id)
    assert report is not None
    return report


def test_ten_recurrences_converge_on_the_cheapest_batch_size(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    # epochs to the loss target: 1 at 32, 4 at 128, 14 at 512; 0.4 s of data loading per epoch
    policy = _policy(tmp_path, sizes=[32, 128, 512], default=512,
                     job_args=["--epochs", "40", "--target-loss", "0.15", "--epoch-overhead-s", "0.4"])
    proposals = []
    for i in range(10):
        report = _run(policy, ledger, f"r{i}")
        trial = report["extra"]["batch_size_trial"]
        assert trial["cost_label"] == "modelled (simulated energy)"
        if trial["outcome"] == "stopped":  # real wall time on a shared machine: a slow start can pass beta x best
            assert trial["cost_j"] >= trial["cost_bound_j"] and report["status"] == "failed"
        else:
            assert report["status"] == "completed", report["error"]
            assert trial["outcome"] == "reached" and report["extra"]["job_result"]["reached"] is True
            # the job ran with the proposal, and the report says so
            assert (f"batch size {trial['batch_size']} (acknowledged by the job at epoch 0)"
                    in report["modes"][0]["settings"])
        proposals.append((trial["batch_size"], trial["phase"]))
    print("proposals:", proposals)

    with BatchSizeHistory(ledger) as history:
        fp = job_fingerprint("tiny-auto", load_policy(policy).job.command)
        rows = history.rows("tiny-auto", fp)
        trials = history.history("tiny-auto", fp)
    print("ledger history:", [(r["batch_size"], r["phase"], r["outcome"], round(r["cost"]), r["epochs"]) for r in rows])
    assert [(r["batch_size"], r["phase"]) for r in rows] == proposals
    assert [r["run_id"] for r in rows] == [f"r{i}" for i in range(10)] and all(r["status"] == "done" for r in rows)

    # the first run uses the default; the walk goes down one size per recurrence, then exploits
    assert proposals[:3] == [(512, "default"), (128, "explore"), (32, "explore")]
    assert all(phase == "exploit" for _, phase in proposals[3:])
    epochs = {r["batch_size"]: r["epochs"] for r in rows if r["outcome"] == "reached"}
    assert epochs[32] < epochs[128] < epochs[512]  # the job's own report of how long each size took
    # converged: the recent proposals settle on the size the ledger shows cheapest, never the default
    mean_cost = {b: np.mean([r["cost"] for r in rows if r["batch_size"] == b and r["outcome"] == "reached"])
                 for b in epochs}
    best = min(mean_cost, key=mean_cost.get)
    recent = [b for b, _ in proposals[-5:]]
    assert best != 512 and 512 not in recent and recent.count(best) >= 4
    # the next recurrence would start from what was learned: the optimiser rebuilt from the ledger
    nxt = BatchSizeOptimizer.from_history(batch_size_config(load_policy(policy).job.batch_size_search), trials)
    assert nxt.best() == best


def test_a_trial_past_beta_times_the_best_cost_is_stopped_and_recorded(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    policy = _policy(tmp_path, sizes=[128, 256], default=256, job_args=["--epochs", "200", "--epoch-overhead-s", "0.1"])
    loaded = load_policy(policy)
    fp = job_fingerprint("tiny-auto", loaded.job.command)
    best_cost = 1400.0  # J; at the simulated GPU's full power the run passes 2 x this after about 4 s
    with BatchSizeHistory(ledger) as history:  # an earlier recurrence that reached the target at the default
        tid, p = history.begin("tiny-auto", batch_size_config(loaded.job.batch_size_search),
                               np.random.default_rng(0), fingerprint=fp)
        assert p.batch_size == 256
        history.finish(tid, cost=best_cost, reached=True)

    report = _run(policy, ledger, "stopped")
    trial = report["extra"]["batch_size_trial"]
    assert (trial["batch_size"], trial["phase"]) == (128, "explore")
    assert trial["outcome"] == "stopped" and trial["cost_bound_j"] == pytest.approx(2 * best_cost)
    assert trial["cost_j"] >= 2 * best_cost
    assert report["status"] == "failed" and report["error"].startswith("batch-size trial stopped")
    assert report["exit_code"] != 0
    assert "reached" not in report["extra"].get("job_result", {})  # killed before it could finish 200 epochs

    with BatchSizeHistory(ledger) as history:
        rows = history.rows("tiny-auto", fp)
        trials = history.history("tiny-auto", fp)
    assert [(r["batch_size"], r["outcome"]) for r in rows] == [(256, "reached"), (128, "stopped")]
    assert rows[1]["cost"] == pytest.approx(trial["cost_j"]) and rows[1]["run_id"] == "stopped"
    # learnt as a miss: the next recurrence goes back to the size that reached the target
    nxt = BatchSizeOptimizer.from_history(batch_size_config(loaded.job.batch_size_search), trials)
    assert nxt.propose(np.random.default_rng(1)).batch_size == 256
