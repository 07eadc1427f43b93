"""Choose a power limit from a profile: small strategy classes, each validated in ``__init__``.

Every selector answers ``select(measurements) -> power_limit_w`` over
:class:`plans.power_limit.LimitMeasurement` records (time and energy per step at each limit):

- :class:`Energy`        argmin energy per step.
- :class:`Time`          argmin time per step.
- :class:`ZeusCost`      argmin ``eta * E + (1 - eta) * P_max * T`` (Zeus NSDI'23); ``P_max`` defaults
                         to the highest profiled limit times ``world_size``.

Multi-GPU: a profile's energy is the sum over its ``world_size`` ranks (time is the slowest rank's;
:func:`plans.power_limit.combine_ranks`), and a power limit is per GPU. So ``world_size`` must be
the number of GPUs *in the measurements* (``PowerProfile.world_size``), never the number of GPUs
the node happens to show: then the cost is per-GPU energy against per-GPU maximum power, times a
constant, and the same per-rank profile selects the same limit on a 1-GPU view and an 8-GPU node.
- :class:`MaxSlowdown`   the lowest limit whose time is within ``factor`` of the time at the highest limit.
- :class:`CarbonAware`   the Chase cost ``eta * CI * E + (1 - eta) * P_max * CI_max * T`` for the
                         intensity forecast over the next control interval, with hysteresis and a
                         minimum dwell (:meth:`CarbonAware.decide`, time passed in).

:func:`switch_point_g_per_kwh` gives the closed-form intensity CI* at which a two-mode policy should
move from the fast (high) limit to the efficient (low) one (shared/docs/carbon-apis.md, "Speed vs
efficiency as a threshold"):

    high is chosen iff CI < CI* = ((1 - eta) / eta) * P_max * CI_max * (t_L - t_H) / (e_H - e_L)

with t the time and e the energy per step (or per sample) at each limit. Ties go to the higher limit
in every selector (less slowdown for the same cost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from carbon.series import IntensitySeries
from plans.errors import BadProfile
from plans.power_limit import LimitMeasurement

__all__ = [
    "Selector",
    "Energy",
    "Time",
    "ZeusCost",
    "MaxSlowdown",
    "CarbonAware",
    "CarbonState",
    "CarbonDecision",
    "chase_cost",
    "switch_point_g_per_kwh",
    "forecast_g_per_kwh",
    "make_selector",
]


def _iv(measurements: Sequence[LimitMeasurement]) -> list[LimitMeasurement]:
    ms = sorted(measurements, key=lambda m: -m.power_limit_w)
    if not ms:
        raise BadProfile("the profile has no measurements")
    limits = [m.power_limit_w for m in ms]
    if len(set(limits)) != len(limits):
        raise BadProfile("the profile measures a power limit twice")
    return ms


def _argmin(ms: list[LimitMeasurement], key) -> float:  # ms sorted high -> low: min() keeps the first (higher) on ties
    return min(ms, key=key).power_limit_w


class Selector:
    """Base class: ``select(measurements) -> power_limit_w``."""

    def select(self, measurements: Sequence[LimitMeasurement]) -> float:
        raise NotImplementedError

    def __call__(self, measurements: Sequence[LimitMeasurement]) -> float:
        return self.select(measurements)


class Energy(Selector):
    """The limit with the least energy per step."""

    def select(self, measurements: Sequence[LimitMeasurement]) -> float:
        return _argmin(_iv(measurements), lambda m: m.energy_per_step_j)


class Time(Selector):
    """The limit with the shortest step. Noisy profiles may pick one below the maximum."""

    def select(self, measurements: Sequence[LimitMeasurement]) -> float:
        return _argmin(_iv(measurements), lambda m: m.time_per_step_s)


class ZeusCost(Selector):
    """argmin ``eta * E + (1 - eta) * P_max * T``; ``P_max`` = ``max_power_w`` or highest limit x ``world_size``."""

    def __init__(self, eta: float = 0.5, *, max_power_w: float | None = None, world_size: int = 1) -> None:
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"eta must be in [0, 1], got {eta}")
        if max_power_w is not None and max_power_w <= 0:
            raise ValueError("max_power_w must be positive")
        if world_size < 1:
            raise ValueError("world_size must be >= 1")
        self.eta, self.max_power_w, self.world_size = eta, max_power_w, world_size

    def cost(self, m: LimitMeasurement, max_power_w: float) -> float:
        return self.eta * m.energy_per_step_j + (1.0 - self.eta) * max_power_w * m.time_per_step_s

    def select(self, measurements: Sequence[LimitMeasurement]) -> float:
        ms = _iv(measurements)
        pmax = self.max_power_w if self.max_power_w is not None else ms[0].power_limit_w * self.world_size
        return _argmin(ms, lambda m: self.cost(m, pmax))


class MaxSlowdown(Selector):
    """The lowest limit whose step time is at most ``factor`` x the time at the highest limit."""

    def __init__(self, factor: float = 1.1) -> None:
        if not factor >= 1.0:
            raise ValueError(f"factor must be >= 1, got {factor}")
        self.factor = factor

    def select(self, measurements: Sequence[LimitMeasurement]) -> float:
        ms = _iv(measurements)
        bound = self.factor * ms[0].time_per_step_s
        return min(m.power_limit_w for m in ms if m.time_per_step_s <= bound)


def chase_cost(m: LimitMeasurement, *, ci_g_per_kwh: float, eta: float, max_power_w: float, max_ci_g_per_kwh: float) -> float:
    """Chase's carbon-weighted cost of one step: ``eta*CI*E + (1-eta)*P_max*CI_max*T`` (units: g/kWh x J)."""
    return eta * ci_g_per_kwh * m.energy_per_step_j + (1.0 - eta) * max_power_w * max_ci_g_per_kwh * m.time_per_step_s


