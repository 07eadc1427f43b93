"""The run as data: a policy, its site and the command line's overrides, resolved once.

:func:`resolve_run` is the one pure step between the policy file and a run. Everything after it
(the flow, the run loop, the decider, the simulator) takes the :class:`RunSpec` or the part it needs,
never the policy, so "may this job pause?", "where does it run?" or "which decider?" are answered
here, in one place, the way black resolves its options into one ``Mode``.

    policy + site + (command, backend) overrides
        └─ resolve_run ─> RunSpec
             ├─ job:      JobRun (argv or callable, env, workdir, pausability, durations, fingerprint)
             ├─ modes:    each mode's settings (its figures come from plans/ once the device is known,
             │            :meth:`RunSpec.mode_figures`, each with its source)
             ├─ decider:  rules (planner or thresholds), objective, the planner's constraints
             ├─ carbon:   the source chain (the site's grid when a site is named)
             ├─ price:    the price source chain, if any (runs report their cost; a priced objective plans on it)
             └─ backend:  name, options, require_control
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Mapping

from scheduler.settings.auto_power import job_fingerprint
from scheduler.planner import ModeFigures, Objective, PlanConstraints
from scheduler.policy.types import (AbsoluteRule, BatchSizeSearch, CarbonConfig, Mode, PlanRule, Policy, PriceConfig,
                                    RelativeRule)
from scheduler.policy.checks import job_cwd
from scheduler.policy.sites import policy_at_site

__all__ = ["JobRun", "RunSpec", "objective_of", "price_currency", "resolve_run", "rule_constraints"]


@dataclass(frozen=True)
class JobRun:
    """The job as it will be started: a command (``argv``, run in ``cwd``) or a ``callable``."""

    name: str
    argv: tuple[str, ...] | None
    callable: str | None
    env: Mapping[str, str]
    cwd: Path | None
    pausable: bool                  # checkpointable and a command: may be stopped at planned pauses
    reports_progress: bool          # writes its fraction done, so its pace is measured (a pace reserve may hold)
    checkpointable: bool            # as the policy says (a planner's pauses need ``pausable``)
    expected_duration_s: float      # reference (clean-mode) seconds of work
    earliest_start_s: float
    deadline_s: float | None
    stop_grace_s: float
    resume_overhead_s: float
    fingerprint: str                # job name + command: keys the stored power profiles and trials
    batch_size_search: BatchSizeSearch | None = None
    gpus: int = 1                   # GPUs the job uses (its share of a machine's or site's power cap)

    def deadline(self, nominal: datetime) -> datetime | None:
        """The latest finish of the occurrence nominally at ``nominal`` (None: no deadline)."""
        return nominal + timedelta(seconds=self.deadline_s) if self.deadline_s else None

    def earliest(self, nominal: datetime) -> datetime:
        """The earliest start of the occurrence nominally at ``nominal``."""
        return nominal + timedelta(seconds=self.earliest_start_s)


@dataclass(frozen=True)
class RunSpec:
    """Everything a run needs, resolved from the policy once (see the module docstring)."""

    policy_path: str | None
    site: str | None
    job: JobRun
    modes: Mapping[str, Mode]
    rules: PlanRule | AbsoluteRule | RelativeRule
    objective: Objective
    carbon: CarbonConfig
    backend_name: str
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    require_control: bool = False
    price: PriceConfig | None = None  # the price source chain (None: no prices, no cost reported)

    planned: bool = True            # the planner (``rules.kind: plan``); False: threshold rules
    clean_mode: str = "speed"       # the reference mode: work is counted in its seconds
    interval_s: float = 600.0       # how often the running job re-decides
    constraints: PlanConstraints | None = None  # the planner's (None for threshold rules)
    auto_power: bool = False        # some mode chooses its power limit from a profile (``power_limit_select``)
    auto_batch_size: bool = False   # some mode's batch size is proposed per run (``batch_size: auto``)
    clock_plan_paths: Mapping[str, Path] = field(default_factory=dict)  # each mode's DVFS plan file
    power_cap_w: float | None = None  # the machine's (or the run's site's) cap on the GPU power of its runs together

    def batch_sizes(self, proposal: int | None) -> dict[str, int | None]:
        """Each mode's batch size: its own, the run's ``proposal`` for ``batch_size: auto``, or None."""
        return {name: proposal if mode.batch_size == "auto" else mode.batch_size  # type: ignore[misc]
                for name, mode in self.modes.items()}

    def mode_figures(self, *, backend: Any = None, profile: Any = None, all_limits: bool = False) -> list[ModeFigures]:
        """Each mode's power and speed, with its source (:func:`scheduler.planner.mode_figures.figures_for_modes`).

        ``backend`` gives the device and, when it has a model (``operating_point``), the last-resort
        figures; without one the simulated GPU model stands in, and the figures' source says so.
        """
        from backends.simulated import SimulatedBackend
        from scheduler.planner.mode_figures import figures_for_modes

        if profile is not None and hasattr(profile, "to_json"):
            profile = profile.to_json()
        model = backend if backend is not None and hasattr(backend, "operating_point") else SimulatedBackend()
        caps = backend.capabilities() if model is backend else None
        return figures_for_modes(dict(self.modes), self.clean_mode, caps=caps, backend=model, profile=profile,
                                 policy_path=self.policy_path, all_limits=all_limits)


    def cap_figures(self, *, backend: Any = None, profile: Any = None) -> list[ModeFigures]:
        """Power limits between the device's least and most (``cap_<W>w``) with their figures, marked
        ``only_under_cap``: under a power cap the planner may set a GPU's limit between the policy's
        modes (:mod:`scheduler.planner.power_cap`), its speed modelled like the modes' (a measured
        profile's limits interpolated, else the backend's model). Empty without a limit range."""
        from backends.simulated import SimulatedBackend
        from scheduler.planner.mode_figures import figures_for_modes
        from scheduler.planner.power_cap import cap_limits, cap_mode_name
        from scheduler.settings.resolve import resolve_settings

        if profile is not None and hasattr(profile, "to_json"):
            profile = profile.to_json()
        model = backend if backend is not None and hasattr(backend, "operating_point") else SimulatedBackend()
        caps = (backend if backend is not None else model).capabilities()
        own = [w for m in self.modes.values() if (w := resolve_settings(m, caps).power_limit_w) is not None]
        limits = cap_limits(caps.power_limit_range_w, own)
        if not limits:
            return []
        table = {self.clean_mode: self.modes[self.clean_mode], **{cap_mode_name(w): Mode(power_limit_w=w) for w in limits}}
        figures = figures_for_modes(table, self.clean_mode, caps=caps, backend=model, profile=profile,
                                    policy_path=self.policy_path, all_limits=False)
        return [replace(f, only_under_cap=True) for f in figures if f.name != self.clean_mode]


def rule_constraints(rules: PlanRule | AbsoluteRule | RelativeRule, *, reports_progress: bool = False,
                     expected_duration_s: float = 1.0) -> PlanConstraints:
    """The planner's constraints of a planning rule: one place, for the flow, deploy, serve and simulate.

    A job that reports its progress is re-planned at the pace measured, every interval: its margin may
    be kept as a reserve for a slowdown of margin / duration (:func:`scheduler.planner.pace_reserve_holds`).
    """
    if not isinstance(rules, PlanRule):
        raise ValueError(f"rules.kind {rules.kind!r} decides by thresholds (scheduler.planner.thresholds), not by the planner")
    tolerance = rules.deadline_margin_s / expected_duration_s if reports_progress else 0.0
    return PlanConstraints(min_dwell_s=rules.min_dwell_s, deadline_margin_s=rules.deadline_margin_s, slot_s=rules.slot_s,
                           min_gain=rules.min_gain, pace_tolerance=tolerance, replan_s=rules.interval_s)


def price_currency(price: PriceConfig | None) -> str:
    """The currency of a price source's prices: its ``currency`` option, else its market's (SDAC: EUR, ERCOT:
    USD), else the source's own (the web sources publish EUR)."""
    if price is None:
        return ""
    from carbon.prices.day_ahead import market_for
    from carbon.prices.registry import PRICE_SOURCES, price_source_class

    given = price.options.get("currency")
    if isinstance(given, str) and given:
        return given
    market = market_for(str(price.options.get("market") or price.zone or ""))
    if market is not None:
        return market.currency
    return price_source_class(price.provider).currency if price.provider in PRICE_SOURCES else ""


