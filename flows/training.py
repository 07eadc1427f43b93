"""The Prefect flow that runs one training job under a policy. Wiring only.

Tasks: wait until start -> read intensity -> decide -> apply mode & run job (re-deciding every
interval, metering each mode span) -> restore settings (always) -> record the report (ledger +
artifact). A failed job fails the flow run, after its report is recorded.
"""

from __future__ import annotations

import logging
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import TerminationSignal

from backends.base import Backend
from backends.errors import NoPermission
from backends.safety import install_restore_handlers
from backends.registry import create_backend
from carbon.monitor import CarbonMonitor, Reading
from carbon.series import as_utc
from flows.run.artifacts import artifact_key, report_markdown
from flows.deployments.flow_parameters import JsonParametersFlow
from flows.job.process import JobFailed, JobHandle, start_callable, start_command
from flows.job.mode_file import ModeFileChannel, mode_batch_sizes
from flows.run.run_ids import new_run_id
from flows.sources import monitor_for
from flows.supervise import PROGRESS_ENV, SupervisedRun, progress_file_reader, supervise
from flows.job.trials import CostWatchedJob, begin_trial
from flows.job.windows import CHECKPOINT_DIR_ENV, DEFER_MIN_S, checkpoint_dir, defer_next_window, flow_run_deployment, resumed_run
from plans.errors import BadProfile
from plans.profile_store import PowerProfile, ProfileStore
from scheduler.settings.auto_power import job_fingerprint, profiles_dir
from scheduler.settings.clock_plans import ModePlan, load_clock_plans
from scheduler.planner.thresholds import Decision, decide
from scheduler.errors import LedgerError
from scheduler.store.ledger import Ledger
from scheduler.planner import ModeFigures
from scheduler.planner.inputs import plans_with_planner, policy_figures
from scheduler.policy.types import Policy
from scheduler.policy.checks import job_cwd
from scheduler.policy.loader import load_policy
from scheduler.report import RunReport, deadline_miss
from scheduler.policy.sites import policy_at_site

__all__ = ["carbon_aware_training", "new_run_id", "quiet_domain_tracebacks"]


class _DropDomainTracebacks(logging.Filter):
    """Prefect logs every flow/task exception with its traceback. For expected failures (a job that
    exits non-zero, a provider outage, a missing privilege) the one-line message says it all."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and _is_domain_error(record.exc_info[1]):
            record.exc_info = None
            record.exc_text = None
        return True


def _is_domain_error(exc: BaseException) -> bool:
    from backends.errors import BackendError
    from carbon.errors import CarbonError
    from scheduler.errors import SchedulerError

    return isinstance(exc, (JobFailed, BackendError, CarbonError, SchedulerError))


def quiet_domain_tracebacks() -> None:
    """Install the filter on Prefect's run loggers (idempotent)."""
    for name in ("prefect.flow_runs", "prefect.task_runs", "prefect.engine"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropDomainTracebacks) for f in logger.filters):
            logger.addFilter(_DropDomainTracebacks())


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@task(name="read intensity", cache_policy=NO_CACHE)
def read_intensity(monitor: CarbonMonitor, now: datetime) -> Reading:
    return monitor.read(now)


@task(name="decide", cache_policy=NO_CACHE)
def decide_mode(policy: Policy, reading: Reading, now: datetime, deadline: datetime | None) -> Decision:
    return decide(policy, reading.series, now=now, start_at=now,
                  remaining_work_s=policy.job.expected_duration_s, deadline=deadline)


@task(name="wait until start", cache_policy=NO_CACHE)
def wait_until(start_at: datetime, now: Callable[[], datetime] = _utcnow, sleep: Callable[[float], None] = time.sleep) -> float:
    logger = get_run_logger()
    waited = 0.0
    while (left := (start_at - now()).total_seconds()) > 0:
        logger.info("waiting %.0f s more until %s UTC", left, f"{start_at:%H:%M}")
        step = min(left, 60.0)
        sleep(step)
        waited += step
    return waited