def switch_point_g_per_kwh(
    high: LimitMeasurement, low: LimitMeasurement, *, eta: float, max_power_w: float, max_ci_g_per_kwh: float
) -> float:
    """CI*: below it the high (fast) limit has the lower Chase cost, above it the low one.

    ``inf`` when the high limit also uses no more energy (it always wins); ``0`` when the low limit
    is no slower (it always wins). Requires ``0 < eta <= 1``.
    """
    if not 0.0 < eta <= 1.0:
        raise ValueError("eta must be in (0, 1] for a switch point")
    if high.power_limit_w <= low.power_limit_w:
        raise ValueError("high must be the higher power limit")
    d_time = low.time_per_step_s - high.time_per_step_s
    d_energy = high.energy_per_step_j - low.energy_per_step_j
    if d_energy <= 0:
        return math.inf
    if d_time <= 0:
        return 0.0
    return (1.0 - eta) / eta * max_power_w * max_ci_g_per_kwh * d_time / d_energy


def forecast_g_per_kwh(series: IntensitySeries, *, now: datetime, interval_s: float) -> float:
    """Mean forecast intensity over the next control interval ``[now, now + interval_s)``."""
    value = series.mean_over(now, now + timedelta(seconds=interval_s))
    if value is None:
        raise BadProfile(f"the intensity series does not cover {now.isoformat()}")
    return value


@dataclass(frozen=True)
class CarbonState:
    """The limit in force and when it was set (UTC)."""

    power_limit_w: float
    since: datetime


@dataclass(frozen=True)
class CarbonDecision:
    power_limit_w: float
    switched: bool
    ci_g_per_kwh: float
    reason: str


