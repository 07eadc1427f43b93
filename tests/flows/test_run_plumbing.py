"""The pieces of ``gridshift run``'s process: which Prefect API, what reaches the terminal, signals."""

from __future__ import annotations

import importlib.util
import io
import logging
import signal
import threading
from pathlib import Path

import pytest

from flows.run.signals import StopSignals
from flows.job.process import KILL_NOW
from flows.job.process import OUTPUT_THREAD_NAME
from flows.run.prefect_server import configured_api_url
from flows.run.run_logging import run_logging


def test_the_api_url_comes_from_the_environment_then_the_active_profile(tmp_path: Path) -> None:
    (tmp_path / "profiles.toml").write_text(
        'active = "work"\n[profiles.work]\nPREFECT_API_URL = "http://work:4200/api"\n[profiles.other]\n')
    home = {"PREFECT_HOME": str(tmp_path)}
    assert configured_api_url({**home, "PREFECT_API_URL": "http://env:4200/api"}) == "http://env:4200/api"
    assert configured_api_url(home) == "http://work:4200/api"
    assert configured_api_url({**home, "PREFECT_PROFILE": "other"}) is None
    assert configured_api_url({"PREFECT_HOME": str(tmp_path / "nowhere")}) is None


def _log_from_prefect(logger: logging.Logger, message: str) -> None:
    """A record made inside the prefect package, as the engine's "Finished in state ..." lines are."""
    spec = importlib.util.find_spec("prefect")
    assert spec is not None and spec.submodule_search_locations
    where = str(Path(list(spec.submodule_search_locations)[0]) / "task_engine.py")
    logger.handle(logger.makeRecord(logger.name, logging.INFO, where, 1, message, (), None))


@pytest.mark.parametrize("verbose", [False, True])
def test_the_terminal_shows_the_job_plainly_and_prefect_only_with_verbose(tmp_path: Path, verbose: bool) -> None:
    stream = io.StringIO()
    logger = logging.getLogger("prefect.task_runs.test")
    logger.setLevel(logging.INFO)
    log_path = tmp_path / "logs" / "run.log"
    with run_logging(log_path, verbose=verbose, stream=stream) as path:
        assert path == log_path
        logger.info("decision: speed mode")
        logger.warning("running measure-only")
        job = threading.Thread(target=lambda: logger.info("epoch 1/2 loss=0.5"), name=OUTPUT_THREAD_NAME)
        job.start()
        job.join()
        _log_from_prefect(logger, "Finished in state Completed()")
    shown = stream.getvalue().splitlines()
    assert shown[:3] == ["gridshift: decision: speed mode", "gridshift: warning: running measure-only",
                         "epoch 1/2 loss=0.5"]
    assert any("Finished in state" in line for line in shown) is verbose
    kept = log_path.read_text()
    assert "Finished in state Completed()" in kept and "epoch 1/2 loss=0.5" in kept
    assert not any(type(h).__name__ == "_ConsoleHandler" for h in logging.getLogger().handlers)


def test_an_unwritable_log_folder_costs_the_file_not_the_run(tmp_path: Path) -> None:
    (tmp_path / "home").write_text("a file where the folder should be")
    stream = io.StringIO()
    with run_logging(tmp_path / "home" / "logs" / "run.log", stream=stream) as path:
        logging.getLogger("prefect.flow_runs").warning("still shown")
    assert path is None and stream.getvalue() == "gridshift: warning: still shown\n"


def test_the_first_signal_raises_the_second_hurries_the_third_raises() -> None:
    stop = StopSignals()
    with stop.installed():
        with pytest.raises(KeyboardInterrupt):
            stop.handle(signal.SIGINT, None)
        assert stop.exit_code == 130 and not stop.forced and not KILL_NOW.is_set()
        # the second must not raise: an exception in the flow's cleanup would lose the measured span
        stop.handle(signal.SIGTERM, None)
        assert stop.forced and KILL_NOW.is_set() and stop.exit_code == 130
        with pytest.raises(SystemExit) as info:  # a cleanup that hangs can still be cut short
            stop.handle(signal.SIGTERM, None)
        assert info.value.code == 143
        stop.settle()
        stop.handle(signal.SIGINT, None)  # counted only: the report is being printed
        assert len(stop.received) == 4
    with StopSignals().installed():
        assert not KILL_NOW.is_set()  # each run starts unhurried


def test_the_handlers_are_installed_for_the_block_only() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals().installed() as stop:
        assert signal.getsignal(signal.SIGTERM) == stop.handle
        assert signal.getsignal(signal.SIGINT) == stop.handle
        assert signal.getsignal(signal.SIGHUP) == stop.handle  # the terminal or SSH session closed
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_ignored_sigint_is_still_taken() -> None:
    # a background job of a non-interactive shell (`cmd &`, as CI runs the suite) starts with SIGINT
    # ignored; `kill -INT` must still stop the run and restore
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopSignals().installed() as stop:
            assert signal.getsignal(signal.SIGINT) == stop.handle
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_closed_terminal_stops_the_run_and_nohup_keeps_it_going() -> None:
    with pytest.raises(SystemExit) as info:
        StopSignals().handle(signal.SIGHUP, None)
    assert info.value.code == 129
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under `nohup gridshift run ...`
    try:
        with StopSignals().installed():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.parametrize(("reason", "shown"), [
    ("efficiency throughout: 20% less energy per unit of work", "  decision   efficiency throughout: 20% less"),
    ("627 g/kWh is above the dirty threshold", "  decision   efficiency mode: 627 g/kWh is above"),
])
def test_the_decision_line_names_the_mode_once(reason: str, shown: str) -> None:
    from flows.report.human import human_report as _human

    report = {"run_id": "r1", "status": "completed", "job": "j", "backend": "simulated", "decision_reason": reason,
              "modes": [{"mode": "efficiency", "start": "2026-12-01T00:00:00+00:00"}], "started_at": "2026-12-01T00:00:00",
              "deferred_s": 0.0, "duration_s": 1.0, "measured": False, "energy_j": 1.0, "carbon_g": 0.1,
              "intensity_g_per_kwh": 600.0, "intensity_kind": "marginal", "intensity_source": "trace"}
    assert shown in _human(report)


def test_the_run_log_is_the_owners_only(tmp_path: Path) -> None:
    with run_logging(tmp_path / "home" / "logs" / "r1.log", stream=io.StringIO()) as log:
        logging.getLogger("gridshift.test").warning("a line")
    assert log is not None and log.read_text().endswith("a line\n")
    assert log.stat().st_mode & 0o777 == 0o600 and log.parent.stat().st_mode & 0o777 == 0o700


def test_prefects_view_link_to_the_temporary_server_is_dropped() -> None:
    # the temporary server has no UI and is gone after the run: a link to it would lead nowhere
    from flows.cli.run import _no_view_link

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("prefect.flow_runs", logging.INFO, __file__, 1, message, None, None)

    assert not _no_view_link(record("View at http://127.0.0.1:41234/runs/flow-run/abc"))
    assert _no_view_link(record("Beginning flow run 'x' for flow 'carbon_aware_training'"))
