"""``gridshift run POLICY [-- CMD ...]`` and ``gridshift runs``."""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer

from flows.cli import FINISHED_CLEANLY, app
from flows.cli._errors import EXIT_ENV, EXIT_FAILED, EXIT_INPUT, echo, exit_code_for_type, fail
from flows.run.signals import StopSignals
from flows.run.prefect_server import STOP_GRACE_S, PrefectServerError, TemporaryServer, configured_api_url, drain_prefect_workers
from flows.run.run_ids import new_run_id


def _quiet_prefect_defaults() -> None:
    """Offline-friendly Prefect defaults; users' explicit settings win."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")  # Prefect's client telemetry
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")


#: exit code of a run stopped by SIGINT / SIGTERM (128 + signal number, as shells report it; SIGHUP gives 129)
EXIT_INTERRUPTED, EXIT_TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM


def _exit_code_of(report: dict[str, Any]) -> int:
    """The exit code for a recorded failed run, from the class of the error that failed it."""
    module, _, qualname = str(report.get("extra", {}).get("error_type", "")).partition(":")
    if (module, qualname) in (("builtins", "SystemExit"), ("prefect.exceptions", "TerminationSignal")):
        return EXIT_TERMINATED  # the signal handlers raise SystemExit(128 + signum); Prefect's, TerminationSignal
    if (module, qualname) == ("builtins", "KeyboardInterrupt"):
        return EXIT_INTERRUPTED
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError, ValueError):  # no type recorded (a failed job) or gone since
        return EXIT_FAILED
    return exit_code_for_type(cls) if isinstance(cls, type) and issubclass(cls, BaseException) else EXIT_FAILED


#: how long the temporary Prefect server may take to start (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS
#: overrides); a loaded 2-core machine with a new database has needed 90 s
SERVER_START_TIMEOUT_S = 180.0


def _no_view_link(record: logging.LogRecord) -> bool:
    """Drops Prefect's "View at <url>" line: the temporary server serves no UI and is gone after the run."""
    return not record.getMessage().startswith("View at ")


@contextmanager
def _prefect_api(log_path: Path | None, stop: StopSignals) -> Iterator[tuple[TemporaryServer, "Future[float]"] | None]:
    """The Prefect server named by PREFECT_API_URL (checked now), else a temporary one, started now
    and stopped when the block ends (at once after a second signal). Says which at once: this is the
    run's first line, and the next may be many seconds away (Prefect's import, the server's start)."""
    url = configured_api_url()
    if url:  # checked already by preflight_run (flows.run.preflight.prefect_api_problem)
        echo(f"gridshift: using the Prefect server at {url}", err=True)
        try:
            yield None
        finally:
            # also after a second signal: undrained, Prefect's log handler flushes at exit (logging.shutdown)
            # and retries against the server for seconds; drained while it is up, it costs a fraction of one
            drain_prefect_workers()
        return
    server = TemporaryServer(log_path or Path(os.devnull))
    server.start()
    echo("gridshift: starting a temporary Prefect server (set PREFECT_API_URL to a running one to skip this"
         + (f"; log: {log_path})" if log_path else ")"), err=True)
    ready = _watch_start(server, stop)
    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = server.api_url  # read by Prefect when it is imported, later
    flow_runs = logging.getLogger("prefect.flow_runs")
    flow_runs.addFilter(_no_view_link)
    try:
        yield server, ready
    finally:
        flow_runs.removeFilter(_no_view_link)
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous
        drain_prefect_workers()  # before the server goes, also after a second signal (see above)
        server.stop(grace_s=0.0 if stop.forced else STOP_GRACE_S)  # insisted: its database survives a kill


