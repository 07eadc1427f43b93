"""Just-in-time power-limit profiling inside a training run, as a pure state machine.

States (frozen; every transition returns a new state and the actions for the driver to perform):

    Ready(index, steps_left)      --step_begin x steps_left-->  SetLimit(limits[index]); Warmup
    Warmup(index, steps_left)     --step_begin x steps_left-->  BeginWindow; Profiling
    Profiling(index, steps_left)  --step_begin x steps_left-->  EndWindow; Measuring
    Measuring(index)              --Measured(time, energy)-->   next limit (SetLimit; Warmup), or
                                                                 SetLimit(selected); Done
    Warmup/Profiling              --epoch_end-->                CancelWindow?; SetLimit(max); Ready(index, 1)
                                                                 (that limit restarts in the next epoch)
    Done(selected_w)              terminal (reuse the profile; re-select with another selector at will)

Limits are walked from the highest to the lowest. The driver (``plans.integrations.power_limit``) owns the backend
and the energy meter; this module has no clock, no NVML and no torch. Measurements from several
ranks combine as in Zeus: energy summed, time maxed (:func:`combine_ranks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Sequence, Union

from plans.errors import BadProfile

__all__ = [
    "LimitMeasurement",
    "Ready",
    "Warmup",
    "Profiling",
    "Measuring",
    "Done",
    "ProfilerState",
    "StepBegin",
    "EpochEnd",
    "Measured",
    "SetLimit",
    "BeginWindow",
    "EndWindow",
    "CancelWindow",
    "Action",
    "PowerLimitProfiler",
    "combine_ranks",
    "figure_problem",
    "local_limit_search",
    "MAX_POWER_W",
    "MAX_SLOWDOWN",
]


@dataclass(frozen=True)
class LimitMeasurement:
    """One profiled limit: mean time and energy per training step."""

    power_limit_w: float
    time_per_step_s: float
    energy_per_step_j: float

    def __post_init__(self) -> None:
        # isfinite: NaN fails no comparison and infinity passes them all
        if not (all(math.isfinite(v) for v in (self.power_limit_w, self.time_per_step_s, self.energy_per_step_j))
                and self.time_per_step_s > 0 and self.energy_per_step_j >= 0 and self.power_limit_w > 0):
            raise BadProfile(f"implausible measurement at {self.power_limit_w} W: {self.time_per_step_s} s, {self.energy_per_step_j} J")

    @property
    def avg_power_w(self) -> float:
        return self.energy_per_step_j / self.time_per_step_s


#: the largest figures a mode may have: a mode 100x slower than the reference is a mistake, not a
#: mode, and 100 kW is more than any one node draws (a power of 1e300 W or a slowdown of 1e300
#: would pass "positive" and overflow the planner)
MAX_SLOWDOWN = 100.0
MAX_POWER_W = 100_000.0


def figure_problem(value: Any, *, name: str, most: float) -> str | None:
    """Why ``value`` is not a usable figure ``name``: not a number, not finite, not positive, or
    above ``most``; None when it is one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} must be a number, got {value!r}"
    if not math.isfinite(value) or value <= 0:
        return f"{name} must be a positive finite number, got {value!r}"
    if value > most:
        return f"{name} {value:g} is implausible (at most {most:g})"
    return None


# -- states -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ready:
    """Waiting ``steps_left`` step begins before setting ``limits[index]``."""

    index: int
    steps_left: int
    measurements: tuple[LimitMeasurement, ...] = ()
    kind: Literal["ready"] = "ready"


@dataclass(frozen=True)
class Warmup:
    """The limit is set; ``steps_left`` steps run before the window opens."""

    index: int
    steps_left: int
    measurements: tuple[LimitMeasurement, ...] = ()
    kind: Literal["warmup"] = "warmup"


@dataclass(frozen=True)
class Profiling:
    """The window is open; it closes after ``steps_left`` more steps."""

    index: int
    steps_left: int
    measurements: tuple[LimitMeasurement, ...] = ()
    kind: Literal["profiling"] = "profiling"


@dataclass(frozen=True)
class Measuring:
    """The window has closed; waiting for the driver's (rank-combined) :class:`Measured`."""

    index: int
    measurements: tuple[LimitMeasurement, ...] = ()
    kind: Literal["measuring"] = "measuring"


@dataclass(frozen=True)
class Done:
    """Terminal: ``selected_w`` is in force; ``measurements`` is the profile."""

    selected_w: float
    measurements: tuple[LimitMeasurement, ...] = ()
    kind: Literal["done"] = "done"


ProfilerState = Union[Ready, Warmup, Profiling, Measuring, Done]


# -- events and actions -------------------------------------------------------------------------
@dataclass(frozen=True)
class StepBegin:
    pass


@dataclass(frozen=True)
class EpochEnd:
    pass


@dataclass(frozen=True)
class Measured:
    """The closed window, already combined across ranks: total time and energy over ``steps`` steps."""

    time_s: float
    energy_j: float
    steps: int


@dataclass(frozen=True)
class SetLimit:
    power_limit_w: float


@dataclass(frozen=True)
class BeginWindow:
    name: str


@dataclass(frozen=True)
class EndWindow:
    name: str


@dataclass(frozen=True)
class CancelWindow:
    name: str


Action = Union[SetLimit, BeginWindow, EndWindow, CancelWindow]


