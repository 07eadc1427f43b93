"""Policy files: what a user writes to say how a job should run. Frozen, strict pydantic models.

Every model forbids unknown keys, so a typo is an error with a file and line (see
:mod:`scheduler.policy.loader`), never a silently ignored setting. Units are in the field names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

__all__ = [
    "SCHEMA_VERSION",
    "CHECKPOINTABLE_CALLABLE",
    "Strict",
    "CarbonSource",
    "CarbonConfig",
    "PriceSource",
    "PriceConfig",
    "Mode",
    "AbsoluteRule",
    "RelativeRule",
    "PlanRule",
    "Rule",
    "Objective",
    "BatchSizeSearch",
    "JobSpec",
    "BackendConfig",
    "Site",
    "Policy",
    "unknown_mode_message",
]

SCHEMA_VERSION = 1

#: why a checkpointable job must be a command (schema, loader and ``policy check`` say it alike)
CHECKPOINTABLE_CALLABLE = ("checkpointable needs job.command: a job.callable runs inside gridshift's process, "
                           "so it cannot be stopped at a planned pause and resumed (run it as a command, or "
                           "set checkpointable: false)")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CarbonSource(Strict):
    """One grid-intensity source: a provider name, the zone and provider-specific options."""

    provider: str = Field(description="trace, static, electricitymaps, watttime, ukgrid, casdk")
    zone: str | None = Field(default=None, description="zone (Electricity Maps), region (WattTime), location (Carbon Aware SDK), region id (UK)")
    base_url: str | None = Field(default=None, description="replace the provider's public scheme and host (self-hosted proxies, tests)")
    options: dict[str, Any] = Field(default_factory=dict, description="provider options, e.g. path/column for trace, country for static")


class CarbonConfig(CarbonSource):
    """The primary source, then fallbacks tried in order when it fails."""

    fallbacks: tuple[CarbonSource, ...] = Field(default=(), description="tried in order when the primary fails")
    max_staleness_s: float = Field(default=3600.0, gt=0, description="older values are stale and trigger failover")
    forecast_horizon_s: float = Field(default=86400.0, gt=0, description="how far ahead to ask for a forecast")


class PriceSource(Strict):
    """One electricity-price source: a name, the bidding zone, and its options (carbon/prices/)."""

    provider: str = Field(description="energycharts (EU bidding zones, keyless), awattar (DE, AT, keyless), trace (a price file)")
    zone: str | None = Field(default=None, description="bidding zone: DE-LU, AT, FR, ... (Energy-Charts), DE or AT (aWATTar)")
    base_url: str | None = Field(default=None, description="replace the source's public scheme and host (self-hosted proxies, tests)")
    options: dict[str, Any] = Field(default_factory=dict, description="source options, e.g. path, market (SDAC, ERCOT: when prices are published), currency for trace")


class PriceConfig(PriceSource):
    """The price source, then fallbacks tried in order when it fails. Prices are per MWh, in one currency."""

    fallbacks: tuple[PriceSource, ...] = Field(default=(), description="tried in order when the primary fails")


class Mode(Strict):
    """Named hardware settings. Unset fields leave the hardware as found."""

    power_limit_w: float | None = Field(default=None, gt=0, description="absolute GPU power limit in W")
    power_limit_fraction: float | None = Field(default=None, gt=0, le=1, description="power limit as a fraction of the device maximum")
    sm_clock_mhz: tuple[int, int] | None = Field(default=None, description="locked SM clock range [min, max] in MHz (an int locks both)")
    mem_clock_mhz: int | None = Field(default=None, gt=0, description="locked memory clock (GeForce only; HBM parts refuse)")
    batch_size: Annotated[int, Field(gt=0)] | Literal["auto"] | None = Field(
        default=None, description="batch size handed to the job (GRIDSHIFT_BATCH_SIZE); 'auto': the batch-size "
                                  "optimiser proposes one per run from the job's history (needs job.batch_size_search)"
    )
    clock_plan: Path | None = Field(default=None, description="per-kernel DVFS plan file")
    max_slowdown: float | None = Field(default=None, ge=0, description="largest acceptable slowdown vs speed mode, e.g. 0.1 = 10%")
    power_limit_select: Literal["energy", "time", "zeus_cost", "max_slowdown", "carbon"] | None = Field(
        default=None, description="power limit 'auto': profile the limits in-process and pick one with this selector (plans.selectors)"
    )
    eta: float = Field(default=0.5, ge=0, le=1, description="weight of energy vs time for the zeus_cost and carbon selectors")

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size_or_auto(cls, v: Any) -> Any:
        # one clear message instead of one per member of the union
        if v is None or v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            return v
        raise ValueError("batch_size must be a positive integer or 'auto'")

    @field_validator("sm_clock_mhz", mode="before")
    @classmethod
    def _single_clock(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return (v, v)
        return tuple(v) if isinstance(v, list) else v  # the loader validates strictly: a list is not a tuple there

    @model_validator(mode="after")
    def _one_power_limit(self) -> "Mode":
        if self.power_limit_w is not None and self.power_limit_fraction is not None:
            raise ValueError("give power_limit_w or power_limit_fraction, not both")
        if self.power_limit_select is not None and (self.power_limit_w is not None or self.power_limit_fraction is not None):
            raise ValueError("power_limit_select chooses the limit itself: drop power_limit_w/power_limit_fraction")
        if self.sm_clock_mhz is not None and self.sm_clock_mhz[0] > self.sm_clock_mhz[1]:
            raise ValueError("sm_clock_mhz: min must not exceed max")
        return self


class _RuleBase(Strict):
    clean_mode: str = Field(default="speed", description="mode while the grid is clean")
    dirty_mode: str = Field(default="efficiency", description="mode while the grid is dirty")
    min_dwell_s: float = Field(default=900.0, ge=0, description="stay at least this long in a mode before switching")
    interval_s: float = Field(default=600.0, gt=0, description="how often a running job re-decides its mode")


class AbsoluteRule(_RuleBase):
    """Thresholds in g/kWh. Between the two thresholds the current mode is kept (hysteresis)."""

    kind: Literal["absolute"] = "absolute"
    clean_below_g_per_kwh: float = Field(ge=0, description="at or below: clean")
    dirty_above_g_per_kwh: float = Field(ge=0, description="at or above: dirty")

    @model_validator(mode="after")
    def _band(self) -> "AbsoluteRule":
        if self.clean_below_g_per_kwh > self.dirty_above_g_per_kwh:
            raise ValueError("clean_below_g_per_kwh must not exceed dirty_above_g_per_kwh")
        return self


class RelativeRule(_RuleBase):
    """Percentiles of the forecast horizon: "clean" means cleaner than most of the coming hours."""

    kind: Literal["relative"] = "relative"
    horizon_s: float = Field(default=86400.0, gt=0, description="forecast horizon the percentile is taken over")
    clean_below_percentile: float = Field(default=40.0, ge=0, le=100)
    dirty_above_percentile: float = Field(default=60.0, ge=0, le=100)

    @model_validator(mode="after")
    def _band(self) -> "RelativeRule":
        if self.clean_below_percentile > self.dirty_above_percentile:
            raise ValueError("clean_below_percentile must not exceed dirty_above_percentile")
        return self


class PlanRule(_RuleBase):
    """The planner (the default): the carbon-optimal start, modes and pauses under the deadline.

    ``clean_mode`` is the reference mode (work is counted in its seconds; the simulator's baseline).
    Every mode of the policy is a candidate; the running job re-plans every ``interval_s``.
    """

    kind: Literal["plan"] = "plan"
    deadline_margin_s: float = Field(default=900.0, ge=0, description="plan to finish this long before the deadline (dropped when it leaves no room)")
    slot_s: float = Field(default=300.0, gt=0, description="planning resolution: the plan may change mode or pause at these steps")
    min_gain: float = Field(default=0.0, ge=0, lt=1, description="move the start off the cron time only when the forecast promises at least this relative gain (default 0: act on the forecast's expected value; raise it for a forecast you trust less)")
    forecast_gate: bool = Field(default=True, description="do no harm: leave the static plan (cron start, frugal modes) only as far as the forecast's record of past nights shows it pays (docs/scheduling.md); false plans on the forecast from the first night")


def _rule_kind(v: Any) -> str:
    # no kind given means the planner; absolute|relative stay explicit choices
    kind = v.get("kind", "plan") if isinstance(v, dict) else getattr(v, "kind", "plan")
    return kind if kind in ("absolute", "relative", "plan") else str(kind)


Rule = Annotated[
    Union[Annotated[PlanRule, Tag("plan")], Annotated[AbsoluteRule, Tag("absolute")], Annotated[RelativeRule, Tag("relative")]],
    Discriminator(_rule_kind),
]


class Objective(Strict):
    """What the planner minimises: carbon, plus an optional price of time; or, with ``carbon_price``,
    cost + carbon_price x tonnes (the prices come from the policy's ``price:`` source)."""

    time_value_g_per_h: float = Field(default=0.0, ge=0, description="grams CO2 one hour earlier finish is worth (0 = carbon only under the deadline); with carbon_price, those grams' worth at that price")
    carbon_price: float | None = Field(default=None, ge=0, description="currency (the prices') per tonne CO2: minimise cost + carbon_price x tonnes (0 = cost only); unset: carbon only")

    @model_validator(mode="after")
    def _time_has_a_worth(self) -> "Objective":
        if self.carbon_price == 0 and self.time_value_g_per_h > 0:
            raise ValueError("time_value_g_per_h is in grams, and carbon_price: 0 makes grams worth nothing: an "
                             "earlier finish would be worth 0; give carbon_price > 0 or drop time_value_g_per_h")
        return self


class BatchSizeSearch(Strict):
    """The batch sizes a ``batch_size: auto`` mode may propose, and Zeus's cost knobs.

    A run's cost is ``eta * energy + (1 - eta) * max_power * time`` (J; max_power: the device's
    largest power limit times its GPU count); a run whose cost passes ``beta`` times the cheapest
    run that reached its target is stopped.
    """

    sizes: tuple[Annotated[int, Field(gt=0)], ...] = Field(min_length=1, description="batch sizes the job supports")
    default: int = Field(gt=0, description="the size known to reach the target; the first runs use it")
    eta: float = Field(default=0.5, ge=0, le=1, description="weight of energy vs time in the cost")
    beta: float | None = Field(default=2.0, gt=1, description="stop a run past beta x the best cost (null: never stop)")

    @model_validator(mode="after")
    def _default_in_sizes(self) -> "BatchSizeSearch":
        if self.default not in self.sizes:
            raise ValueError(f"default {self.default} is not one of sizes {list(self.sizes)}")
        return self


class JobSpec(Strict):
    """What to run, how long it takes, and when it may run.

    Offsets are relative to the nominal start (the moment ``gridshift run`` is called, or the cron
    time for recurring jobs): the job may start from ``earliest_start_s`` and must finish by
    ``deadline_s``. Without a deadline the job starts at once.
    """

    name: str = Field(default="training", description="a name for reports and deployments")
    command: tuple[str, ...] | None = Field(default=None, description="argv of the training command")
    callable: str | None = Field(default=None, description="a Python 'module:function' run in-process")
    expected_duration_s: float = Field(gt=0, description="how long the job takes in speed mode")
    earliest_start_s: float = Field(default=0.0, description="earliest start, seconds after the nominal start (may be negative for recurring jobs)")
    deadline_s: float | None = Field(default=None, gt=0, description="the job must finish this many seconds after the nominal start")
    cron: str | None = Field(default=None, description="recurrence for deployments, serve and simulation, read as Prefect reads it "
                                                       "(five fields, day of week 0 or 7 = Sunday), e.g. '0 1 * * 1-5', in job.timezone")
    timezone: str = Field(default="UTC", min_length=1, description="IANA time zone the cron is read in, e.g. 'Europe/London' (default UTC)")
    checkpointable: bool = Field(default=False, description="the job can stop and resume, so it may be split across green slots")
    reports_progress: bool = Field(default=False, description="the job writes its fraction done to GRIDSHIFT_PROGRESS_FILE, so a run re-plans at the pace it measures; the planner may then keep rules.deadline_margin_s as a pace reserve instead of idle time before the deadline")
    resume_overhead_s: float = Field(default=0.0, ge=0, description="extra speed-mode seconds of work each resume costs (reload, warm-up)")
    stop_grace_s: float = Field(default=60.0, gt=0, description="a checkpointable job gets this long after SIGTERM to write its checkpoint before SIGKILL")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables for the command")
    workdir: Path | None = Field(default=None, description="working directory for the command (default: the policy file's folder)")
    batch_size_search: BatchSizeSearch | None = Field(default=None, description="search space of 'batch_size: auto' modes")
    gpus: int = Field(default=1, ge=1, description="GPUs the job uses on one node; on a site, it holds that many of the node's GPU slots while it trains")

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        if isinstance(v, str):
            import shlex

            return tuple(shlex.split(v))
        return tuple(v) if isinstance(v, list) else v  # the loader validates strictly: a list is not a tuple there

    # The rules between fields are field validators reading the fields validated before them
    # (``info.data``), not one model validator: pydantic runs a model validator only when every field
    # is valid, so one wrong type would hide them (issue 22: every error in one pass).
    @field_validator("command")
    @classmethod
    def _not_empty(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and len(v) == 0:
            raise ValueError("command must not be empty")
        return v

    @field_validator("callable")
    @classmethod
    def _callable_form(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and (":" not in v or not all(v.partition(":")[::2])):
            raise ValueError("callable must look like 'package.module:function'")
        if v is not None and info.data.get("command") is not None:
            raise ValueError("give either command or callable, not both")
        return v

    @field_validator("deadline_s")
    @classmethod
    def _room(cls, v: float | None, info: ValidationInfo) -> float | None:
        duration, earliest = info.data.get("expected_duration_s"), info.data.get("earliest_start_s")
        if v is not None and duration is not None and earliest is not None and v < earliest + duration:
            raise ValueError("deadline_s leaves no room: it must be at least earliest_start_s + expected_duration_s")
        return v

    @field_validator("checkpointable")
    @classmethod
    def _stoppable(cls, v: bool, info: ValidationInfo) -> bool:
        # a callable runs in gridshift's own process: nothing can stop it at a planned pause and resume it
        if v and info.data.get("callable") is not None:
            raise ValueError(CHECKPOINTABLE_CALLABLE)
        return v


class BackendConfig(Strict):
    name: str = Field(default="auto", description="auto, nvidia, simulated, or an entry point in group gridshift.backends")
    require_control: bool = Field(default=False, description="exit 3 instead of running measure-only when settings cannot be changed")
    options: dict[str, Any] = Field(default_factory=dict, description="backend-specific options")


class Site(Strict):
    """One place the job may run: a GPU node behind a Prefect work pool (or queue), on one grid.

    The planner chooses the site together with the start; a run there holds ``job.gpus`` of the
    node's ``gpus_per_node`` slots (a Prefect global concurrency limit) while it trains.
    """

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="lowercase letters, digits and dashes (Prefect names are built from it)")
    work_pool: str = Field(description="the Prefect work pool whose worker runs on this node")
    work_queue: str | None = Field(default=None, description="a work queue of that pool, when several nodes share one pool")
    carbon: CarbonSource = Field(description="the grid signal at this site (provider and zone)")
    gpus_per_node: int = Field(gt=0, description="GPUs on the node")
    price_per_gpu_h: float | None = Field(default=None, ge=0, description="cost of one GPU hour here; reported, and breaks ties between equally clean sites")
    power_cap_w: float | None = Field(default=None, gt=0, description="the most GPU power (W) the runs placed here may draw together, in every slot: placement books each run's power per slot and plans the next in what is left (docs/operators.md)")
    changeover_s: float = Field(default=60.0, ge=0, description="the node's GPUs stay booked this long past a run's planned finish (a late start, the next run's process start), so placed runs never meet")


class Policy(Strict):
    """A gridshift policy file."""

    schema_version: Literal[1] = Field(default=1, description="policy format version")
    carbon: CarbonConfig
    modes: dict[str, Mode]
    rules: Rule = Field(default_factory=PlanRule)
    objective: Objective = Field(default_factory=Objective)
    price: PriceConfig | None = Field(default=None, description="electricity prices: runs report their cost; objective.carbon_price plans on them")
    job: JobSpec
    backend: BackendConfig = Field(default_factory=BackendConfig)
    sites: tuple[Site, ...] = Field(default=(), description="where the job may run; empty: wherever it is started")
    power_cap_w: float | None = Field(default=None, gt=0, description="the most GPU power (W) the gridshift runs on this machine may draw together, in every slot (a site's own cap replaces it there); runs at once share it by their GPUs (docs/operators.md)")

    @field_validator("modes")
    @classmethod
    def _required_modes(cls, v: dict[str, Mode]) -> dict[str, Mode]:
        # a field validator, so a wrong type elsewhere does not hide it
        missing = [name for name in ("speed", "efficiency") if name not in v]
        if missing:
            from scheduler.policy.did_you_mean import closest

            # a misspelt required mode is taken as an extra mode of its own: say which one it looks like
            typos = [f"{typo!r} looks like a misspelling of {name!r}" for name in missing
                     if (typo := closest(name, [m for m in v if m not in ("speed", "efficiency")])) is not None]
            hint = f" ({'; '.join(typos)})" if typos else ""
            raise ValueError(f"modes must define {' and '.join(repr(m) for m in missing)}{hint}")
        return v

    @model_validator(mode="after")
    def _modes_exist(self) -> "Policy":
        for which in ("clean_mode", "dirty_mode"):
            if message := unknown_mode_message(which, getattr(self.rules, which), self.modes):
                raise ValueError(message)
        auto = [name for name, m in self.modes.items() if m.batch_size == "auto"]
        if auto and self.job.batch_size_search is None:
            raise ValueError(f"mode {auto[0]!r} says batch_size: auto: give job.batch_size_search (sizes, default)")
        if self.objective.carbon_price is not None and not isinstance(self.rules, PlanRule):
            raise ValueError(f"objective.carbon_price: the planner weighs cost and carbon; rules.kind {self.rules.kind!r} "
                             "decides by carbon thresholds (use rules.kind: plan)")
        if self.sites and not isinstance(self.rules, PlanRule):
            raise ValueError(f"sites: the planner chooses where and when together; rules.kind {self.rules.kind!r} "
                             "decides by thresholds (use rules.kind: plan)")
        names = [site.name for site in self.sites]
        if len(set(names)) != len(names):
            raise ValueError(f"sites: names must be unique (got {', '.join(names)})")
        for site in self.sites:
            if site.gpus_per_node < self.job.gpus:
                raise ValueError(f"sites: {site.name} has {site.gpus_per_node} GPU(s) per node, the job needs {self.job.gpus}")
        return self


def unknown_mode_message(which: str, name: str, modes: Any) -> str | None:
    """``rules.<which>`` must name a mode of ``modes``; the message when it does not, else None."""
    from scheduler.policy.did_you_mean import did_you_mean

    if name in modes:
        return None
    return f"rules.{which} names unknown mode {name!r}{did_you_mean(name, modes)} (modes: {', '.join(modes)})"