def objective_of(policy: Policy) -> Objective:
    """The planner's objective of a policy: grams (and a value of time), or cost + carbon priced in the prices' currency."""
    return Objective(time_value_g_per_h=policy.objective.time_value_g_per_h, carbon_price=policy.objective.carbon_price,
                     currency=price_currency(policy.price))


def resolve_run(policy: Policy, *, policy_path: str | Path | None = None, site: str | None = None,
                command: list[str] | tuple[str, ...] | None = None, backend_name: str | None = None) -> RunSpec:
    """The run specification of ``policy`` (pure: no file is read, no device is opened).

    ``site``: one of the policy's sites (its grid replaces the carbon chain). ``command``: the argv
    given after ``--``; it runs in ``job.workdir`` or the current folder, where the policy's own
    command runs in ``job.workdir``, else the policy file's folder. ``backend_name``: ``--backend``.
    """
    policy = policy_at_site(policy, site)
    job = policy.job
    argv = tuple(command) if command else job.command
    base_dir = Path(policy_path).absolute().parent if policy_path is not None else None
    cwd = (Path(job.workdir) if job.workdir is not None else None) if command else job_cwd(job, base_dir)
    run = JobRun(name=job.name, argv=argv, callable=None if argv else job.callable, env=dict(job.env),
                 cwd=cwd if argv else None, pausable=job.checkpointable and bool(argv), reports_progress=job.reports_progress,
                 checkpointable=job.checkpointable, expected_duration_s=job.expected_duration_s,
                 earliest_start_s=job.earliest_start_s, deadline_s=job.deadline_s, stop_grace_s=job.stop_grace_s,
                 resume_overhead_s=job.resume_overhead_s,
                 fingerprint=job_fingerprint(job.name, list(command) if command else (job.command or job.callable)),
                 batch_size_search=job.batch_size_search, gpus=job.gpus)
    base = Path(policy_path).resolve().parent if policy_path is not None else None
    plans: dict[str, Path] = {}
    for name, mode in policy.modes.items():
        if mode.clock_plan is not None:  # relative to the policy file's folder
            path = Path(mode.clock_plan)
            plans[name] = base / path if not path.is_absolute() and base is not None else path
    rules = policy.rules
    return RunSpec(policy_path=str(policy_path) if policy_path is not None else None, site=site, job=run,
                   modes=dict(policy.modes), rules=policy.rules,
                   objective=objective_of(policy), price=policy.price,
                   carbon=policy.carbon, backend_name=backend_name or policy.backend.name,
                   backend_options=dict(policy.backend.options), require_control=policy.backend.require_control,
                   planned=isinstance(rules, PlanRule), clean_mode=rules.clean_mode, interval_s=rules.interval_s,
                   constraints=(rule_constraints(rules, reports_progress=job.reports_progress,
                                                 expected_duration_s=job.expected_duration_s)
                                if isinstance(rules, PlanRule) else None),
                   auto_power=any(m.power_limit_select is not None for m in policy.modes.values()),
                   auto_batch_size=any(m.batch_size == "auto" for m in policy.modes.values()), clock_plan_paths=plans,
                   power_cap_w=(next(s.power_cap_w for s in policy.sites if s.name == site) if site is not None
                                else policy.power_cap_w))