def combine_ranks(per_rank: Sequence[Measured]) -> Measured:
    """Distributed training: energy adds up over ranks, the step time is the slowest rank's."""
    if not per_rank:
        raise BadProfile("no rank measurements to combine")
    steps = {m.steps for m in per_rank}
    if len(steps) != 1:
        raise BadProfile(f"ranks measured different step counts: {sorted(steps)}")
    return Measured(time_s=max(m.time_s for m in per_rank), energy_j=sum(m.energy_j for m in per_rank), steps=steps.pop())


class PowerLimitProfiler:
    """The transition function. Holds only configuration; the state is passed in and returned.

    ``select`` maps the finished profile to the limit to run at (see :mod:`plans.selectors`).
    """

    def __init__(
        self,
        limits_w: Sequence[float],
        select: Callable[[Sequence[LimitMeasurement]], float],
        *,
        wait_steps: int = 1,
        warmup_steps: int = 10,
        profile_steps: int = 40,
    ) -> None:
        if not limits_w:
            raise BadProfile("no power limits to profile")
        if wait_steps < 0 or warmup_steps < 0 or profile_steps < 1:
            raise ValueError("wait_steps and warmup_steps must be >= 0 and profile_steps >= 1")
        self.limits_w = tuple(sorted(set(float(x) for x in limits_w), reverse=True))
        self.select = select
        self.wait_steps = wait_steps
        self.warmup_steps = warmup_steps
        self.profile_steps = profile_steps

    def initial(self) -> Ready:
        return Ready(index=0, steps_left=self.wait_steps + 1)

    def resume(self, measurements: Sequence[LimitMeasurement]) -> Done:
        """Skip profiling: a stored profile is reused."""
        ms = tuple(measurements)
        if not ms:
            raise BadProfile("cannot resume from an empty profile")
        return Done(selected_w=float(self.select(ms)), measurements=ms)

    def window_name(self, index: int) -> str:
        """The energy window's name for ``limits_w[index]``."""
        return f"gridshift-power-limit-{self.limits_w[index]:g}W"

    def step(self, state: ProfilerState, event: StepBegin | EpochEnd | Measured) -> tuple[ProfilerState, tuple[Action, ...]]:
        """Return the next state and the actions to perform, in order."""
        if isinstance(state, Done):
            return state, ()
        if isinstance(event, EpochEnd):
            if isinstance(state, (Warmup, Profiling)):
                acts: list[Action] = []
                if isinstance(state, Profiling):
                    acts.append(CancelWindow(self.window_name(state.index)))
                acts.append(SetLimit(self.limits_w[0]))
                return Ready(state.index, 1, state.measurements), tuple(acts)
            return state, ()
        if isinstance(event, Measured):
            if not isinstance(state, Measuring):
                raise BadProfile(f"a measurement arrived in state {state.kind}")
            m = LimitMeasurement(self.limits_w[state.index], event.time_s / event.steps, event.energy_j / event.steps)
            ms = state.measurements + (m,)
            nxt = state.index + 1
            if nxt < len(self.limits_w):
                return Warmup(nxt, self.warmup_steps, ms), (SetLimit(self.limits_w[nxt]),)
            chosen = float(self.select(ms))
            return Done(chosen, ms), (SetLimit(chosen),)
        # StepBegin
        if isinstance(state, Measuring):
            return state, ()  # the driver answers Measured right after EndWindow; nothing to do
        left = state.steps_left - 1
        if left > 0:
            return replace(state, steps_left=left), ()
        if isinstance(state, Ready):
            if self.warmup_steps == 0:
                return Profiling(state.index, self.profile_steps, state.measurements), (
                    SetLimit(self.limits_w[state.index]),
                    BeginWindow(self.window_name(state.index)),
                )
            return Warmup(state.index, self.warmup_steps, state.measurements), (SetLimit(self.limits_w[state.index]),)
        if isinstance(state, Warmup):
            return Profiling(state.index, self.profile_steps, state.measurements), (BeginWindow(self.window_name(state.index)),)
        return Measuring(state.index, state.measurements), (EndWindow(self.window_name(state.index)),)


def local_limit_search(
    limits_w: Sequence[int],
    cost: Callable[[int], float],
    *,
    start_w: int | None = None,
    patience: int = 2,
) -> int:
    """Find the limit with the lowest ``cost`` by walking out from ``start_w`` (default: the highest).

    Each direction is walked until ``patience`` consecutive limits fail to beat the best seen, so a
    bump in a noisy or non-unimodal curve does not stop the search (measured per-epoch costs have
    such bumps: the Zeus traces' cifar100 b=128 on A40 is cheapest at 225 W with local minima at 125
    and 175 W). Ties go to the higher limit, as in Zeus. Each ``cost(p)`` call is one profiled limit,
    so the number of calls is the profiling cost.
    """
    grid = sorted(set(limits_w))
    if not grid:
        raise BadProfile("no power limits to search")
    if patience < 1:
        raise ValueError("patience must be >= 1")
    if start_w is None:
        i0 = len(grid) - 1
    else:
        i0 = min(range(len(grid)), key=lambda i: (abs(grid[i] - start_w), -grid[i]))
    seen: dict[int, float] = {}

    def c(i: int) -> float:
        if i not in seen:
            seen[i] = cost(grid[i])
        return seen[i]

    def better(i: int, j: int) -> bool:  # is grid[i] strictly better than grid[j], ties to higher
        return c(i) < c(j) or (c(i) == c(j) and grid[i] > grid[j])

    best = i0
    c(i0)
    for step in (-1, +1):
        i, misses = i0 + step, 0
        while 0 <= i < len(grid) and misses < patience:
            if better(i, best):
                best, misses = i, 0
            else:
                misses += 1
            i += step
    return grid[best]
