"""Decide which mode a job runs in, and when it starts. Pure: time and state are arguments.

``decide(policy, series, state, now=...)`` looks at the intensity in force at ``now`` and applies
the policy's rule:

- absolute rule: at or below ``clean_below`` -> clean mode; at or above ``dirty_above`` -> dirty mode;
- relative rule: the same, with the intensity's percentile rank within the forecast horizon;
- in between (the hysteresis band) the current mode is kept; with no current mode, the nearer
  threshold wins;
- a mode is kept for at least ``min_dwell_s`` before switching;
- a deadline guard overrides everything: if finishing the remaining work in the dirty mode would
  miss the deadline, the clean (faster) mode is chosen.

Every Decision carries a one-sentence ``reason`` and the inputs it was made from.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Mapping

from carbon.series import IntensityPoint, IntensitySeries
from scheduler.policy.types import AbsoluteRule, Mode, Policy, RelativeRule

__all__ = ["ModeState", "Decision", "decide", "decide_by_rule", "classify", "percentile_rank"]


@dataclass(frozen=True)
class ModeState:
    """The mode a running job is in, and since when."""

    mode: str | None = None
    since: datetime | None = None

    def switch(self, mode: str, at: datetime) -> "ModeState":
        return self if mode == self.mode else replace(self, mode=mode, since=at)


@dataclass(frozen=True)
class Decision:
    mode: str
    start_at: datetime
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)
    intensity: IntensityPoint | None = None


def percentile_rank(value: float, population: list[float]) -> float:
    """Share (0-100) of ``population`` strictly below ``value``, ties counted half."""
    if not population:
        return 50.0
    ordered = sorted(population)
    below = bisect.bisect_left(ordered, value)
    equal = bisect.bisect_right(ordered, value) - below
    return 100.0 * (below + 0.5 * equal) / len(ordered)


def classify(value: float, clean_below: float, dirty_above: float) -> str:
    """'clean', 'dirty' or 'band' (the hysteresis band between the thresholds)."""
    if value <= clean_below:
        return "clean"
    if value >= dirty_above:
        return "dirty"
    return "band"


def _measure(rule: AbsoluteRule | RelativeRule, series: IntensitySeries, point: IntensityPoint,
             now: datetime) -> tuple[float, float, float, str]:
    """(score, clean threshold, dirty threshold, how the score was measured)."""
    if isinstance(rule, AbsoluteRule):
        return (point.g_per_kwh, rule.clean_below_g_per_kwh, rule.dirty_above_g_per_kwh,
                f"{point.g_per_kwh:.0f} g/kWh ({point.kind})")
    assert isinstance(rule, RelativeRule)
    horizon = series.window(now, now + timedelta(seconds=rule.horizon_s)).values()
    rank = percentile_rank(point.g_per_kwh, horizon)
    # relative terms only: 610 g/kWh may be a clean hour on a coal-heavy grid and a dirty one elsewhere
    return (rank, rule.clean_below_percentile, rule.dirty_above_percentile,
            f"{point.g_per_kwh:.0f} g/kWh is cleaner than {100 - rank:.0f} % of the next {rule.horizon_s / 3600:g} h "
            f"({len(horizon)} points)")


def _band_words(rule: AbsoluteRule | RelativeRule, lo: float, hi: float) -> tuple[str, str, str]:
    """How the clean band, the dirty band and the band between are named for this rule."""
    if isinstance(rule, AbsoluteRule):
        return (f"at or below the clean threshold {lo:g} g/kWh", f"at or above the dirty threshold {hi:g} g/kWh",
                f"between the thresholds {lo:g} and {hi:g} g/kWh")
    return (f"among its cleanest {lo:g} %", f"among its dirtiest {100 - hi:g} %",
            f"neither among its cleanest {lo:g} % nor its dirtiest {100 - hi:g} %")


def decide(
    policy: Policy,
    series: IntensitySeries,
    state: ModeState = ModeState(),
    *,
    now: datetime,
    remaining_work_s: float | None = None,
    deadline: datetime | None = None,
    slowdown: dict[str, float] | None = None,
    start_at: datetime | None = None,
    earliest: datetime | None = None,
    shift_step_s: float = 300.0,
    min_gain: float = 0.03,
) -> Decision:
    """Choose the mode for ``now``. See the module docstring for the rules.

    ``remaining_work_s`` is the work left measured in clean-mode seconds; ``slowdown`` maps a mode to
    its time factor relative to the clean mode (default: 1 + the mode's ``max_slowdown``).

    Start time: ``start_at`` when given; otherwise, for a job not yet started (``state.mode`` is
    None) with an ``earliest`` start, a ``deadline`` and ``remaining_work_s``, the start is shifted
    within ``[earliest, deadline - work]`` by :func:`scheduler.planner.shifting.best_start` on ``series``
    (the forecast), with ``now`` as the reference start; otherwise ``now``.
    """
    rule: Any = policy.rules  # a planner's rule fails in _measure, as it always did
    return decide_by_rule(rule, policy.modes, series, state, now=now, remaining_work_s=remaining_work_s,
                          deadline=deadline, slowdown=slowdown, start_at=start_at, earliest=earliest,
                          shift_step_s=shift_step_s, min_gain=min_gain)


def decide_by_rule(
    rule: AbsoluteRule | RelativeRule,
    modes: Mapping[str, Mode],
    series: IntensitySeries,
    state: ModeState = ModeState(),
    *,
    now: datetime,
    remaining_work_s: float | None = None,
    deadline: datetime | None = None,
    slowdown: Mapping[str, float] | None = None,
    start_at: datetime | None = None,
    earliest: datetime | None = None,
    shift_step_s: float = 300.0,
    min_gain: float = 0.03,
) -> Decision:
    """:func:`decide` on the threshold ``rule`` and the ``modes`` it switches between (their
    ``max_slowdown`` is the deadline guard's default slowdown)."""
    clean, dirty = rule.clean_mode, rule.dirty_mode
    shift_note = ""
    if start_at is not None:
        start = start_at
    elif state.mode is None and earliest is not None and deadline is not None and remaining_work_s and series:
        start, shift_note = _shifted_start(series, earliest=earliest, deadline=deadline, now=now,
                                           duration_s=remaining_work_s, step_s=shift_step_s, min_gain=min_gain)
        if start > now:
            point_then = series.at(start)
            if point_then is not None:
                now = start  # the mode is chosen for the moment the job will start
    else:
        start = now
    point = series.at(now)
    if point is None:
        mode = state.mode or clean
        return Decision(mode=mode, start_at=start,
                        reason=f"no intensity available at {now:%Y-%m-%d %H:%M} UTC, so {mode} mode is kept",
                        inputs={"now": now.isoformat()})
    score, lo, hi, described = _measure(rule, series, point, now)
    zone = classify(score, lo, hi)
    unit = "g/kWh" if isinstance(rule, AbsoluteRule) else "percentile"
    inputs: dict[str, Any] = {
        "now": now.isoformat(), "g_per_kwh": point.g_per_kwh, "kind": point.kind, "source": point.source,
        "score": score, "clean_below": lo, "dirty_above": hi, "unit": unit, "band": zone,
    }
    clean_words, dirty_words, between_words = _band_words(rule, lo, hi)
    if zone == "clean":
        mode, why = clean, f"{described}, {clean_words}"
    elif zone == "dirty":
        mode, why = dirty, f"{described}, {dirty_words}"
    elif state.mode is not None:
        mode, why = state.mode, f"{described}, {between_words} (hysteresis), so {state.mode} mode is kept"
    else:
        mode = clean if score - lo <= hi - score else dirty
        why = f"{described}, {between_words}, and nearer the {'clean' if mode == clean else 'dirty'} end"

    if state.mode is not None and mode != state.mode and state.since is not None:
        held = (now - state.since).total_seconds()
        if held < rule.min_dwell_s:
            why = f"{why}; but {state.mode} mode has run only {held:.0f} s of its minimum {rule.min_dwell_s:.0f} s, so it is kept"
            mode = state.mode

    if remaining_work_s is not None and deadline is not None and mode != clean:
        factor = (slowdown or {}).get(mode)
        if factor is None:
            factor = 1.0 + (modes[mode].max_slowdown or 0.0)
        finish = now + timedelta(seconds=remaining_work_s * factor)
        inputs["projected_finish"] = finish.isoformat()
        if finish > deadline:
            why = (f"{why}; but finishing in {mode} mode would end at {finish:%H:%M} UTC, after the deadline "
                   f"{deadline:%H:%M} UTC, so {clean} mode is used")
            mode = clean
    if shift_note:
        why = f"{shift_note}; {why}"
        inputs["start_at"] = start.isoformat()
    reason = why[0].upper() + why[1:] + "."
    return Decision(mode=mode, start_at=start, reason=reason, inputs=inputs, intensity=point)


def _shifted_start(series: IntensitySeries, *, earliest: datetime, deadline: datetime, now: datetime,
                   duration_s: float, step_s: float, min_gain: float) -> tuple[datetime, str]:
    """Best start from the forecast in ``series``, with ``now`` as the reference (see shifting)."""
    from scheduler.planner.shifting import best_start, series_grid

    origin = max(earliest, series.start) if series else earliest
    window_s = (deadline - origin).total_seconds()
    if window_s < duration_s:
        return max(now, earliest), ""
    grid = series_grid(series, origin, deadline, step_s)
    plan = best_start(grid, step_s=step_s, earliest_s=0.0, deadline_s=window_s, duration_s=duration_s, power_w=1.0,
                      reference_start_s=(now - origin).total_seconds(), min_gain=min_gain)
    start = origin + timedelta(seconds=plan.start_s)
    if plan.shifted:
        return start, f"start shifted to {start:%Y-%m-%d %H:%M} UTC: {plan.reason}"
    return start, f"start kept at {start:%H:%M} UTC: {plan.reason}"
