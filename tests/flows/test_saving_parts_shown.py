"""A run's saving in two parts, mode and timing (scheduler.saving.two_parts, simulate's definition), where users read it.

The deferred run of tests/flows/test_run_chart.py: baseline 560 g, the run 299.6 g. Its own spans laid end to
end from the cron time: speed 0.7 kWh at 420 g/kWh (294 g), then efficiency 0.56 kWh over 60 min at 380 and
20 min at the real speed span's 220 (mean 340: 190.4 g), 484.4 g. Mode part 560 - 484.4 = 75.6 g (13.5 %),
timing part 484.4 - 299.6 = 184.8 g (33.0 %): together the 260.4 g saved. Each test takes well under a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.run.artifacts import report_markdown
from scheduler.store.ledger import Ledger
from tests.flows.test_run_chart import deferred_report


def _recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The run in a fresh ledger, recorded as a run from before the parts existed (a saving without them)."""
    monkeypatch.setenv("GRIDSHIFT_HOME", str(tmp_path))
    report = deferred_report()
    report["saving"] = {"baseline": "the nominal start", "saved_g": 260.4, "saved_pct": 46.5, "baseline_g": 560.0}
    with Ledger() as ledger:
        ledger.record(report)
    return report["run_id"]


def test_runs_json_carries_both_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.cli import app

    _recorded(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["runs", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    parts = row["saving"]["parts"]
    assert parts["mode"]["saving_g"] == pytest.approx(75.6) and parts["mode"]["pct"] == pytest.approx(13.5)
    assert parts["timing"]["saving_g"] == pytest.approx(184.8) and parts["timing"]["pct"] == pytest.approx(33.0)
    assert parts["mode"]["share"] is None  # no optimum is known for one run


def test_gridshift_report_says_how_much_is_mode_and_how_much_timing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.cli import app

    run_id = _recorded(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["report", run_id])
    assert result.exit_code == 0, result.output
    assert "  of which   mode 75.6 g (13.5 %), timing 185 g (33.0 %)" in result.stdout


def test_the_artifact_has_a_row_per_part() -> None:
    markdown = report_markdown(deferred_report())
    assert "| mode part | 75.6000 g (13.5 %) | modelled: the baseline against these modes" in markdown
    assert "| timing part | 184.8000 g (33.0 %) | modelled: these modes from the nominal start" in markdown
