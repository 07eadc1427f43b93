"""`gridshift prices` on a price file: what is published now, in words and in JSON, and one line + exit 2 for bad input.

The web sources through the same command are tested over real HTTP in tests/carbon/test_price_server.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app


@pytest.fixture
def price_file(tmp_path: Path) -> Path:
    """Two days back and three ahead of now, hourly, some below zero: the command reads the clock."""
    now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    path = tmp_path / "prices.csv"
    path.write_text("timestamp,price\n" + "".join(f"{(now + timedelta(hours=h)).isoformat()},{h % 24 - 5:.2f}\n"
                                                  for h in range(-48, 72)))
    return path


def test_prices_from_a_trace_say_what_is_published_and_when(price_file: Path) -> None:
    human = CliRunner().invoke(app, ["prices", "--source", "trace", "-o", f"path={price_file}", "--hours", "24"])
    assert human.exit_code == 0, human.output
    assert human.output.startswith("trace: ") and "13:00 Europe/Berlin" in human.output and "EUR/MWh" in human.output
    out = CliRunner().invoke(app, ["prices", "--source", "trace", "-o", f"path={price_file}", "-o", "market=ERCOT",
                                   "-o", "currency=USD", "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["currency"] == "USD" and got["unit"] == "per MWh" and "America/Chicago" in got["published"]
    now = datetime.now(timezone.utc)
    # only what the market has published by now, each price with its publication time
    assert got["points"] and all(datetime.fromisoformat(p["published_at"]) <= now for p in got["points"])


@pytest.mark.parametrize("args, says", [
    (["--source", "nope"], "unknown price source 'nope'"),
    (["--source", "trace"], "-o path=FILE"),
    (["--source", "trace", "-o", "path=/nonexistent/prices.csv"], "/nonexistent/prices.csv:0: price trace not found"),
    (["--source", "trace", "-o", "pathfile"], "KEY=VALUE"),
    (["--hours", "0"], "--hours must be positive"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    out = CliRunner().invoke(app, ["prices", *args])
    assert out.exit_code == 2 and says in out.output and "Traceback" not in out.output


def test_a_price_file_in_the_wrong_unit_is_refused_at_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "prices.csv"
    bad.write_text("timestamp,price\n2024-01-01T00:00:00+00:00,30\n2024-01-01T01:00:00+00:00,30000\n")
    out = CliRunner().invoke(app, ["prices", "--source", "trace", "-o", f"path={bad}"])
    assert out.exit_code == 2 and f"{bad}:3:" in out.output and "implausible" in out.output
