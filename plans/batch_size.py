"""Batch-size optimisation across recurrences of one job: learn the cheapest size that reaches the target.

The state is a fold over the job's history (:class:`Trial` records, oldest first), so the same
history always gives the same optimiser: persist the trials (the ledger) and rebuild with
:meth:`BatchSizeOptimizer.from_history`. The rng is passed in.

Zeus (NSDI'23) runs two rounds of pruning (walk down from the default, then up, dropping a size at
its first miss), then Gaussian Thompson sampling with each arm's own sample variance. Its regret comes
from exploration: it keeps walking while runs merely *reach* the target (even at 1.8x the best cost),
walks up even after the down-walk found a cheaper size, repeats the whole walk in round 2, and trusts
a variance estimated from two samples (often near zero, or inflated by a profiling surcharge).

This optimiser explores less wastefully:

1. **One guided walk.** From the default size, walk down while each next size reaches the target
   *and* its steady-state cost is within ``explore_slack`` of the best; the first miss or clearly
   worse size ends the direction. Training cost is close to unimodal in the batch size, so the up
   walk is skipped when the down walk already found a size cheaper than the default by more than the
   noise margin.
2. **Steady-state costs.** A trial reports ``steady_cost`` (its cost without one-off overheads such
   as the profiling epoch); arms are compared on that, not on the first, surcharged run.
3. **Pooled noise for Thompson sampling.** Run-to-run noise is multiplicative (epochs to target
   vary per seed), so one coefficient of variation is pooled across arms with a prior
   (``prior_cv``, ``prior_weight`` pseudo-samples). An arm's mean has sd ``cv * mean / sqrt(n)``.
4. **Misses cost a retry.** Each arm's miss rate has a Beta posterior that is Thompson-sampled with
   its cost: the expected extra cost of an arm is ``p / (1 - p)`` misses, each charged its cost plus a
   retry at the best size. An arm that missed once is penalised but can still be retried.
5. **Concurrency.** While a trial is pending (another run of the same job in flight), exploration of
   that size is not duplicated: the concurrent run gets the best known size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

__all__ = ["Trial", "BatchSizeConfig", "Proposal", "BatchSizeOptimizer"]


@dataclass(frozen=True)
class Trial:
    """One job run: its batch size and outcome. ``pending`` runs have started but not reported."""

    batch_size: int
    cost: float = 0.0
    reached: bool = False
    steady_cost: float | None = None
    pending: bool = False

    @property
    def comparable_cost(self) -> float:
        return self.cost if self.steady_cost is None else self.steady_cost


@dataclass(frozen=True)
class BatchSizeConfig:
    """The search space and the knobs (validated once, in ``__post_init__``)."""

    batch_sizes: tuple[int, ...]
    default_batch_size: int
    explore_slack: float = 0.15
    up_skip_margin: float = 0.15
    prior_cv: float = 0.1
    prior_weight: float = 3.0

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b <= 0 for b in self.batch_sizes):
            raise ValueError("batch_sizes must be non-empty positive integers")
        if self.default_batch_size not in self.batch_sizes:
            raise ValueError(f"default_batch_size {self.default_batch_size} is not in batch_sizes")
        if self.explore_slack < 0 or self.up_skip_margin < 0:
            raise ValueError("explore_slack and up_skip_margin must be >= 0")
        if self.prior_cv <= 0 or self.prior_weight < 0:
            raise ValueError("prior_cv must be > 0 and prior_weight >= 0")
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))


@dataclass(frozen=True)
class Proposal:
    batch_size: int
    phase: Literal["default", "explore", "exploit", "concurrent"]
    reason: str


@dataclass
class _Arm:
    costs: list[float] = field(default_factory=list)
    misses: list[float] = field(default_factory=list)
    reached: int = 0


class BatchSizeOptimizer:
    """Guided walk, then pooled-noise Thompson sampling. Build with :meth:`from_history`."""

    def __init__(self, config: BatchSizeConfig) -> None:
        self.config = config
        self.arms: dict[int, _Arm] = {}
        self._sizes = config.batch_sizes
        self._phase: Literal["down", "up", "exploit"] = "down"
        self._last_down = config.default_batch_size
        self._last_up = config.default_batch_size
        self._pending: set[int] = set()

    @classmethod
    def from_history(cls, config: BatchSizeConfig, history: Sequence[Trial]) -> "BatchSizeOptimizer":
        opt = cls(config)
        for t in history:
            opt.observe(t)
        return opt

    # -- knowledge -----------------------------------------------------------------------------
    def _mean(self, b: int) -> float:
        arm = self.arms[b]
        return float(np.mean(arm.costs)) if arm.costs else math.inf

    def best(self) -> int | None:
        """The size with the lowest mean steady-state cost among those that reached the target."""
        reached = [b for b, a in self.arms.items() if a.reached]
        return min(reached, key=lambda b: (self._mean(b), -b)) if reached else None

    def _neighbour(self, b: int, step: int) -> int | None:
        i = self._sizes.index(b) + step
        return self._sizes[i] if 0 <= i < len(self._sizes) else None

    # -- fold ----------------------------------------------------------------------------------
    def observe(self, trial: Trial) -> None:
        """Fold one trial into the state (pending trials only block duplicate exploration)."""
        b = trial.batch_size
        if trial.pending:
            self._pending.add(b)
            return
        self._pending.discard(b)
        arm = self.arms.setdefault(b, _Arm())
        best_before = self.best()
        best_mean = self._mean(best_before) if best_before is not None else math.inf
        if trial.reached:
            arm.costs.append(trial.comparable_cost)
            arm.reached += 1
        else:
            arm.misses.append(trial.cost)
        if self._phase == "exploit":
            return
        worse = (not trial.reached) or trial.comparable_cost > (1.0 + self.config.explore_slack) * best_mean
        if self._phase == "down" and b == self._neighbour(self._last_down, -1):
            self._last_down = b
            if worse or self._neighbour(b, -1) is None:
                self._end_down()
        elif self._phase == "up" and b == self._neighbour(self._last_up, +1):
            self._last_up = b
            if worse or self._neighbour(b, +1) is None:
                self._phase = "exploit"

    def _end_down(self) -> None:
        b0 = self.config.default_batch_size
        best = self.best()
        if self._neighbour(b0, +1) is None:
            self._phase = "exploit"
        elif best is not None and best < b0 and self._mean(best) < (1.0 - self.config.up_skip_margin) * self._mean(b0):
            self._phase = "exploit"  # unimodal cost: a cheaper size below b0 means larger ones are worse
        else:
            self._phase = "up"

    # -- proposal ------------------------------------------------------------------------------
    def propose(self, rng: np.random.Generator) -> Proposal:
        """The batch size for the next run."""
        b0 = self.config.default_batch_size
        if b0 not in self.arms or not self.arms[b0].reached:
            return Proposal(b0, "default", "the default size is the only one known to reach the target")
        if self._phase == "down" and self._neighbour(self._last_down, -1) is None:
            self._end_down()
        if self._phase in ("down", "up"):
            nxt = self._neighbour(self._last_down, -1) if self._phase == "down" else self._neighbour(self._last_up, +1)
            if nxt is not None and nxt not in self._pending:
                return Proposal(nxt, "explore", f"walking {self._phase} from the default: {nxt} is untried")
            if nxt is not None:
                best = self.best()
                assert best is not None
                return Proposal(best, "concurrent", f"{nxt} is being explored by another run; using the best known size")
            self._phase = "exploit"
        return self._thompson(rng)

    def _pooled_cv(self) -> float:
        """Coefficient of variation of steady-state cost, pooled across arms, with a prior."""
        c = self.config
        ss, dof = c.prior_weight * c.prior_cv**2, c.prior_weight
        for arm in self.arms.values():
            if len(arm.costs) >= 2:
                x = np.asarray(arm.costs, dtype=float)
                rel = x / x.mean()
                ss += float(((rel - 1.0) ** 2).sum())
                dof += len(x) - 1
        return math.sqrt(ss / dof) if dof > 0 else c.prior_cv

    def _thompson(self, rng: np.random.Generator) -> Proposal:
        best = self.best()
        assert best is not None
        best_mean = self._mean(best)
        cv = self._pooled_cv()
        arms = sorted(b for b, a in self.arms.items() if a.reached)
        samples = []
        for b in arms:
            arm = self.arms[b]
            mean = self._mean(b)
            n = len(arm.costs)
            draw = rng.normal(mean, cv * mean / math.sqrt(n))
            extra = 0.0
            if arm.misses:
                # Thompson-sample the miss rate too (Beta posterior): an arm that missed once is not
                # written off for good, it is retried when its sampled miss rate comes out low
                p_miss = rng.beta(len(arm.misses), arm.reached + 1.0)
                extra = p_miss / max(1.0 - p_miss, 1e-6) * (float(np.mean(arm.misses)) + best_mean)
            samples.append(draw + extra)
        pick = arms[int(np.argmin(samples))]
        return Proposal(pick, "exploit", f"Thompson sample over {len(arms)} sizes (pooled cv {cv:.3f}) chose {pick}")
