"""`gridshift simulate` prints figures in units that fit the job and says where --plot wrote the PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from simulation.human_units import energy_unit, figure, mass_unit

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = REPO / "examples" / "nightly.yaml"


@pytest.mark.parametrize("grams, shown", [(0.42, "0.42 g"), (12.34, "12.3 g"), (4080.0, "4.08 kg"), (2.5e6, "2.50 t")])
def test_mass_units(grams: float, shown: str) -> None:
    unit, scale = mass_unit(grams)
    assert f"{figure(grams, scale)} {unit}" == shown


@pytest.mark.parametrize("joules, shown", [(626.6, "627 J"), (12_345.0, "12.3 kJ"), (22.7e6, "22.7 MJ"), (1e9, "278 kWh")])
def test_energy_units(joules: float, shown: str) -> None:
    unit, scale = energy_unit(joules)
    assert f"{figure(joules, scale)} {unit}" == shown


def _trace(path: Path, days: int = 4) -> Path:
    rows = [f"2024-01-{1 + i // 48:02d} {(i % 48) // 2:02d}:{30 * (i % 2):02d},"
            f"{300 + 120 * math.cos(((i % 48) / 2 - 20) / 24 * 2 * math.pi):.1f}\n" for i in range(days * 48)]
    path.write_text("time,gco2\n" + "".join(rows))
    return path


def _short_job_policy(tmp_path: Path) -> Path:
    text = NIGHTLY.read_text().replace("expected_duration_s: 10800", "expected_duration_s: 300")
    assert "expected_duration_s: 300" in text
    policy = tmp_path / "short.yaml"
    policy.write_text(text)
    (tmp_path / "train_tiny.py").write_text("")
    return policy


def test_a_short_job_is_shown_in_grams_and_kilojoules_not_0_00_kg(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["simulate", str(_short_job_policy(tmp_path)), "--trace", str(_trace(tmp_path / "t.csv"))])
    assert out.exit_code == 0, out.output
    header = next(line for line in out.stdout.splitlines() if "strategy" in line)
    assert "CO2 g" in header and "energy kJ" in header, header
    figures = [line for line in out.stdout.splitlines() if line.lstrip().startswith(("baseline", "static", "gridshift ("))]
    assert figures and not any("0.00 " in line for line in figures), figures  # grams, not "0.00" kg


def test_plot_path_is_printed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "sim.png"
    out = CliRunner().invoke(app, ["simulate", str(NIGHTLY), "--trace", str(_trace(tmp_path / "t.csv")), "--plot", str(png)])
    assert out.exit_code == 0, out.output
    assert f"plot written to {png.resolve()}" in out.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_forecast_archive_says_how_much_of_the_horizons_it_covered(tmp_path: Path) -> None:
    # issued once, at noon on day 2, for the following 24 h: most nights are answered by the built-in forecaster
    rows = [f"2024-01-02 12:00,2024-01-{2 + (12 + h) // 24:02d} {(12 + h) % 24:02d}:00,{200 + h}\n" for h in range(24)]
    (tmp_path / "issued.csv").write_text("issued_at,valid_for,g\n" + "".join(rows))
    args = ["simulate", str(NIGHTLY), "--trace", str(_trace(tmp_path / "t.csv")), "--forecast-file", str(tmp_path / "issued.csv")]
    human = CliRunner().invoke(app, args)
    assert human.exit_code == 0, human.output
    line = next(ln for ln in human.stdout.splitlines() if "the archive covered" in ln)
    assert "of what gridshift's plans asked" in line and "the built-in forecaster filled the rest" in line
    js = CliRunner().invoke(app, [*args, "--json"])
    assert js.exit_code == 0, js.output
    assert 0.0 < json.loads(js.stdout)["forecast_coverage"] < 0.5
