"""Batch-size optimisation across recurrences of one job: learn the cheapest size that reaches the target.

The state is a fold over the job's history (:class:`Trial` records, oldest first), so the same
history always gives the same optimiser: persist the trials (the ledger) and rebuild with
:meth:`BatchSizeOptimizer.from_history`. The rng is passed in.

Zeus (NSDI'23) prunes with two full walks (down from the default, then up, dropping a size at its
first miss), then runs Gaussian Thompson sampling with each arm's own two-sample variance. Its
regret is exploration: it tries every size that merely *reaches* the target, twice.

This optimiser decides each exploration by its expected value, with everything it needs learned
from the job's own trials (nothing assumes a cost shape):

1. **Noise, learned.** Run-to-run noise (epochs to target vary per seed) is modelled as
   multiplicative: the standard deviation of log cost is pooled over every size tried more than
   once, shrunk towards ``prior_cv`` with ``prior_weight`` pseudo-observations.
2. **Shape, learned.** An untried size next to the explored range is predicted by extending the
   line through the two nearest explored sizes in log cost vs log2 batch size (a flat line when only
   one is known). How far reality departs from that prediction (``shape_sd``, per doubling) is
   learned from this job's own explorations: each first run of a size is scored against the
   prediction made just before it, pooled with ``prior_shape_sd`` (``prior_weight`` pseudo-scores).
   Costs need not be unimodal; a size that turned out worse does not end the search by fiat.
3. **Explore only when it pays.** A candidate is tried when the saving it may bring over the
   remaining recurrences, ``(left - 1) * E[(best - cost)+]``, exceeds what trying it costs now,
   ``E[min(cost, beta * best)] + P(cost > beta * best) * best - best`` (a run past ``beta`` times the
   best is stopped, charged, and retried at the best size). Both are closed-form under the
   log-normal prediction. A size that only ever missed the target is a wall in that direction.
4. **Exploit with Thompson sampling** over the sizes that reached the target: log-normal posterior
   of each mean with the pooled noise; a size's miss rate has a Beta posterior, and a sampled miss
   rate adds ``p / (1 - p)`` expected retries, each charged its miss cost plus a run at the best size.
5. **Concurrency.** While a trial is pending (another run of the same job in flight), exploration of
   that size is not duplicated: the concurrent run gets the best known size.

Costs compared across sizes are ``steady_cost`` when a trial reports it (its cost without one-off
overheads such as the profiling epoch), else ``cost``.
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
    """The search space and the priors (validated once, in ``__post_init__``).

    ``horizon`` is the number of recurrences the optimiser plans for (exploration must pay for itself
    within them); ``beta`` is the early-stop factor the runs are held to (a run past ``beta`` x the
    best recurrence is stopped). ``prior_cv`` (noise, sd of log cost) and ``prior_shape_sd``
    (departure from a straight line in log cost per doubling of the batch size) are priors that the
    job's own data overrides, each worth ``prior_weight`` observations.
    """

    batch_sizes: tuple[int, ...]
    default_batch_size: int
    horizon: int = 50
    beta: float = 2.0
    prior_cv: float = 0.1
    prior_shape_sd: float = 0.3
    prior_weight: float = 2.0

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b <= 0 for b in self.batch_sizes):
            raise ValueError("batch_sizes must be non-empty positive integers")
        if self.default_batch_size not in self.batch_sizes:
            raise ValueError(f"default_batch_size {self.default_batch_size} is not in batch_sizes")
        if self.horizon < 1:
            raise ValueError("horizon must be >= 1")
        if not self.beta > 1.0:
            raise ValueError("beta must be > 1")
        if self.prior_cv <= 0 or self.prior_shape_sd <= 0 or self.prior_weight < 0:
            raise ValueError("prior_cv and prior_shape_sd must be > 0 and prior_weight >= 0")
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))


@dataclass(frozen=True)
class Proposal:
    batch_size: int
    phase: Literal["default", "explore", "exploit", "concurrent"]
    reason: str


@dataclass
class _Arm:
    log_costs: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    misses: list[float] = field(default_factory=list)

    @property
    def reached(self) -> int:
        return len(self.costs)


@dataclass(frozen=True)
class _Candidate:
    batch_size: int
    mu: float  # predicted log cost
    sd: float
    from_line: bool  # extrapolated from two sizes (else flat from one)


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _lognormal_put(m: float, mu: float, sd: float) -> float:
    """E[(m - X)+] for log X ~ N(mu, sd^2)."""
    lm = math.log(m)
    return m * _phi((lm - mu) / sd) - math.exp(mu + sd * sd / 2.0) * _phi((lm - mu - sd * sd) / sd)


def _lognormal_capped_mean(cap: float, mu: float, sd: float) -> float:
    """E[min(X, cap)] for log X ~ N(mu, sd^2)."""
    lc = math.log(cap)
    return math.exp(mu + sd * sd / 2.0) * _phi((lc - mu - sd * sd) / sd) + cap * (1.0 - _phi((lc - mu) / sd))


class BatchSizeOptimizer:
    """One value rule for trying a size (untried or re-tried), else the best. Build with :meth:`from_history`."""

    def __init__(self, config: BatchSizeConfig) -> None:
        self.config = config
        self.arms: dict[int, _Arm] = {}
        self._sizes = config.batch_sizes
        self._pending: set[int] = set()
        self._shape_scores: list[float] = []
        self._runs = 0

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

    def _miss_rate(self, b: int) -> float:
        arm = self.arms[b]
        return len(arm.misses) / (len(arm.misses) + arm.reached + 1.0)

    def expected_cost(self, b: int, best_mean: float | None = None) -> float:
        """Mean cost of a recurrence at ``b``: its runs that reach, plus expected misses and retries."""
        arm = self.arms[b]
        m = self._mean(b)
        if not arm.misses or math.isinf(m):
            return m
        q = self._miss_rate(b)
        retry = m if best_mean is None else min(m, best_mean)
        return m + q / (1.0 - q) * (float(np.mean(arm.misses)) + retry)

    def best(self) -> int | None:
        """The size with the lowest expected recurrence cost among those that reached the target."""
        reached = [b for b, a in self.arms.items() if a.reached]
        return min(reached, key=lambda b: (self.expected_cost(b), -b)) if reached else None

    def noise_sd(self) -> float:
        """Pooled sd of log cost over sizes run more than once, shrunk towards ``prior_cv``."""
        c = self.config
        ss, dof = c.prior_weight * c.prior_cv**2, c.prior_weight
        for arm in self.arms.values():
            if len(arm.log_costs) >= 2:
                x = np.asarray(arm.log_costs)
                ss += float(((x - x.mean()) ** 2).sum())
                dof += len(x) - 1
        return math.sqrt(ss / dof) if dof > 0 else c.prior_cv

    def arm_noise_sd(self, b: int) -> float:
        """The size's own sd of log cost, shrunk towards the pooled one (some sizes are bimodal)."""
        w = self.config.prior_weight
        x = np.asarray(self.arms[b].log_costs)
        pooled = self.noise_sd()
        if len(x) < 2:
            return pooled
        dof = w + len(x) - 1
        return math.sqrt((w * pooled**2 + float(((x - x.mean()) ** 2).sum())) / dof) if dof > 0 else pooled

    def shape(self) -> tuple[float, float]:
        """Mean and sd of a first run's departure from the straight-line prediction, per doubling.

        Learned from this job's explorations, shrunk towards (0, ``prior_shape_sd``); a positive mean
        is a convex cost curve (log cost vs log batch size).
        """
        c = self.config
        z = self._shape_scores
        n = c.prior_weight + len(z)
        if n <= 0:
            return 0.0, c.prior_shape_sd
        mean = sum(z) / n
        ss = c.prior_weight * (c.prior_shape_sd**2 + mean**2) + sum((x - mean) ** 2 for x in z)
        return mean, math.sqrt(ss / n)

    def _log_mean(self, b: int) -> float:
        return float(np.mean(self.arms[b].log_costs))

    def _nearest_reached(self, b: int) -> int | None:
        known = [s for s, a in self.arms.items() if a.reached]
        return min(known, key=lambda s: (abs(math.log2(s / b)), -s)) if known else None

    def _predict(self, b: int) -> _Candidate | None:
        """The log-normal prediction of untried ``b``'s mean cost from the explored sizes beside it."""
        near = self._nearest_reached(b)
        if near is None:
            return None
        x, x1 = math.log2(b), math.log2(near)
        # the line through the two nearest reached sizes on that side; flat with only one
        same = sorted((s for s, a in self.arms.items() if a.reached and (s < b) == (near < b)),
                      key=lambda s: abs(math.log2(s / b)))
        var_points = self.arm_noise_sd(near) ** 2 / self.arms[near].reached
        slope = 0.0
        line = len(same) >= 2
        if line:
            x2 = math.log2(same[1])
            slope = (self._log_mean(near) - self._log_mean(same[1])) / (x1 - x2)
            var_points += self.arm_noise_sd(same[1]) ** 2 / self.arms[same[1]].reached
        dx = abs(x - x1)
        bias, spread = self.shape() if line else (0.0, self.config.prior_shape_sd)
        mu = self._log_mean(near) + slope * (x - x1) + bias * dx
        sd = math.sqrt((spread * dx) ** 2 + var_points)
        return _Candidate(b, mu, max(sd, 1e-9), line)

    def _frontier(self) -> list[int]:
        """Untried sizes just beyond the explored range, unless a miss-only size walls them off."""
        tried = sorted(self.arms)
        if not tried:
            return []
        out = []
        lo, hi = self._sizes.index(tried[0]), self._sizes.index(tried[-1])
        if lo > 0 and self.arms[tried[0]].reached:
            out.append(self._sizes[lo - 1])
        if hi + 1 < len(self._sizes) and self.arms[tried[-1]].reached:
            out.append(self._sizes[hi + 1])
        return out

    def _value(self, mean_mu: float, mean_sd: float, noise_sd: float, best_cost: float, extra: float = 0.0) -> float:
        """Expected saving over the recurrences left minus the expected extra cost of one run now.

        ``mean_mu``/``mean_sd``: the log-normal belief about the size's mean cost; ``noise_sd``: one
        run's noise. One run moves the belief by sd ``mean_sd^2 / sqrt(mean_sd^2 + noise_sd^2)`` (the
        knowledge gradient: a noisy run only partly reveals the mean). A run past ``beta`` x the best
        is stopped, charged and followed by a retry at the best size. ``extra``: expected miss overhead.
        """
        left = max(self.config.horizon - self._runs, 1)
        run_sd = math.sqrt(mean_sd**2 + noise_sd**2)
        moved_sd = max(mean_sd**2 / run_sd, 1e-9)
        gain = (left - 1) * _lognormal_put(best_cost, mean_mu, moved_sd)
        cap = self.config.beta * best_cost
        p_cut = 1.0 - _phi((math.log(cap) - mean_mu) / run_sd)
        cost = _lognormal_capped_mean(cap, mean_mu, run_sd) + p_cut * best_cost + extra - best_cost
        return gain - cost

    # -- fold ----------------------------------------------------------------------------------
    def observe(self, trial: Trial) -> None:
        """Fold one trial into the state (pending trials only block duplicate exploration)."""
        b = trial.batch_size
        if trial.pending:
            self._pending.add(b)
            return
        self._pending.discard(b)
        if trial.reached:
            self._runs += 1  # a recurrence ends at its first run that reaches the target
        ok = trial.reached and trial.comparable_cost > 0
        if b not in self.arms and ok:
            pred = self._predict(b)
            near = self._nearest_reached(b)
            if pred is not None and near is not None and pred.from_line:
                dx = max(abs(math.log2(b / near)), 1e-9)
                # departure from the straight line itself (pred.mu already carries the learned bias)
                self._shape_scores.append((math.log(trial.comparable_cost) - pred.mu) / dx + self.shape()[0])
        arm = self.arms.setdefault(b, _Arm())
        if ok:
            arm.costs.append(trial.comparable_cost)
            arm.log_costs.append(math.log(trial.comparable_cost))
        else:
            arm.misses.append(trial.cost)

    # -- proposal ------------------------------------------------------------------------------
    def propose(self, rng: np.random.Generator) -> Proposal:
        """The batch size for the next run (deterministic given the history; ``rng`` is kept for callers)."""
        b0 = self.config.default_batch_size
        if b0 not in self.arms or not self.arms[b0].reached:
            return Proposal(b0, "default", "the default size is the only one known to reach the target")
        best = self.best()
        assert best is not None
        best_cost = self.expected_cost(best)
        options: list[tuple[float, int, str]] = []
        for b in self._frontier():
            cand = self._predict(b)
            if cand is None:
                continue
            v = self._value(cand.mu, cand.sd, self.noise_sd(), best_cost)
            options.append((v, b,
                            f"{b} is untried; predicted {math.exp(cand.mu) / best_cost:.2f}x the best {best} "
                            f"(sd {cand.sd:.2f} in log)"))
        for b, arm in self.arms.items():
            if b == best or not arm.reached:
                continue
            sd = self.arm_noise_sd(b)
            mean_sd = sd / math.sqrt(arm.reached)
            overhead = self.expected_cost(b, best_cost) - self._mean(b)
            mu = math.log(self._mean(b))
            v = self._value(mu, mean_sd, sd, best_cost, overhead)
            options.append((v, b,
                            f"{b} may still beat {best}: {self.expected_cost(b, best_cost) / best_cost:.2f}x over {arm.reached} run(s)"))
        # equal values (two flat predictions from the default) go to the smaller size: Zeus walks down first
        options.sort(key=lambda o: (-o[0], o[1]))
        if options and options[0][0] > 0:
            value, b, why = options[0]
            if b in self._pending and b not in self.arms:
                return Proposal(best, "concurrent", f"{b} is being explored by another run; using the best known size {best}")
            # "explore" is a size never run; another run of a known size is exploitation that also learns
            phase: Literal["explore", "exploit"] = "explore" if b not in self.arms else "exploit"
            return Proposal(b, phase, f"{why}; worth {value / best_cost:.2f} runs over the recurrences left")
        return Proposal(best, "exploit", f"{best} has the lowest expected cost ({best_cost:.4g}) and nothing is worth trying")