@task(name="run job under policy", cache_policy=NO_CACHE)
def run_supervised(policy: Policy, backend: Backend, control: bool, monitor: CarbonMonitor, decision: Decision | None,
                   reading: Reading, command: list[str] | None, deadline: datetime | None, out: SupervisedRun,
                   clock_plans: dict[str, ModePlan] | None = None, power_profile: PowerProfile | None = None,
                   fingerprint: str = "", figures: list[ModeFigures] | None = None, run_id: str = "",
                   defer_pauses_over_s: float | None = None, ledger_path: str | None = None,
                   policy_dir: Path | None = None) -> SupervisedRun:
    logger = get_run_logger()
    caps = backend.capabilities()

    progress_path = Path(tempfile.mkdtemp(prefix="gridshift-")) / "progress"
    trial = begin_trial(policy, fingerprint, caps, ledger_path=ledger_path, run_id=run_id, measured=backend.measured)
    if trial is not None:
        logger.info("batch size %d (%s): %s", trial.proposal.batch_size, trial.proposal.phase, trial.proposal.reason)
    channel = ModeFileChannel(progress_path.parent, mode_batch_sizes(policy, trial.proposal.batch_size if trial else None),
                              {m: p.path for m, p in (clock_plans or {}).items()})
    watched: list[CostWatchedJob] = []
    argv = command or policy.job.command
    pausable = policy.job.checkpointable and bool(argv)  # the loader refuses a checkpointable callable
    # a checkpointable job gets its grace period to write the checkpoint; others the usual one
    grace = {"kill_grace_s": policy.job.stop_grace_s} if pausable else {}

    def start_job(env: dict[str, str]) -> JobHandle | CostWatchedJob:
        job_env = {**policy.job.env, **env, PROGRESS_ENV: str(progress_path)}
        if pausable:
            job_env[CHECKPOINT_DIR_ENV] = str(checkpoint_dir(run_id))
        if not argv:
            assert policy.job.callable is not None
            if trial is not None and trial.beta is not None:
                out.warnings.append("batch-size early stop needs a command job: a callable cannot be stopped")
            return start_callable(policy.job.callable, env=job_env, on_line=logger.info)
        # the policy's own command runs where its relative paths point: job.workdir, else the policy's folder
        cwd = policy.job.workdir if command else job_cwd(policy.job, policy_dir)
        handle = start_command(argv, on_line=logger.info, env=job_env, cwd=cwd, **grace)
        if trial is None:
            return handle
        watched.append(trial.watch(handle, backend.energy_mj))
        return watched[-1]

    try:
        run = supervise(policy=policy, backend=backend, caps=caps, control=control, monitor=monitor, first=decision,
                        first_reading=reading, start_job=start_job, now=_utcnow, log=logger.info, deadline=deadline,
                        out=out, progress=progress_file_reader(progress_path),
                        clock_plans=clock_plans, power_profile=power_profile, fingerprint=fingerprint,
                        profile_dir=profiles_dir(), figures=figures, pausable=pausable,
                        defer_pauses_over_s=defer_pauses_over_s, mode_file=channel)
    finally:
        if trial is not None:  # recorded whatever happened, so a pending trial never lingers
            result, _ = channel.result()
            try:
                out.extra["batch_size_trial"] = trial.finish(watched[0] if watched else None, result, out.exit_code,
                                                             channel.batch_sizes_used(result))
            except LedgerError as exc:  # the run's own outcome (and its report) matter more
                out.warnings.append(f"batch-size trial not recorded: {exc}")
        shutil.rmtree(progress_path.parent, ignore_errors=True)
    if run.exit_code not in (0, None):  # the task fails with the job, not only the flow (``out`` keeps the figures)
        raise JobFailed(run.exit_code, run.tail)
    return run


@task(name="restore settings", cache_policy=NO_CACHE)
def restore_settings(backend: Backend) -> None:
    backend.restore()


