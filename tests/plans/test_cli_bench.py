"""``gridshift bench zeus-trace``: JSON keys, human output, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from flows.cli._errors import run_guarded

DATA = Path(__file__).parent.parent / "data" / "zeus"
ARGS = ["bench", "zeus-trace", "--train", str(DATA / "summary_train.csv"), "--power", str(DATA / "summary_power_v100.csv")]


def test_json_keys():
    res = CliRunner().invoke(app, ARGS + ["--workload", "squad", "--recurrences", "10", "--seed", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"workload", "gpu", "recurrences", "seed", "gridshift", "zeus_replica", "oracle_cost_per_run", "default_cost_per_run"}
    assert (out["workload"], out["gpu"], out["recurrences"], out["seed"]) == ("squad", "v100", 10, 2)
    for k in ("gridshift", "zeus_replica"):
        assert set(out[k]) == {"cumulative_cost", "cumulative_energy_j", "cumulative_time_s", "final"}
        b, p = out[k]["final"]
        assert isinstance(b, int) and isinstance(p, int)
        assert out[k]["cumulative_cost"] >= 10 * out["oracle_cost_per_run"] * 0.999


def test_human_output():
    res = CliRunner().invoke(app, ARGS + ["--workload", "cifar100", "--recurrences", "5"])
    assert res.exit_code == 0
    assert "of oracle" in res.stdout and "zeus_replica" in res.stdout


def test_bad_input_exits_2(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["gridshift", *ARGS, "--workload", "mnist"])
    assert run_guarded(app) == 2
    err = capsys.readouterr().err
    assert err.startswith("gridshift: error: unknown workload") and err.count("\n") == 1
