"""``gridshift profile`` commands and the benchmark's JSON contract (small instances; speed lives in the benchmark)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from plans.dvfs.plan_file import load_plan

REPO = Path(__file__).resolve().parents[2]
SYNTH = REPO / "tests" / "data" / "SYNTHETIC_gpt3xl_layer_h200_profile.json"
runner = CliRunner()


def test_profile_show_labels_synthetic() -> None:
    res = runner.invoke(app, ["profile", "show", str(SYNTH)])
    assert res.exit_code == 0, res.output
    assert "SYNTHETIC" in res.output and "103 kernels/iteration" in res.output


def test_profile_plan_writes_an_executable_plan(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    res = runner.invoke(app, ["profile", "plan", str(SYNTH), "--epsilon", "0.02", "--tau-sw-ms", "5", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert payload["modelled"] is True and payload["source"] == "synthetic" and payload["switch_latency_ms"] == 5.0
    plan = load_plan(out, gpu_model="NVIDIA H200")
    assert plan.phase_clocks() and plan.prediction.modelled


def test_profile_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    res = runner.invoke(app, ["profile", "plan", str(tmp_path / "missing.json")])
    assert res.exit_code == 2
    assert "gridshift: error:" in res.output and "no such kernel profile file" in res.output and "Traceback" not in res.output
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": []}')
    res = runner.invoke(app, ["profile", "convert", str(bad), "--out", str(tmp_path / "p.json"), "--gpu-model", "X"])
    assert res.exit_code == 2 and "no GPU kernels" in res.output


def test_profile_convert_a_trace(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    res = runner.invoke(app, ["profile", "convert", str(REPO / "tests/data/torch_trace_tiny.json"), "--out", str(out),
                              "--gpu-model", "NVIDIA H200"])
    assert res.exit_code == 0, res.output
    assert "5 kernels over 2 iterations" in res.output


def test_profile_run_passes_the_output_path(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    script = ("import os; from plans.dvfs.profiles.synthetic import gpt3xl_layer_profile as g; "
              "from plans.dvfs.profiles.kernel_profile import save_profile as s; s(g(), os.environ['GRIDSHIFT_PROFILE_OUT'])")
    res = runner.invoke(app, ["profile", "run", "--out", str(out), "--", sys.executable, "-c", script])
    assert res.exit_code == 0, res.output
    assert out.exists() and "103 kernels" in res.output
    res = runner.invoke(app, ["profile", "run", "--out", str(tmp_path / "none.json"), "--", sys.executable, "-c", "pass"])
    assert res.exit_code == 1 and "GRIDSHIFT_PROFILE_OUT" in res.output


def test_sweep_clocks_is_refused_without_explicit_permission(tmp_path: Path) -> None:
    res = runner.invoke(app, ["profile", "run", "--out", str(tmp_path / "p.json"), "--sweep-clocks", "1500,1980", "--",
                              sys.executable, "-c", "raise SystemExit(9)"])
    assert res.exit_code == 2 and "allow-clock-changes" in res.output  # refused before the command runs
    script = ("import os; from plans.dvfs.profiles.synthetic import gpt3xl_layer_profile as g; "
              "from plans.dvfs.profiles.kernel_profile import save_profile as s; "
              "assert os.environ['GRIDSHIFT_SWEEP_CLOCKS'] == '1500,1980'; s(g(), os.environ['GRIDSHIFT_PROFILE_OUT'])")
    res = runner.invoke(app, ["profile", "run", "--out", str(tmp_path / "p.json"), "--sweep-clocks", "1500,1980",
                              "--allow-clock-changes", "--", sys.executable, "-c", script])
    assert res.exit_code == 0, res.output


def test_benchmark_json_contract() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from dvfs import run
    finally:
        sys.path.pop(0)
    out = run(SYNTH, layers=2, epsilon=0.02, tau_ms=5.0, with_oracle=False)
    assert {"profile", "switch_latency_ms", "planner_seconds", "strategies"} <= set(out)
    names = [s["name"] for s in out["strategies"]]
    assert len(names) >= 5 and all(s["modelled"] is True for s in out["strategies"])
    assert {"energy_saving_pct", "slowdown_pct", "modelled", "name"} <= set(out["strategies"][0])
    by = {s["name"]: s for s in out["strategies"]}
    assert by["default clocks"]["energy_saving_pct"] == 0.0
    ours = by["gridshift plan with switch cost"]
    assert ours["slowdown_pct"] <= 2.0 + 1e-6
    assert ours["energy_saving_pct"] >= by["best single static clock"]["energy_saving_pct"] - 1e-9
    assert [r["switch_latency_ms"] for r in out["switch_latency_sweep"]] == [0.0, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0]
    assert out["profile_source"] == "synthetic"


def test_public_surface_is_curated() -> None:
    import plans.dvfs as dvfs

    assert dvfs.__all__ == sorted(dvfs.__all__)
    assert all(hasattr(dvfs, name) for name in dvfs.__all__)
    import subprocess

    code = "import sys, plans.dvfs, plans.dvfs.profiles.capture, flows.cli; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0  # torch is imported lazily