def write_ledger(report: dict[str, Any], ledger_path: str | None) -> None:
    """The ledger is plain SQLite, written outside Prefect's task machinery on purpose: a run must be
    recorded even when the Prefect API has gone (a SIGTERM sent to the whole process group also stops
    the temporary server)."""
    with Ledger(ledger_path) as ledger:
        ledger.record(report)


@task(name="record report", cache_policy=NO_CACHE)
def publish_artifact(report: dict[str, Any]) -> None:
    create_markdown_artifact(key=artifact_key(report["run_id"]), markdown=report_markdown(report),
                             description=f"gridshift run {report['run_id']} of {report['job']}")


@dataclass
class _Control:
    allowed: bool
    warning: str = ""


def _probe_control(backend: Backend, require_control: bool = False) -> _Control:
    """Decide before the job starts whether settings may change; NoPermission if required but not allowed."""
    caps = backend.capabilities()
    if caps.can_control:
        return _Control(True)
    if require_control:  # the flow restores, closes and records the run
        raise NoPermission(f"cannot change GPU settings ({caps.control_note or 'no permission'}) "
                           "and the policy sets backend.require_control: true", action="probe control")
    return _Control(False, f"cannot change GPU settings ({caps.control_note or 'no permission'}); running measure-only")


def _stored_power_profile(policy: Policy, backend: Backend, fingerprint: str) -> tuple[PowerProfile | None, str]:
    """The stored power-limit profile for this GPU model and job, when a mode selects its limit."""
    if not any(m.power_limit_select is not None for m in policy.modes.values()):
        return None, ""
    caps = backend.capabilities()
    if not caps.devices:
        return None, ""
    try:
        return ProfileStore(profiles_dir()).load(caps.devices[0].name, fingerprint), ""
    except BadProfile as exc:  # a damaged profile costs the auto choice, not the run
        return None, f"power-limit profile unusable, ignored: {exc}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code > 128:  # from a signal handler
        try:
            return f"terminated by {signal.Signals(exc.code - 128).name}"
        except ValueError:
            pass
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT (Ctrl-C)"
    if isinstance(exc, TerminationSignal):  # Prefect's SIGTERM handler, active while a flow runs
        return f"terminated by {signal.Signals(exc.signal).name}"
    if isinstance(exc, JobFailed):  # its message says what happened
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _utc(iso: str | None) -> datetime | None:
    # naive timestamps are UTC, as everywhere in gridshift (carbon.series.as_utc)
    return as_utc(datetime.fromisoformat(iso)) if iso else None


