"""A replica of Zeus's own policy (``zeus/_legacy/policy``), for side-by-side numbers.

- Power limit (section 6): JIT profiling of every limit in P(b) on the first run of b; the limit with
  the lowest ``(eta * P_avg + (1 - eta) * maxPL(b)) * T_ep`` wins, ties to the higher limit; frozen after.
- Batch size (section 7): two rounds of deterministic pruning (down from the start point, then up,
  stopping a direction at the first miss), then Gaussian Thompson sampling over the survivors with a
  flat prior and the population variance of each arm's rewards. Never-ran attempts are reported as
  ``100 * beta * min_cost``.
- Randomness (section 9): the Thompson stream is ``default_rng(seed)``, created when that phase
  begins; each proposal draws a permutation of the arms (unused), then one normal per arm.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from plans.errors import SimulationAborted
from plans.zeus_trace.simulator import JobInfo, RunObservation

__all__ = ["ZeusReplica", "jit_power_limit"]


def jit_power_limit(profile: dict[int, tuple[float, float]], *, eta: float) -> int:
    """Zeus's JIT choice over ``{p: (time per epoch s, average power W)}`` (section 6)."""
    max_pl = max(profile)
    best_p, best_c = -1, math.inf
    for p in sorted(profile, reverse=True):
        t_ep, p_avg = profile[p]
        c = (eta * p_avg + (1.0 - eta) * max_pl) * t_ep
        if c < best_c:
            best_p, best_c = p, c
    return best_p


class ZeusReplica:
    """Zeus's pruning + Gaussian Thompson sampling batch-size optimiser with JIT power limits."""

    def __init__(self, info: JobInfo, *, seed: int, pruning_rounds: int = 2) -> None:
        self.info = info
        self.seed = seed
        self.pruning_rounds = pruning_rounds
        self.limits: dict[int, int] = {}
        self.rewards: dict[int, list[float]] = {}
        self.min_cost = math.inf
        # pruning state
        self._round = 0
        self._candidates = sorted(info.batch_sizes)
        self._start = info.default_b
        self._begin_round()
        # Thompson state
        self._arms: list[int] | None = None
        self._ts_rng: np.random.Generator | None = None
        self._recurrence_acc = 0.0

    # -- pruning -------------------------------------------------------------------------------
    def _begin_round(self) -> None:
        self._down = sorted((c for c in self._candidates if c <= self._start), reverse=True)
        self._up = sorted(c for c in self._candidates if c > self._start)
        self._phase = "down"
        self._survivors: list[int] = []
        self._round_best = math.inf
        self._next_start: int | None = None

    def _end_round(self) -> None:
        self._round += 1
        self._candidates = sorted(self._survivors)
        if self._next_start is not None:
            self._start = self._next_start
        if self._round >= self.pruning_rounds:
            if not self._candidates:
                raise SimulationAborted("pruning left no batch size that reaches the target")
            self._arms = list(self._candidates)
            self._ts_rng = np.random.default_rng(self.seed)
        else:
            self._begin_round()

    def _pruning_next(self) -> int | None:
        while self._arms is None:
            if self._phase == "down":
                if self._down:
                    return self._down[0]
                self._phase = "up"
            if self._up:
                return self._up[0]
            self._end_round()
        return None

    # -- Thompson sampling ---------------------------------------------------------------------
    def _ts_next(self) -> int:
        assert self._arms is not None and self._ts_rng is not None
        rng = self._ts_rng
        rng.choice(self._arms, len(self._arms), replace=False)  # the exploration check: never fires
        samples = []
        for arm in self._arms:
            r = np.asarray(self.rewards[arm], dtype=float)
            mean = float(r.mean())
            var = float(r.var())
            sd = math.sqrt(var / len(r)) if var > 0 else 0.0
            samples.append(rng.normal(mean, sd))
        return self._arms[int(np.argmax(samples))]

    # -- the TracePolicy protocol ----------------------------------------------------------------
    def propose(self) -> int:
        nxt = self._pruning_next()
        return nxt if nxt is not None else self._ts_next()

    def needs_profile(self, batch_size: int) -> bool:
        return batch_size not in self.limits

    def profile(self, batch_size: int, measure: Callable[[int], tuple[float, float]]) -> None:
        prof = {p: measure(p) for p in sorted(self.info.power_limits_w[batch_size], reverse=True)}
        self.limits[batch_size] = jit_power_limit(prof, eta=self.info.eta)

    def power_limit(self, batch_size: int) -> int:
        return self.limits[batch_size]

    def observe(self, obs: RunObservation) -> None:
        b = obs.batch_size
        cost = 100.0 * self.info.beta * self.min_cost if obs.never_ran else obs.cost
        self.rewards.setdefault(b, []).append(-cost)
        if not obs.never_ran:
            self._recurrence_acc += obs.cost
            if obs.reached:
                self.min_cost = min(self.min_cost, self._recurrence_acc)
                self._recurrence_acc = 0.0
        if self._arms is not None:
            return
        if self._phase == "down" and self._down and self._down[0] == b:
            self._down.pop(0)
        elif self._up and self._up[0] == b:
            self._up.pop(0)
        if obs.reached:
            self._survivors.append(b)
            if obs.cost < self._round_best:
                self._round_best = obs.cost
                self._next_start = b
        elif self._phase == "down":
            self._phase = "up"
        else:
            self._up = []
