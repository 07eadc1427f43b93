"""Batch-size optimisation across recurrences of one job: learn the cheapest size that reaches the target.

The state is a fold over the job's history (:class:`Trial` records, oldest first), so the same
history always gives the same optimiser: persist the trials (the ledger) and rebuild with
:meth:`BatchSizeOptimizer.from_history`. The rng is passed in.

Zeus (NSDI'23) prunes with two full walks (down from the default, then up, dropping a size at its
first miss), then runs Gaussian Thompson sampling with each arm's own two-sample variance over the
survivors. Its regret is exploration: it tries every size that merely *reaches* the target, twice.
And a size its walk dropped, or one past it, is never tried again.

This optimiser prices every possible exploration, every recurrence, with everything it needs
learned from the job's own trials (nothing assumes a cost shape), and no size is ever ruled out by
a rule: only by its value under the evidence.

1. **Noise, learned.** Run-to-run noise (epochs to target vary per seed) is modelled as
   multiplicative: the standard deviation of log cost is pooled over every size tried more than
   once, shrunk towards ``prior_cv`` with ``prior_weight`` pseudo-observations.
2. **Shape, learned.** An untried size is predicted by extending the line through the two nearest
   explored sizes on its side in log cost vs log2 batch size (a flat line when only one is known);
   the noise of both means is carried through the extension. How far reality departs from that
   prediction (``shape_sd``, per doubling) is learned from this job's own explorations: each first
   run of a size is scored against the prediction made just before it, pooled with
   ``prior_shape_sd`` (``prior_weight`` pseudo-scores). Costs need not be unimodal.
3. **Every size is a candidate.** An untried size is reached by walking one size at a time from
   the nearest size already tried, as Zeus walks, so a far size is explored through the sizes
   between. A walk is taken when the saving it may bring over the next ``horizon`` recurrences
   beats what it costs: each size on the way costs ``E[min(cost, beta * best)] + P(cost > beta *
   best) * best - best`` (a run past ``beta`` times the best is stopped, charged, and retried at the
   best size); the target saves ``E[(best - mean)+]`` per recurrence under the belief that its
   runs leave. Both are closed-form under the log-normal prediction. The belief about an untried
   size is a mixture: the trend above, and with probability ``prior_valley`` a size unrelated to
   its neighbours (log-normal around the best cost), so a cheap walk through worse sizes to a
   possible valley beyond them is still taken; a dear one (sizes stopped at ``beta``) is not.
   The number of runs a size gets to show its worth is chosen too (KG(*)): under heavy noise one
   run cannot change the decision but a few can, and a one-run rule would stop there.
4. **Misses are evidence, not walls.** A run stopped at ``beta`` x the best (or out of epochs)
   counts against its own size through the miss rate below, and its stopped cost enters the
   trend as a lower bound, so the sizes beyond are predicted dearer but keep their chance; walks
   start past it. Early stopping decides when a trial is abandoned, never whether a region is
   visited.
5. **Exploit** the size with the lowest expected recurrence cost. A size's miss rate ``q``
   (``misses / (misses + reached + 1)``) adds ``q / (1 - q)`` expected retries, each charged its
   mean miss plus a run at the best size. A size already tried is re-run when the same value rule
   says its uncertain mean may still beat the best.
6. **Concurrency.** While a trial is pending (another run of the same job in flight), exploration of
   that size is not duplicated: the concurrent run gets the best known size.

The ``horizon`` is a rolling look-ahead, the same at every recurrence: the rule never stops
exploring because recurrences run out, only because the evidence says a size is not worth it.
Costs compared across sizes are ``steady_cost`` when a trial reports it (its cost without one-off
overheads such as the profiling epoch), else ``cost``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from plans._lognormal import lognormal_capped_mean, lognormal_put, normal_cdf

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

    ``horizon`` is the number of future recurrences an exploration must pay for itself within (a
    rolling look-ahead: the job is assumed to recur at least that often again); ``beta`` is the
    early-stop factor the runs are held to (a run past ``beta`` x the best recurrence is stopped;
    ``math.inf``: never). ``prior_cv`` (noise, sd of log cost) and ``prior_shape_sd``
    (departure from a straight line in log cost per doubling of the batch size) are priors that the
    job's own data overrides, each worth ``prior_weight`` observations. ``prior_valley`` is the
    prior chance that an untried size breaks from the trend of its neighbours altogether (a
    valley past worse sizes: integer epochs, a different optimisation regime); such a size's mean
    is then believed log-normal around the best cost with sd ``valley_sd``. It keeps a walk
    through worse sizes worth taking when the walk is cheap, and never when it is dear.
    """

    batch_sizes: tuple[int, ...]
    default_batch_size: int
    horizon: int = 50
    beta: float = 2.0
    prior_cv: float = 0.1
    prior_shape_sd: float = 0.3
    prior_weight: float = 2.0
    prior_valley: float = 0.1
    valley_sd: float = 0.3

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b <= 0 for b in self.batch_sizes):
            raise ValueError("batch_sizes must be non-empty positive integers")
        if self.default_batch_size not in self.batch_sizes:
            raise ValueError(f"default_batch_size {self.default_batch_size} is not in batch_sizes")
        if self.horizon < 1:
            raise ValueError("horizon must be >= 1")
        if not self.beta > 1.0:
            raise ValueError("beta must be > 1 (math.inf: runs are never stopped)")
        if self.prior_cv <= 0 or self.prior_shape_sd <= 0 or self.prior_weight < 0:
            raise ValueError("prior_cv and prior_shape_sd must be > 0 and prior_weight >= 0")
        if not 0.0 <= self.prior_valley < 1.0 or self.valley_sd <= 0:
            raise ValueError("prior_valley must be in [0, 1) and valley_sd > 0")
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