def _watch_start(server: TemporaryServer, stop: StopSignals) -> "Future[float]":
    """Wait for the temporary server in a thread of its own, from its start: the progress notes then
    also cover the seconds the main thread spends importing Prefect, which would otherwise be silent."""
    timeout_s = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS") or SERVER_START_TIMEOUT_S)
    ready: Future[float] = Future()

    def note(waited_s: float) -> None:
        if not stop.received:  # after a Ctrl-C the user waits for the stop, not for the server
            echo(f"gridshift: still starting the temporary Prefect server ({waited_s:.0f} s; "
                 f"gives up after {timeout_s:.0f} s)", err=True)

    def wait() -> None:
        try:
            ready.set_result(server.wait_ready(timeout_s, on_wait=note))
        except BaseException as exc:  # handed to the main thread by _wait_for
            ready.set_exception(exc)

    threading.Thread(target=wait, name="gridshift-server-start", daemon=True).start()
    return ready


def _wait_for(ready: "Future[float] | None") -> None:
    if ready is None:
        return
    try:
        ready.result()
    except PrefectServerError as exc:
        raise fail(exc, EXIT_ENV) from None


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def run(
    policy: Annotated[Path, typer.Argument(help="Policy YAML file.")],
    command: Annotated[Optional[list[str]], typer.Argument(help="Training command after `--` (overrides the policy's job).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout; logs go to stderr.")] = False,
    backend: Annotated[Optional[str], typer.Option(help="Override the policy's backend (auto, nvidia, simulated, ...).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also show Prefect's own log lines (always in the run's log file).")] = False,
) -> None:
    """Run the job under POLICY through a Prefect flow and report energy, time and carbon."""
    from flows.run.preflight import PreflightError, preflight_run
    from flows.run.run_logging import logs_dir, run_logging
    from scheduler.settings.clock_plans import load_clock_plans
    from scheduler.errors import PolicyError

    try:
        # bad input, an unusable machine (or PREFECT_API_URL not answering): in a second, before the server starts
        try:
            load_clock_plans(preflight_run(policy, command=command, backend=backend), policy)
        except (PolicyError, PreflightError) as exc:
            raise fail(exc) from None
        _quiet_prefect_defaults()
        stop = StopSignals()
        run_id = new_run_id()
        with stop.installed(), run_logging(logs_dir() / f"{run_id}.log", verbose=verbose) as log_path:
            try:
                # the server starts first: its start-up overlaps Prefect's import below
                with _prefect_api(log_path, stop) as temporary:
                    _run(policy, command, json_out, backend, run_id, stop, temporary, log_path)
            except (KeyboardInterrupt, SystemExit):  # a signal before the flow started
                if stop.exit_code is None:
                    raise
                raise fail("interrupted before the run started; nothing was changed", stop.exit_code) from None
    finally:
        FINISHED_CLEANLY.add("run")


def _run(policy: Path, command: list[str] | None, json_out: bool, backend: str | None, run_id: str,
         stop: StopSignals, temporary: tuple[TemporaryServer, "Future[float]"] | None, log_path: Path | None) -> None:
    from scheduler.store.ledger import Ledger

    from flows.report.human import human_report
    from flows.training import carbon_aware_training, quiet_domain_tracebacks

    server, ready = temporary if temporary is not None else (None, None)
    _wait_for(ready)
    quiet_domain_tracebacks()

    real_stdout = sys.stdout
    state: Any = None
    try:
        # Prefect and the job may print; keep stdout for the report alone.
        sys.stdout = sys.stderr
        with _api_settings(server):
            state = carbon_aware_training(policy_path=str(policy), run_id=run_id, command=command or None,
                                          backend_name=backend, return_state=True)
    except (KeyboardInterrupt, SystemExit):
        # a signal: the flow stopped the job, restored the settings and recorded the run on the way out
        if stop.exit_code is None:
            raise
    finally:
        sys.stdout = real_stdout
    stop.settle()
    with Ledger() as ledger:
        # by key: a list of recent runs could miss this one while other runs finish concurrently
        report = ledger.get(run_id)
    if report is None:
        if stop.exit_code is not None:
            raise fail("stopped before the run was recorded", stop.exit_code)
        exc = state.result(raise_on_failure=False)
        raise fail(exc if isinstance(exc, BaseException) else f"run {run_id} failed before it could be recorded")
    # a closed terminal (SIGHUP) makes these writes fail: echo drops them, the exit code stays
    if json_out:
        echo(json.dumps(report, sort_keys=True))
    else:
        echo(human_report(report, log_path))
    if report["status"] != "completed":
        if stop.exit_code is not None:
            restored = "settings may not be restored" not in (report["error"] or "")
            echo("gridshift: stopped by " + signal.Signals(stop.exit_code - 128).name + "; "
                       + ("settings restored" if restored else
                          "settings may not be restored: run `gridshift gpu restore`") + ", run recorded as failed",
                       err=True)
            raise typer.Exit(stop.exit_code)
        if not json_out:
            echo(f"gridshift: error: {report['error'] or 'the run failed'}", err=True)
        raise typer.Exit(_exit_code_of(report))