@partial(JsonParametersFlow, name="carbon_aware_training", log_prints=True, validate_parameters=False)
def carbon_aware_training(
    policy_path: str,
    run_id: str | None = None,
    command: list[str] | None = None,
    backend_name: str | None = None,
    ledger_path: str | None = None,
    nominal_start: str | None = None,
    planned_start: str | None = None,
    resume: dict[str, Any] | None = None,
    start_now: bool = False,
    report_extra: dict[str, Any] | None = None,
    site: str | None = None,
) -> dict[str, Any]:
    """Run the policy's job (or ``command``) under the policy; returns the report dict.

    A pausable job (``job.checkpointable``) under a deployment ends this flow run at a long planned
    pause with status ``paused``, after scheduling its next window as a flow run of the same
    deployment; ``resume`` (from :mod:`flows.job.windows`) carries the windows, spans and work done so far
    into that run, so its report covers them all. Outside a deployment the flow waits through pauses.

    ``nominal_start`` (ISO-8601) is the occurrence's nominal time (default: now): the deadline and
    the reported deferral count from it, and the job may start from ``nominal + earliest_start_s``
    (before it when negative). ``planned_start`` (ISO-8601, from a planner) is when to start; default
    now. ``start_now``: the caller's own scheduled time has come (a deployment run that Prefect
    started, perhaps moved earlier by hand), so nothing is waited for. The mode is decided at the
    real start time, on the intensity read then. ``report_extra`` goes into the report's ``extra``
    (the caller's context, e.g. the site and the GPUs the run holds). ``site``: one of the policy's
    sites; the run reads that site's grid.
    """
    logger = get_run_logger()
    policy = policy_at_site(load_policy(policy_path), site)
    load_clock_plans(policy, policy_path)  # bad plan files are bad input: fail before any waiting
    run_id = run_id or new_run_id()
    nominal = _utc(nominal_start) or _utcnow()
    deadline = nominal + timedelta(seconds=policy.job.deadline_s) if policy.job.deadline_s else None
    earliest = nominal + timedelta(seconds=policy.job.earliest_start_s)
    monitor = monitor_for(policy)  # a bad carbon source is bad input: fail before any waiting
    try:
        if not start_now:  # a waiting run must be a Scheduled flow run in Prefect, not a sleeping worker
            wait_until(max(_utc(planned_start) or _utcnow(), earliest))
        now = _utcnow()  # read and decide for the moment the job really starts, not the nominal time
        reading = read_intensity(monitor, now)
        for failure in reading.failures:
            logger.warning("carbon source failed over: %s", failure)
        decision = None
        if not plans_with_planner(policy):  # threshold rules; the planner plans inside the run
            decision = decide_mode(policy, reading, now, deadline)
            logger.info("decision: %s mode — %s", decision.mode, decision.reason)
        backend = create_backend(backend_name or policy.backend.name, **policy.backend.options)
    except BaseException:
        monitor.close()
        raise
    # From here on every path restores, closes and records a report (status failed on any error).
    started = _utcnow()
    run = resumed_run(resume)
    warnings = [f"carbon: {f}" for f in reading.failures]
    errors: list[BaseException] = []
    uninstall_signal_restore: Callable[[], None] = lambda: None
    try:
        control = _probe_control(backend, policy.backend.require_control)
        # now against the device: its clock table and (on real hardware) its GPU model
        clock_plans = load_clock_plans(policy, policy_path, backend.capabilities())
        fingerprint = job_fingerprint(policy.job.name, command or policy.job.command or policy.job.callable)
        power_profile, profile_warning = _stored_power_profile(policy, backend, fingerprint)
        for line in getattr(backend, "recovered", ()):  # journals of killed runs, replayed on open
            logger.warning("restored settings left by a killed run: %s", line)
        if profile_warning:
            logger.warning(profile_warning)
            warnings.append(profile_warning)
        if control.warning:
            logger.warning(control.warning)
            warnings.append(control.warning)
        if not backend.measured:  # in the report too: --json readers see no stderr
            note = f"backend {backend.name!r} is simulated: energy and carbon figures are modelled, not measured"
            logger.warning(note)
            warnings.append(note)
        figures = policy_figures(policy, backend=backend, profile=power_profile, policy_path=policy_path)
        started = run.windows[0].start if run.windows else _utcnow()
        # under a deployment a long pause is a Scheduled flow run, not a worker sleeping through it
        defer_over_s = DEFER_MIN_S if flow_run_deployment() is not None else None
        # SIGINT/SIGTERM restore at once from here until the settings are restored below, so that a
        # second signal while the job is stopped or the report is written cannot leave them changed
        uninstall_signal_restore = install_restore_handlers(backend, log=logger.warning)
        run_supervised(policy, backend, control.allowed, monitor, decision, reading, command, deadline, run,
                       clock_plans, power_profile, fingerprint, figures, run_id, defer_over_s, ledger_path,
                       Path(policy_path).absolute().parent)
    except BaseException as exc:  # the report is still written, then the flow fails
        errors.append(exc)
    ended = _utcnow()
    # each cleanup step on its own: one failing must not skip the others or the report
    restore_error: BaseException | None = None
    try:
        try:
            restore_settings(backend)
        except (KeyboardInterrupt, SystemExit) as exc:  # a second signal, inside Prefect's task machinery
            errors.append(exc)
            backend.restore()  # plainly (the signal handler has restored already; this says whether it held)
        finally:
            uninstall_signal_restore()
    except BaseException as exc:
        restore_error = exc
        errors.append(exc)
        note = f"settings may not be restored: run `gridshift gpu restore` ({type(exc).__name__}: {exc})"
        logger.warning(note)
        warnings.append(note)
    for close in (backend.close, monitor.close):
        try:
            close()
        except BaseException as exc:
            errors.append(exc)
            logger.warning("cleanup failed: %s: %s", type(exc).__name__, exc)
    parts: list[str] = []
    # the job's own non-zero exit (re-raised by its task) is described below, with the trial's note first
    job_exit = bool(errors) and isinstance(errors[0], JobFailed) and run.exit_code not in (0, None)
    if errors and errors[0] is not restore_error and not job_exit:  # the run's own error (or a close's) comes first
        parts.append(_describe(errors[0]))
    elif run.extra.get("batch_size_trial", {}).get("outcome") == "stopped":
        parts.append(run.extra["batch_size_trial"]["note"])
    elif run.exit_code not in (0, None):
        parts.append(str(JobFailed(run.exit_code, run.tail)))
    if restore_error is not None:
        parts.append(f"settings may not be restored: run `gridshift gpu restore` "
                     f"({type(restore_error).__name__}: {restore_error})")
    error = "; ".join(parts)
    paused = run.next_window is not None and not error
    status = "paused" if paused else "completed" if (run.exit_code == 0 and not error) else "failed"
    raised: BaseException | None = errors[0] if errors else None
    if raised is None and status not in ("completed", "paused"):
        raised = JobFailed(run.exit_code if run.exit_code is not None else 1, run.tail)
    warnings.extend(run.warnings)
    late_s, late_warning = deadline_miss(ended, deadline)
    if late_warning:
        logger.warning(late_warning)
        warnings.append(late_warning)
    energy_j = run.energy_j
    extra = {**(report_extra or {}), **run.extra}
    fused = [n for n in reading.notes if n.startswith("forecast:fused")]
    if fused:  # the forecast the plans stood on, and its record, in one sentence
        extra["forecast"] = fused[0]
    if raised is not None:  # so the CLI can map e.g. a GPU lost mid-run to its exit code
        extra["error_type"] = f"{type(raised).__module__}:{type(raised).__qualname__}"
    if paused:
        assert run.next_window is not None
        try:
            extra["next_window"] = defer_next_window(run, run_id=run_id, nominal=nominal)
            logger.info("paused: the next window is flow run %s, scheduled for %s UTC",
                        extra["next_window"]["flow_run_id"], f"{run.next_window:%Y-%m-%d %H:%M}")
        except Exception as exc:  # recorded as a failed run, so the work done so far is not lost silently
            status, error = "failed", f"could not schedule the next window: {type(exc).__name__}: {exc}"
            raised = exc
    report = RunReport(
        run_id=run_id, policy=str(policy_path), job=policy.job.name, status=status, backend=backend.name,
        measured=backend.measured, nominal_start=nominal, started_at=started, ended_at=ended,
        deferred_s=(started - nominal).total_seconds(), duration_s=(ended - started).total_seconds(),
        energy_j=energy_j, carbon_g=run.carbon_g,
        intensity_g_per_kwh=(run.carbon_g / energy_j * 3.6e6) if energy_j > 0 else reading.current.g_per_kwh,
        intensity_kind=reading.current.kind, intensity_source=reading.current.source or reading.source,
        modes=tuple(run.spans), decision_reason=run.reason or (decision.reason if decision else ""),
        exit_code=run.exit_code, error=error, warnings=tuple(warnings), carbon_sources=tuple(run.sources), extra=extra,
        windows=tuple(run.windows), late_s=late_s,
    ).to_json()
    try:
        write_ledger(report, ledger_path)
    except BaseException as exc:
        if raised is None:
            raise
        logger.warning("run not recorded: %s: %s", type(exc).__name__, exc)
    try:
        publish_artifact(report)
    except Exception as exc:  # the ledger has the report; a missing artifact must not fail the run
        logger.warning("Prefect artifact not written: %s: %s", type(exc).__name__, exc)
    if raised is not None:
        raise raised
    return report