class CarbonAware(Selector):
    """Chase-style: the limit minimising carbon-weighted cost for the forecast intensity.

    ``max_ci_g_per_kwh`` normalises time against carbon (Chase uses the trace's maximum). A switch
    needs the best limit's cost to beat the current limit's cost by more than ``hysteresis`` (a
    fraction), and the current limit to have been in force for ``min_dwell_s``. With ``max_slowdown``
    (a factor), only limits whose step time is within it of the highest limit's are candidates.
    """

    def __init__(
        self,
        eta: float = 0.5,
        *,
        max_ci_g_per_kwh: float,
        max_power_w: float | None = None,
        hysteresis: float = 0.05,
        min_dwell_s: float = 1800.0,
        max_slowdown: float | None = None,
        world_size: int = 1,
    ) -> None:
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"eta must be in [0, 1], got {eta}")
        if world_size < 1:
            raise ValueError("world_size must be >= 1")
        self.world_size = world_size
        if max_slowdown is not None and max_slowdown < 1.0:
            raise ValueError("max_slowdown is a factor >= 1 (1.1 = at most 10% slower than the highest limit)")
        self.max_slowdown = max_slowdown
        if not max_ci_g_per_kwh > 0:
            raise ValueError("max_ci_g_per_kwh must be positive")
        if hysteresis < 0 or min_dwell_s < 0:
            raise ValueError("hysteresis and min_dwell_s must be >= 0")
        self.eta, self.max_ci, self.max_power_w = eta, max_ci_g_per_kwh, max_power_w
        self.hysteresis, self.min_dwell_s = hysteresis, min_dwell_s
        self.ci_g_per_kwh = max_ci_g_per_kwh  # used by plain select(): the dirtiest case

    def _candidates(self, measurements: Sequence[LimitMeasurement]) -> list[LimitMeasurement]:
        ms = _iv(measurements)
        if self.max_slowdown is not None:
            bound = self.max_slowdown * ms[0].time_per_step_s
            ms = [m for m in ms if m.time_per_step_s <= bound]
        return ms

    def _costs(self, ms: list[LimitMeasurement], ci: float) -> dict[float, float]:
        pmax = self.max_power_w if self.max_power_w is not None else ms[0].power_limit_w * self.world_size
        return {
            m.power_limit_w: chase_cost(m, ci_g_per_kwh=ci, eta=self.eta, max_power_w=pmax, max_ci_g_per_kwh=self.max_ci)
            for m in ms
        }

    def select_for(self, measurements: Sequence[LimitMeasurement], ci_g_per_kwh: float) -> float:
        """The best limit for one intensity, without hysteresis."""
        ms = self._candidates(measurements)
        costs = self._costs(ms, ci_g_per_kwh)
        return _argmin(ms, lambda m: costs[m.power_limit_w])

    def select(self, measurements: Sequence[LimitMeasurement]) -> float:
        return self.select_for(measurements, self.ci_g_per_kwh)

    def decide(
        self,
        measurements: Sequence[LimitMeasurement],
        *,
        ci_g_per_kwh: float,
        state: CarbonState | None,
        now: datetime,
    ) -> tuple[CarbonState, CarbonDecision]:
        """The limit for the next control interval, given the forecast mean intensity for it."""
        ms = self._candidates(measurements)
        costs = self._costs(ms, ci_g_per_kwh)
        best = _argmin(ms, lambda m: costs[m.power_limit_w])
        if state is None or state.power_limit_w not in costs:
            new = CarbonState(best, now)
            return new, CarbonDecision(best, True, ci_g_per_kwh, f"start at {best:g} W for {ci_g_per_kwh:.0f} g/kWh")
        cur = state.power_limit_w
        if best == cur:
            return state, CarbonDecision(cur, False, ci_g_per_kwh, f"{cur:g} W is still the cheapest at {ci_g_per_kwh:.0f} g/kWh")
        dwell = (now - state.since).total_seconds()
        if dwell < self.min_dwell_s:
            return state, CarbonDecision(cur, False, ci_g_per_kwh, f"keep {cur:g} W: in force for {dwell:.0f} s < dwell {self.min_dwell_s:.0f} s")
        gain = 1.0 - costs[best] / costs[cur] if costs[cur] > 0 else 0.0
        if gain <= self.hysteresis:
            return state, CarbonDecision(cur, False, ci_g_per_kwh, f"keep {cur:g} W: {best:g} W saves only {gain:.1%} (hysteresis {self.hysteresis:.0%})")
        return CarbonState(best, now), CarbonDecision(
            best, True, ci_g_per_kwh, f"switch {cur:g} -> {best:g} W at {ci_g_per_kwh:.0f} g/kWh (saves {gain:.1%})"
        )


def make_selector(
    name: str,
    *,
    eta: float = 0.5,
    max_slowdown: float | None = None,
    max_ci_g_per_kwh: float | None = None,
    world_size: int = 1,
) -> Selector:
    """Build a selector from a policy's ``power_limit_select`` name.

    ``world_size``: the GPUs whose energy the profile's measurements sum (``PowerProfile.world_size``).
    """
    if name == "energy":
        return Energy()
    if name == "time":
        return Time()
    if name == "zeus_cost":
        return ZeusCost(eta, world_size=world_size)
    if name == "max_slowdown":
        return MaxSlowdown(1.0 + (max_slowdown if max_slowdown is not None else 0.1))
    if name == "carbon":
        return CarbonAware(eta, max_ci_g_per_kwh=max_ci_g_per_kwh or 1000.0, world_size=world_size)
    raise ValueError(f"unknown selector {name!r} (energy, time, zeus_cost, max_slowdown, carbon)")