@contextmanager
def _api_settings(server: TemporaryServer | None) -> Iterator[None]:
    """Point Prefect at the temporary server also when Prefect was configured before it started (a
    program, or a test, that imported Prefect first reads settings from its context, not the environment)."""
    if server is None:
        yield
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield


def _missed_by_serve(*, job: str | None, limit: int | None) -> list[str]:
    """Warnings for the runs `gridshift serve` recorded as missed in its default store, newest first.

    A missed run never started, so the ledger has no row for it; without this a night that did not
    happen would be silent in `gridshift runs`.
    """
    import sqlite3

    from scheduler.service.serve import ServeStore, default_store_path

    store = default_store_path()
    if not store.is_file():
        return []
    try:
        missed = ServeStore(store).runs(state="missed")
    except sqlite3.Error as exc:
        return [f"warning: cannot read gridshift serve's missed runs from {store}: {exc}"]
    if job is not None:
        missed = [r for r in missed if r.key.rpartition("@")[0] == job]
    return [f"warning: gridshift serve missed run {r.key} (planned for {r.run_at:%Y-%m-%d %H:%M} UTC): {r.outcome}"
            for r in list(reversed(missed))[:limit]]  # the store lists them earliest first


@app.command()
def runs(
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    job: Annotated[Optional[str], typer.Option(help="Only runs of this job.")] = None,
    limit: Annotated[int, typer.Option(min=0, help="At most this many runs, newest first; 0: all of them.")] = 20,
    source: Annotated[str, typer.Option("--from", help="ledger (this machine's runs) or prefect (every node's runs, "
                                        "from the run artifacts on the Prefect server at PREFECT_API_URL).")] = "ledger",
) -> None:
    """List recorded runs (newest first) from the ledger, or from the Prefect API (`--from prefect`)."""
    from scheduler.store.ledger import Ledger

    limit_or_all = limit or None  # 0 is "no limit", not "none": an empty list would read as "no runs recorded"
    if source not in ("ledger", "prefect"):
        raise fail(f"--from: expected 'ledger' or 'prefect', got {source!r}", EXIT_INPUT)
    if source == "prefect":
        from flows.deployments.fleet_runs import runs_from_prefect

        try:
            rows = runs_from_prefect(job=job, limit=limit_or_all)
        except Exception as exc:  # server down or unreachable
            raise fail(f"cannot read runs from the Prefect API: {type(exc).__name__}: {exc}", EXIT_ENV) from None
        where = "the Prefect API"
    else:
        with Ledger() as ledger:
            rows = ledger.runs(job=job, limit=limit_or_all)
        where = f"ledger: {ledger.path}"
        for line in _missed_by_serve(job=job, limit=limit_or_all):
            typer.echo(line, err=True)
    from scheduler.saving import with_saving  # importing scheduler imports pydantic: not for every CLI call

    rows = [with_saving(r) for r in rows]  # runs recorded before the saving was: computed now from their reports
    for r in rows:  # on stderr, so --json stays one object on stdout
        if r.get("late_s"):
            typer.echo(f"warning: run {r['run_id']} of {r['job']} finished {r['late_s']:.0f} s after its deadline", err=True)
    if json_out:
        typer.echo(json.dumps(rows, sort_keys=True))
        return
    if not rows:
        typer.echo(f"no runs of job {job!r} recorded ({where})" if job else f"no runs recorded yet ({where})")
        return
    sites = any("site" in (r.get("extra") or {}) for r in rows)
    typer.echo(f"{'run id':<24} {'job':<16} {'status':<9} {'backend':<10} {'energy J':>10} {'carbon g':>9} {'saving':>7} "
               f"{'time s':>8}" + ("  site" if sites else ""))
    for r in rows:
        tag = "" if r["measured"] else "*"
        site = (r.get("extra") or {}).get("site", "-") if sites else ""
        pct = r["saving"].get("saved_pct")
        typer.echo(f"{r['run_id']:<24} {r['job'][:16]:<16} {r['status']:<9} {r['backend']:<10} "
                   f"{r['energy_j']:>9.1f}{tag or ' '} {r['carbon_g']:>9.4f} {'-' if pct is None else f'{pct:.1f}%':>7} "
                   f"{r['duration_s']:>8.1f}" + (f"  {site}" if sites else ""))
    typer.echo("saving: carbon against the nominal start (the cron time) in the reference mode (a modelled baseline; "
               "`gridshift report RUN_ID` says how; - where it cannot be told)")
    if any(not r["measured"] for r in rows):
        typer.echo("* simulated backend: modelled energy")


