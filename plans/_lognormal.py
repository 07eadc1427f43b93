"""Closed forms for a log-normal cost ``X`` (log X ~ N(mu, sd^2)), used to price batch-size trials."""

from __future__ import annotations

import math

__all__ = ["lognormal_capped_mean", "lognormal_put", "normal_cdf"]


def normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def lognormal_put(m: float, mu: float, sd: float) -> float:
    """E[(m - X)+] for log X ~ N(mu, sd^2)."""
    lm = math.log(m)
    return m * normal_cdf((lm - mu) / sd) - math.exp(mu + sd * sd / 2.0) * normal_cdf((lm - mu - sd * sd) / sd)


def lognormal_capped_mean(cap: float, mu: float, sd: float) -> float:
    """E[min(X, cap)] for log X ~ N(mu, sd^2) (``cap`` may be inf: runs never stopped)."""
    if math.isinf(cap):
        return math.exp(mu + sd * sd / 2.0)
    lc = math.log(cap)
    return math.exp(mu + sd * sd / 2.0) * normal_cdf((lc - mu - sd * sd) / sd) + cap * (1.0 - normal_cdf((lc - mu) / sd))
