"""`gridshift intensity` against the local fake providers: right values, and one line + exit 3 for every failure.

The success runs and one run per failure mode go through the real console script in a subprocess,
over a real socket; the full provider x failure matrix runs the same CLI in-process (same socket).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fakes.provider_server import EM_TOKEN, FAILURES, WT_PASSWORD, WT_USER

from flows.cli import app
from flows.cli._errors import run_guarded

ZONES = {"electricitymaps": "US-CAR-DUK", "watttime": "CAISO_NORTH", "ukgrid": "", "casdk": "eastus"}
CREDS = {"ELECTRICITYMAPS_TOKEN": EM_TOKEN, "WATTTIME_USERNAME": WT_USER, "WATTTIME_PASSWORD": WT_PASSWORD}
#: fast failure: no pause between retries, short timeout (the server holds 'timeout' requests)
FAST = ["-o", "backoff_s=0", "-o", "timeout_s=0.3"]

EXPECTED = {
    "electricitymaps": dict(kind="average", now=216.0, estimated=True, start="2024-03-06T19:00:00+00:00", forecast=[331.0, 318.0]),
    "watttime": dict(kind="marginal", now=1048.4131919701972 * 0.45359237, estimated=False, start="2022-07-15T00:00:00+00:00",
                     forecast=[1048.4131919701972 * 0.45359237, 1051.0880801214637 * 0.45359237]),
    "ukgrid": dict(kind="average", now=263.0, estimated=False, start="2018-01-20T12:00:00+00:00", forecast=[266.0, 254.0, 241.0]),
    "casdk": dict(kind="average", now=70.0, estimated=False, start="2022-05-17T20:45:00+00:00", forecast=[532.02293146, 525.5]),
}


def _args(provider: str, url: str, *extra: str) -> list[str]:
    zone = ["--zone", ZONES[provider]] if ZONES[provider] else []
    return ["intensity", "--provider", provider, *zone, "--base-url", url, "--json", *extra]


def _cli_subprocess(args: list[str]) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("gridshift")
    cmd = [str(script)] if script.exists() else [sys.executable, "-c", "from flows.cli import main; main()"]
    env = {**os.environ, **CREDS}
    env.pop("GRIDSHIFT_DEBUG", None)
    return subprocess.run(cmd + args, capture_output=True, text=True, env=env, timeout=60)


def _cli_inprocess(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    for k, v in CREDS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GRIDSHIFT_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["gridshift", *args])
    code = run_guarded(app)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("provider", list(ZONES))
def test_cli_prints_the_right_values(provider: str, server) -> None:
    proc = _cli_subprocess(_args(provider, server.url, "--forecast"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    exp = EXPECTED[provider]
    assert set(data) == {"provider", "zone", "kind", "unit", "now", "forecast"}
    assert (data["provider"], data["zone"], data["kind"], data["unit"]) == (provider, ZONES[provider], exp["kind"], "gCO2/kWh")
    assert set(data["now"]) == {"start", "g_per_kwh", "estimated"}
    assert data["now"]["g_per_kwh"] == pytest.approx(exp["now"])
    assert (data["now"]["start"], data["now"]["estimated"]) == (exp["start"], exp["estimated"])
    assert all(set(f) == {"start", "g_per_kwh"} for f in data["forecast"])
    assert [f["g_per_kwh"] for f in data["forecast"]] == pytest.approx(exp["forecast"])


def test_without_forecast_flag_there_is_no_forecast_key(server) -> None:
    proc = _cli_subprocess(_args("ukgrid", server.url))
    assert proc.returncode == 0 and "forecast" not in json.loads(proc.stdout)


def _assert_one_line_exit_3(code: int, stdout: str, stderr: str, expect: int = 3) -> None:
    assert code == expect, stderr
    if stdout:  # with --json (run through run_guarded): exactly one JSON object saying the same
        import json

        answer = json.loads(stdout)
        assert answer["status"] == "error" and answer["exit_code"] == expect
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gridshift: error: "), stderr
    assert "Traceback" not in stderr


#: a subprocess run for a spread of failure modes and providers (the in-process matrix below covers them all)
SUBPROCESS_CASES = [("401-ratelimit", "electricitymaps"), ("403-html", "watttime"), ("429", "ukgrid"), ("timeout", "casdk"),
                    ("malformed", "electricitymaps"), ("204", "casdk")]


@pytest.mark.parametrize("mode, provider", SUBPROCESS_CASES)
def test_failure_modes_give_one_line_and_exit_3_in_a_subprocess(mode: str, provider: str, server) -> None:
    server.failure = mode
    proc = _cli_subprocess(_args(provider, server.url, *FAST))
    _assert_one_line_exit_3(proc.returncode, proc.stdout, proc.stderr)
    if mode == "401-ratelimit" and provider == "electricitymaps":
        assert "rate-limited" in proc.stderr


@pytest.mark.parametrize("provider", list(ZONES))
@pytest.mark.parametrize("mode", FAILURES)
def test_every_failure_mode_for_every_provider(mode: str, provider: str, server, monkeypatch, capsys) -> None:
    server.failure = mode
    code, out, err = _cli_inprocess(_args(provider, server.url, "--forecast", *FAST), monkeypatch, capsys)
    # a zone the provider says it does not know is bad input (2), like a misspelt provider; WattTime's
    # "no coverage" and the UK API's bare 400 do not say so, and stay the environment (3)
    unknown_zone = mode == "unknown-zone" and provider in ("electricitymaps", "casdk")
    _assert_one_line_exit_3(code, out, err, expect=2 if unknown_zone else 3)
    if mode == "timeout":
        assert "within 0.3 s" in err
    if mode == "429":
        assert "429" in err and len(server.requests) == 3  # two retries, then give up


def test_bad_wattTime_credentials_name_the_variables(server, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WATTTIME_PASSWORD", "wrong")
    for k in ("ELECTRICITYMAPS_TOKEN", "WATTTIME_USERNAME"):
        monkeypatch.setenv(k, CREDS[k])
    monkeypatch.setattr(sys, "argv", ["gridshift", *_args("watttime", server.url)])
    code = run_guarded(app)
    err = capsys.readouterr().err
    assert code == 3 and "WATTTIME_PASSWORD" in err and "HTML error page" in err


def test_missing_token_and_unknown_zone(server, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["gridshift", *_args("electricitymaps", server.url)])
    assert run_guarded(app) == 3 and "ELECTRICITYMAPS_TOKEN" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["gridshift", "intensity", "--provider", "casdk", "--zone", "mars", "--base-url", server.url])
    assert run_guarded(app) == 2 and "Unknown region" in capsys.readouterr().err  # an unknown zone is bad input


def test_bad_option_value_is_exit_2(server, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["gridshift", *_args("ukgrid", server.url, "-o", "timeout_s=soon")])
    assert run_guarded(app) == 2
    assert capsys.readouterr().err.startswith("gridshift: error: ukgrid: timeout_s must be a number")