@app.command()
def report(
    run_id: Annotated[Optional[str], typer.Argument(help="Run id, or its unique beginning (default: the latest run).")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write the run's chart to FILE.png (or FILE.svg): intensity as planned and as measured, the start against the nominal (cron) time, the mode spans, the deadline.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run's report as one JSON object (with its saving).")] = False,
) -> None:
    """Show what a run decided and saved: its report again, or its chart with --plot."""
    from scheduler.saving import with_saving
    from scheduler.store.ledger import Ledger

    if plot is not None and plot.suffix.lower() not in (".png", ".svg"):
        raise fail(f"--plot {plot}: the chart is written as .png or .svg", EXIT_INPUT)
    with Ledger() as ledger:
        found = _find_run(ledger, run_id)
    if isinstance(found, str):
        raise fail(found, EXIT_INPUT)
    found = with_saving(found)
    if plot is not None:
        from flows.report.chart import run_chart

        chart = run_chart(found)
        try:
            if plot.suffix.lower() == ".svg":
                from flows.report.svg import chart_svg

                plot.write_text(chart_svg(chart), encoding="utf-8")
            else:
                from flows.report.png import write_png

                write_png(chart, plot)
        except OSError as exc:
            raise fail(f"--plot {plot}: {exc.strerror or exc}", EXIT_INPUT) from None
        except ImportError as exc:  # a broken install: matplotlib is a dependency
            raise fail(f"--plot {plot}: needs matplotlib, a dependency of gridshift that is missing here ({exc}); "
                       "reinstall gridshift with its dependencies, or write FILE.svg", EXIT_ENV) from None
        echo(f"gridshift: chart of run {found['run_id']} written to {plot}", err=True)
    if json_out:
        echo(json.dumps(found, sort_keys=True))
    elif plot is None:
        from flows.report.human import human_report

        echo(human_report(found))


def _find_run(ledger: Any, run_id: str | None) -> dict[str, Any] | str:
    """The ledger's run with that id (or the only one that begins so; the latest without one), or why there is none."""
    if run_id is not None and (exact := ledger.get(run_id)) is not None:
        return exact
    recent = ledger.runs(limit=None if run_id else 1)
    if run_id is None:
        return recent[0] if recent else f"no runs recorded yet (ledger: {ledger.path})"
    hits = [r for r in recent if str(r["run_id"]).startswith(run_id)]
    if len(hits) == 1:
        return hits[0]
    if hits:
        return f"run id {run_id!r} is the beginning of {len(hits)} runs: " + ", ".join(r["run_id"] for r in hits[:5])
    return f"no run {run_id!r} in the ledger ({ledger.path}); `gridshift runs` lists them"
