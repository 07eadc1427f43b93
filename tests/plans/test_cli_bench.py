"""``gridshift bench zeus-trace``: JSON keys, human output, exit codes (on the synthetic traces)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from flows.cli._errors import run_guarded
from plans.zeus_trace import SHAPES

DATA = Path(__file__).parent.parent / "data" / "zeus"
ARGS = ["bench", "zeus-trace", "--train", str(DATA / "summary_train.csv"), "--power", str(DATA / "summary_power_v100.csv")]


def test_json_keys():
    res = CliRunner().invoke(app, ARGS + ["--workload", "squad", "--recurrences", "10", "--seeds", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"recurrences", "seeds", "eta", "beta", "reference", "pairs", "summary"}
    (p,) = out["pairs"]
    assert (p["workload"], p["gpu"], p["recurrences"], p["seeds"]) == ("squad", "v100", 10, [2])
    for k in ("gridshift", "zeus_replica"):
        (r,) = p[k]
        assert set(r) == {"cumulative_cost", "cumulative_energy_j", "cumulative_time_s", "final", "seed"}
        b, w = r["final"]
        assert isinstance(b, int) and isinstance(w, int)
        # the oracle is an expectation: one seed over 10 recurrences may draw a little luckier
        assert r["cumulative_cost"] >= p["oracle_cost"] * 0.95
    assert out["summary"]["pairs"] == 1


def test_human_output_has_every_pair_and_the_baselines():
    res = CliRunner().invoke(app, ["bench", "zeus-trace", "--traces", str(DATA), "--recurrences", "5", "--seeds", "0"])
    assert res.exit_code == 0, res.output
    for col in ("default", "zeus repl", "gridshift", "oracle"):
        assert col in res.stdout
    assert res.stdout.count("\nsquad ") == 2  # every workload on both synthetic GPUs
    assert "geometric mean gridshift/zeus" in res.stdout


def test_synthetic_shapes_run_alone_with_the_baselines():
    res = CliRunner().invoke(app, ["bench", "zeus-trace", "--synthetic", "--recurrences", "5", "--seeds", "0", "--json"])
    assert res.exit_code == 0, res.output
    pairs = json.loads(res.stdout)["pairs"]
    assert {p["workload"] for p in pairs} == {f"synthetic-{name}" for name in SHAPES}
    for p in pairs:  # never-explore and the oracle beside every run, and where gridshift ended
        assert p["default_cost"] >= p["oracle_cost"] > 0 and p["zeus_reference_mean"] is None
        assert p["gridshift"][0]["final"][0] in SHAPES[p["workload"].removeprefix("synthetic-")].sizes


def test_bad_input_exits_2(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["gridshift", *ARGS, "--workload", "mnist"])
    assert run_guarded(app) == 2
    err = capsys.readouterr().err
    assert err.startswith("gridshift: error: unknown workload") and err.count("\n") == 1


def test_bad_seeds_exit_2(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["gridshift", *ARGS, "--seeds", "a-b"])
    assert run_guarded(app) == 2
    assert "--seeds" in capsys.readouterr().err
