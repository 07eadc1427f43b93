"""gridshift's policy under the Zeus trace simulator: the same information as Zeus, spent better.

- Batch size: :class:`plans.batch_size.BatchSizeOptimizer`, the same object and configuration that
  ``batch_size: auto`` runs use (every size a candidate, walked to when its expected saving over
  the look-ahead beats the walk's cost, with noise and cost shape learned from the runs), fed with
  steady-state costs ``epochs * c_ep(b, p)`` that leave out the one-off profiling surcharge.
- Power limit: the same per-epoch cost as Zeus's JIT profiler, but found by a local search
  (:func:`plans.power_limit.local_limit_search`) that starts at the best limit of the nearest
  batch size already profiled and stops when the cost rises, so the profiling epoch is split over a
  few limits near the optimum instead of all of them (very low limits are slow); it walks on
  past a bump (``patience``), since measured per-epoch costs are not unimodal in the limit.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from plans.batch_size import BatchSizeConfig, BatchSizeOptimizer, Trial
from plans.power_limit import local_limit_search
from plans.zeus_trace.simulator import JobInfo, RunObservation

__all__ = ["GridshiftPolicy"]


class GridshiftPolicy:
    """Implements :class:`plans.zeus_trace.simulator.TracePolicy`."""

    def __init__(
        self, info: JobInfo, *, rng: np.random.Generator, config: BatchSizeConfig | None = None
    ) -> None:
        self.info = info
        self.rng = rng
        self.bso = BatchSizeOptimizer(config or BatchSizeConfig(info.batch_sizes, info.default_b, beta=info.beta))
        self.limits: dict[int, int] = {}
        self.per_epoch_cost: dict[int, float] = {}

    def _epoch_cost(self, b: int, t_ep_s: float, p_avg_w: float) -> float:
        eta = self.info.eta
        return (eta * p_avg_w + (1.0 - eta) * max(self.info.power_limits_w[b])) * t_ep_s

    def propose(self) -> int:
        return self.bso.propose(self.rng).batch_size

    def needs_profile(self, batch_size: int) -> bool:
        return batch_size not in self.limits

    def profile(self, batch_size: int, measure: Callable[[int], tuple[float, float]]) -> None:
        limits = self.info.power_limits_w[batch_size]
        hint = None
        if self.limits:
            nearest = min(self.limits, key=lambda b: (abs(np.log2(b / batch_size)), -b))
            hint = self.limits[nearest]

        def cost(p: int) -> float:
            t_ep, p_avg = measure(p)
            return self._epoch_cost(batch_size, t_ep, p_avg)

        best = local_limit_search(limits, cost, start_w=hint)
        self.limits[batch_size] = best
        t_ep, p_avg = measure(best)
        # steady-state cost per epoch, charged with the GPU-wide MaxPower as the simulator does
        eta = self.info.eta
        self.per_epoch_cost[batch_size] = eta * t_ep * p_avg + (1.0 - eta) * self.info.max_power_w * t_ep

    def power_limit(self, batch_size: int) -> int:
        return self.limits[batch_size]

    def observe(self, obs: RunObservation) -> None:
        if obs.never_ran:
            # it did not run: nothing was spent; the bound says this size cannot beat the best by far
            self.bso.observe(Trial(obs.batch_size, cost=obs.cost_bound, reached=False))
            return
        steady = obs.epochs * self.per_epoch_cost[obs.batch_size]
        self.bso.observe(Trial(obs.batch_size, cost=obs.cost, reached=obs.reached, steady_cost=steady))
