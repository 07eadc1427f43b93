"""RunReport: what happened in one run, with every figure labelled measured or modelled."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, TypeVar

__all__ = ["ModeSpan", "RunReport", "RunWindow", "REPORT_VERSION", "SpanSetting", "deadline_miss", "joules_to_grams",
           "settings_phrase"]

REPORT_VERSION = 1


def joules_to_grams(energy_j: float, g_per_kwh: float) -> float:
    """Carbon of ``energy_j`` at ``g_per_kwh`` (1 kWh = 3.6e6 J)."""
    return energy_j / 3.6e6 * g_per_kwh


def deadline_miss(ended: datetime, deadline: datetime | None) -> tuple[float | None, str]:
    """``late_s`` of a run that ended at ``ended`` (0 on time, None without a deadline) and its warning ("" if on time)."""
    if deadline is None:
        return None, ""
    late_s = max((ended - deadline).total_seconds(), 0.0)
    if late_s <= 0:
        return 0.0, ""
    return late_s, f"deadline missed: finished {late_s:.0f} s after the deadline {deadline:%Y-%m-%d %H:%M:%S} UTC"


_T = TypeVar("_T", bound="_TimedJson")


class _TimedJson:
    """JSON for a dataclass with ``start``/``end`` datetimes (ISO-8601 text in JSON)."""

    start: datetime
    end: datetime

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)  # type: ignore[call-overload]
        d["start"] = self.start.isoformat()
        d["end"] = self.end.isoformat()
        return d

    @classmethod
    def from_json(cls: type[_T], d: dict[str, Any]) -> _T:
        return cls(**{**d, "start": datetime.fromisoformat(d["start"]), "end": datetime.fromisoformat(d["end"])})


_SETTING_WORDS = {"power_limit_w": ("power limit", " W"), "sm_clock_mhz": ("SM clock", " MHz"),
                  "mem_clock_mhz": ("memory clock", " MHz"), "batch_size": ("batch size", ""),
                  "clock_plan": ("clock plan", "")}


@dataclass(frozen=True)
class SpanSetting:
    """One setting of a mode span: its value, who applies it, and whether that was confirmed.

    ``applied_by``: ``"gridshift"`` (through the backend: power limits, static clock locks) or
    ``"job"`` (handed to the training process, which applies it: batch sizes, clock plans).
    ``confirmed``: gridshift read the value back from the device, or the job said so in its result
    file; anything else is a request, not a fact. ``how``: the evidence, or why there is none.
    ``value``: W for ``power_limit_w``, MHz for the clocks (``[lo, hi]`` for an SM clock range), an
    integer batch size, a plan file name (None: the job runs no plan).
    """

    name: str
    value: float | int | str | list[int] | None
    applied_by: str
    confirmed: bool
    how: str

    def phrase(self) -> str:
        """One plain phrase, e.g. ``batch size 64 (handed to the job, not confirmed)``."""
        label, unit = _SETTING_WORDS.get(self.name, (self.name, ""))
        if isinstance(self.value, list):
            lo, hi = self.value
            value = f"{lo}-{hi}" if lo != hi else str(lo)
        elif isinstance(self.value, float):
            value = f"{self.value:.0f}"
        else:
            value = "none" if self.value is None else str(self.value)
        return f"{label} {value}{unit if self.value is not None else ''} ({self.how})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def settings_phrase(settings: tuple[SpanSetting, ...] | list[SpanSetting]) -> str:
    """The human report's words for a span's settings: one phrase per setting, "; "-separated."""
    return "; ".join(s.phrase() for s in settings)


@dataclass(frozen=True)
class ModeSpan(_TimedJson):
    """One stretch of a run in one mode. ``settings`` is the plain phrase of the human report;
    ``settings_detail`` the same settings structured (:class:`SpanSetting`), for ``--json``.
    ``cap_w``: the run's power headroom when the span began (a site's or machine's cap, a grid
    event; None: no cap), which its ``power_w`` keeps under: the mean power the meter saw over the
    span (its energy may later be put on the model's clock, see :mod:`flows.supervise`; not this)."""

    mode: str
    start: datetime
    end: datetime
    reason: str = ""
    settings: str = ""
    energy_j: float = 0.0
    g_per_kwh: float | None = None
    carbon_g: float = 0.0
    settings_detail: tuple[SpanSetting, ...] = ()
    cap_w: float | None = None
    power_w: float | None = None

    def to_json(self) -> dict[str, Any]:
        d = super().to_json()
        d["settings_detail"] = [s.to_json() for s in self.settings_detail]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ModeSpan":
        detail = tuple(SpanSetting(**s) for s in d.get("settings_detail", ()))
        return cls(**{**d, "start": datetime.fromisoformat(d["start"]), "end": datetime.fromisoformat(d["end"]),
                      "settings_detail": detail})


@dataclass(frozen=True)
class RunWindow(_TimedJson):
    """One stretch in which the job ran; a pausable job has one per planned window.

    ``ended_by``: ``"exit"`` (the job ended by itself) or ``"pause"`` (gridshift stopped it with
    SIGTERM for a planned pause; it resumes with ``GRIDSHIFT_RESUME=1``). ``work_s`` is the work done
    in it, in reference (clean-mode) seconds, from the job's progress reports or modelled from the
    modes' speeds (``work_measured``). ``start_step``/``end_step``: the training steps the job said
    it started (or resumed) at and reached (None: it did not say).
    """

    start: datetime
    end: datetime
    ended_by: str
    exit_code: int | None = None
    energy_j: float = 0.0
    carbon_g: float = 0.0
    work_s: float = 0.0
    work_measured: bool = False
    start_step: int | None = None
    end_step: int | None = None


@dataclass(frozen=True)
class RunReport:
    run_id: str
    policy: str
    job: str
    status: str  # "completed" | "failed" | "paused" (a pausable job between windows, under a deployment)
    backend: str
    measured: bool
    nominal_start: datetime
    started_at: datetime
    ended_at: datetime
    deferred_s: float
    duration_s: float
    energy_j: float
    carbon_g: float
    intensity_g_per_kwh: float | None
    intensity_kind: str
    intensity_source: str
    modes: tuple[ModeSpan, ...]
    decision_reason: str
    exit_code: int | None = None
    error: str = ""
    warnings: tuple[str, ...] = ()
    carbon_sources: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    late_s: float | None = None  # seconds past the deadline (0: on time; None: no deadline)
    windows: tuple[RunWindow, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "version": REPORT_VERSION,
            "run_id": self.run_id,
            "policy": self.policy,
            "job": self.job,
            "status": self.status,
            "backend": self.backend,
            "measured": self.measured,
            "energy_label": "measured" if self.measured else "simulated (modelled)",
            "nominal_start": self.nominal_start.isoformat(),
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat(),
            "deferred_s": self.deferred_s,
            "duration_s": self.duration_s,
            "energy_j": self.energy_j,
            "carbon_g": self.carbon_g,
            "intensity_g_per_kwh": self.intensity_g_per_kwh,
            "intensity_kind": self.intensity_kind,
            "intensity_source": self.intensity_source,
            "modes": [m.to_json() for m in self.modes],
            "windows": [w.to_json() for w in self.windows],
            "decision_reason": self.decision_reason,
            "exit_code": self.exit_code,
            "error": self.error,
            "warnings": list(self.warnings),
            "carbon_sources": list(self.carbon_sources),
            "late_s": self.late_s,
            **({"extra": self.extra} if self.extra else {}),
        }