class BatchSizeOptimizer:
    """One value rule for trying a size (untried or re-tried), else the best. Build with :meth:`from_history`."""

    def __init__(self, config: BatchSizeConfig) -> None:
        self.config = config
        self.arms: dict[int, _Arm] = {}
        self._sizes = config.batch_sizes
        self._pending: set[int] = set()
        self._shape_scores: list[float] = []

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

    def _points(self) -> dict[int, tuple[float, float]]:
        """Known points of the curve: size -> (mean log cost, its variance).

        A size that only missed enters at the log of its largest stopped cost with one run's
        noise: its true cost is at least that, so the line through it bends the prediction of
        the sizes beyond the right way without ruling them out (the bound is optimistic).
        """
        noise = self.noise_sd()
        out: dict[int, tuple[float, float]] = {}
        for b, a in self.arms.items():
            if a.reached:
                out[b] = (float(np.mean(a.log_costs)), self.arm_noise_sd(b) ** 2 / a.reached)
            elif a.misses and max(a.misses) > 0:
                out[b] = (math.log(max(a.misses)), noise**2)
        return out

    def _predict(self, b: int) -> _Candidate | None:
        """The log-normal prediction of untried ``b``'s mean cost from the explored sizes beside it."""
        pts = self._points()
        if not any(a.reached for a in self.arms.values()):
            return None
        near = min(pts, key=lambda s: (abs(math.log2(s / b)), -s))
        x, x1 = math.log2(b), math.log2(near)
        y1, var_near = pts[near]
        # the line through the two nearest known sizes on that side; flat with only one
        same = sorted((s for s in pts if (s < b) == (near < b)), key=lambda s: abs(math.log2(s / b)))
        var_points = var_near
        slope = 0.0
        line = len(same) >= 2
        if line:
            x2 = math.log2(same[1])
            y2, var2 = pts[same[1]]
            slope = (y1 - y2) / (x1 - x2)
            # mu = y1 (1 + r) - y2 r: the noise of both means, amplified by how far the line is extended
            r = (x - x1) / (x1 - x2)
            var_points = var_near * (1.0 + r) ** 2 + var2 * r**2
        dx = abs(x - x1)
        bias, spread = self.shape() if line else (0.0, self.config.prior_shape_sd)
        mu = y1 + slope * (x - x1) + bias * dx
        sd = math.sqrt((spread * dx) ** 2 + var_points)
        return _Candidate(b, mu, max(sd, 1e-9), line)

    def _walk(self, t: int) -> list[int]:
        """The untried sizes from the nearest tried size (reached or not) to untried ``t``, ``t`` last.

        Exploration moves one size at a time, as Zeus's walk does, so a far size is reached through
        the sizes between, each of which informs the next prediction. The walk starts *past* a size
        that only missed: it is not re-run to get beyond it.
        """
        sizes = self._sizes
        i = sizes.index(t)
        near = min((sizes.index(b) for b in self.arms), key=lambda j: (abs(j - i), -j))
        step = 1 if i > near else -1
        return [sizes[j] for j in range(near + step, i + step, step)]

    def _run_cost(self, mu: float, run_sd: float, best_cost: float) -> float:
        """Expected extra cost, over a recurrence at the best size, of one run whose log cost is N(mu, run_sd^2).

        A run past ``beta`` x the best is stopped, charged, and followed by a retry at the best size.
        """
        cap = self.config.beta * best_cost
        p_cut = 0.0 if math.isinf(cap) else 1.0 - normal_cdf((math.log(cap) - mu) / run_sd)
        return lognormal_capped_mean(cap, mu, run_sd) + p_cut * best_cost - best_cost

    def _value(self, beliefs: Sequence[tuple[float, float, float]], noise_sd: float, best_cost: float, *,
               left: int, extra: float = 0.0) -> tuple[float, int]:
        """(value, runs): the best expected saving over ``left`` recurrences of ``runs`` runs of a size.

        ``beliefs``: a mixture of log-normal beliefs about the size's mean cost, ``(weight, mu, sd)``;
        ``noise_sd``: one run's noise. ``m`` runs move a belief by sd
        ``sd^2 / sqrt(sd^2 + noise_sd^2 / m)``; the saving is ``(left - m) * E[(best - mean)+]`` under
        the moved belief, less the ``m`` runs' expected extra cost (``extra`` per run: expected miss
        overhead). Taking the best ``m`` (KG(*), Frazier and Powell) rather than ``m = 1`` matters
        under heavy noise: one run of a noisy size can never change the decision, several can, so
        the one-run rule would stop there.
        """
        one_run = extra + sum(w * self._run_cost(mu, math.sqrt(sd**2 + noise_sd**2), best_cost)
                              for w, mu, sd in beliefs)
        best_v, best_m = -math.inf, 1
        m = 1
        while m < left:
            put = sum(w * lognormal_put(best_cost, mu, max(sd**2 / math.sqrt(sd**2 + noise_sd**2 / m), 1e-9))
                      for w, mu, sd in beliefs)
            v = (left - m) * put - m * one_run
            if v > best_v:
                best_v, best_m = v, m
            m *= 2
        return (best_v if best_v > -math.inf else -one_run), best_m

    # -- fold ----------------------------------------------------------------------------------
    def observe(self, trial: Trial) -> None:
        """Fold one trial into the state (pending trials only block duplicate exploration)."""
        b = trial.batch_size
        if trial.pending:
            self._pending.add(b)
            return
        self._pending.discard(b)
        ok = trial.reached and trial.comparable_cost > 0
        if b not in self.arms and ok:
            pred = self._predict(b)
            if pred is not None and pred.from_line:
                near = min(self._points(), key=lambda s: (abs(math.log2(s / b)), -s))
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
        left = self.config.horizon
        noise = self.noise_sd()
        options: list[tuple[float, int, str]] = []
        for t in self._sizes:
            if t in self.arms:
                continue
            walk = self._walk(t)
            preds = [self._predict(s) for s in walk]
            cand = preds[-1]
            assert cand is not None  # a size has reached the target, so every size has a prediction
            c = self.config
            valley = (c.prior_valley, math.log(best_cost), c.valley_sd)
            # the sizes on the way are run once each, under the same mixed belief; their own chance of
            # being cheaper is not counted
            spent = sum(w * self._run_cost(mu, math.sqrt(sd**2 + noise**2), best_cost)
                        for p in preds[:-1] if p for w, mu, sd in ((1.0 - c.prior_valley, p.mu, p.sd), valley))
            beliefs = [(1.0 - c.prior_valley, cand.mu, cand.sd), valley]
            v, m = self._value(beliefs, noise, best_cost, left=max(left - len(walk) + 1, 1))
            via = f" via {', '.join(map(str, walk[:-1]))}" if len(walk) > 1 else ""
            options.append((v - spent, walk[0],
                            f"{t} is untried; predicted {math.exp(cand.mu) / best_cost:.2f}x the best {best} "
                            f"(sd {cand.sd:.2f} in log){via}, priced over {m} run(s)"))
        for b, arm in self.arms.items():
            if b == best or not arm.reached:
                continue
            sd = self.arm_noise_sd(b)
            mean_sd = sd / math.sqrt(arm.reached)
            overhead = self.expected_cost(b, best_cost) - self._mean(b)
            mu = math.log(self._mean(b))
            v, m = self._value([(1.0, mu, mean_sd)], sd, best_cost, left=left, extra=overhead)
            options.append((v, b,
                            f"{b} may still beat {best}: {self.expected_cost(b, best_cost) / best_cost:.2f}x over "
                            f"{arm.reached} run(s), priced over {m} more"))
        # equal values (two flat predictions from the default) go to the smaller size: Zeus walks down first
        options.sort(key=lambda o: (-o[0], o[1]))
        if options and options[0][0] > 0:
            value, b, why = options[0]
            if b in self._pending and b not in self.arms:
                return Proposal(best, "concurrent", f"{b} is being explored by another run; using the best known size {best}")
            # "explore" is a size never run; another run of a known size is exploitation that also learns
            phase: Literal["explore", "exploit"] = "explore" if b not in self.arms else "exploit"
            return Proposal(b, phase, f"{why}; worth {value / best_cost:.2f} runs over the next {left} recurrences")
        return Proposal(best, "exploit",
                        f"{best} has the lowest expected cost ({best_cost:.4g}) and nothing is worth trying")
