"""How good was a forecast *for the decision*: pure scores over past nights.

MAPE and bias say how far off the numbers were; a start choice only needs the right *order* of the
hours in the job's window, so two scores speak to it directly:

* :func:`rank_correlation`: Spearman's rho between forecast and observed over the window's hours;
* :func:`start_gain_share`: over past nights, the share of the perfect-foresight gain (moving the
  start from the cron time to the best start) that choosing the start on the forecast captured.
  1 is perfect foresight, 0 no better than the cron time, below 0 worse than not moving at all.

A window is given in grid steps from the night's origin: ``reference`` (the cron start), ``starts``
(allowed starts) and ``length`` (steps the job runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["ForecastSkill", "Night", "StartWindow", "night_scores", "rank_correlation", "start_gain",
           "start_gain_share"]


@dataclass(frozen=True)
class StartWindow:
    """The start decision in grid steps from the origin: the cron start, the allowed starts, the run's length."""

    reference: int
    starts: tuple[int, ...]
    length: int

    @property
    def end(self) -> int:
        """Steps from the origin that the decision's outcome depends on."""
        return max(max(self.starts, default=0), self.reference) + self.length


@dataclass(frozen=True)
class Night:
    """One past start decision: the forecast made at its origin and what was then observed (both from lead 0)."""

    forecast: np.ndarray
    observed: np.ndarray


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    for v in np.unique(x):  # ties share their mean rank
        tie = x == v
        if tie.sum() > 1:
            r[tie] = r[tie].mean()
    return r


def rank_correlation(forecast: np.ndarray, observed: np.ndarray) -> float | None:
    """Spearman's rho over the hours both know; None with fewer than 3 or no spread in either."""
    f, y = np.asarray(forecast, dtype=float), np.asarray(observed, dtype=float)
    ok = ~(np.isnan(f) | np.isnan(y))
    if ok.sum() < 3:
        return None
    a, b = _ranks(f[ok]), _ranks(y[ok])
    a, b = a - a.mean(), b - b.mean()
    den = float(np.sqrt((a @ a) * (b @ b)))
    return float(a @ b / den) if den > 0 else None


def _run_means(x: np.ndarray, window: StartWindow) -> np.ndarray:
    return np.array([float(np.mean(x[s: s + window.length])) for s in (window.reference, *window.starts)])


def start_gain(night: Night, window: StartWindow) -> tuple[float, float] | None:
    """(gain captured, gain possible) in mean g/kWh over the run: the forecast's start against the cron start.

    None when the night is not fully observed or forecast over the window.
    """
    f = np.asarray(night.forecast, dtype=float)[: window.end]
    y = np.asarray(night.observed, dtype=float)[: window.end]
    if len(f) < window.end or len(y) < window.end or np.isnan(f).any() or np.isnan(y).any() or not window.starts:
        return None
    fm, ym = _run_means(f, window), _run_means(y, window)
    chosen = 1 + int(np.argmin(fm[1:]))
    if fm[chosen] >= fm[0]:
        chosen = 0  # a forecast that sees no gain keeps the cron start
    return float(ym[0] - ym[chosen]), float(ym[0] - ym[1:].min())


def start_gain_share(nights: Sequence[Night], window: StartWindow) -> tuple[float | None, int]:
    """(share of the possible start gain captured over ``nights``, nights scored); None when none could be."""
    got = possible = 0.0
    n = 0
    for night in nights:
        g = start_gain(night, window)
        if g is None:
            continue
        got += g[0]
        possible += max(g[1], 0.0)
        n += 1
    if n == 0 or possible <= 0:
        return None, n
    return got / possible, n


@dataclass(frozen=True)
class ForecastSkill:
    """A forecast's recent record for one decision, and the sentence a plan says about it."""

    label: str
    nights: int
    start_gain_share: float | None
    rank_correlation: float | None
    mape_pct: float | None
    bias_g_per_kwh: float | None
    weights: dict[str, float]

    def sentence(self) -> str:
        """One sentence: which forecast, its weights, and what it earned over the scored nights."""
        mix = ", ".join(f"{k} {v:.0%}" for k, v in sorted(self.weights.items(), key=lambda kv: -kv[1]))
        used = f"{self.label} forecast" + (f" ({mix} of the weight)" if mix else "")
        if self.nights == 0 or self.start_gain_share is None:
            record = "no scored nights yet, so the start is chosen on it untested"
        else:
            rho = "" if self.rank_correlation is None else f", night-hour rank correlation {self.rank_correlation:.2f}"
            mape = "" if self.mape_pct is None else f", MAPE {self.mape_pct:.1f} %"
            record = (f"over the last {self.nights} nights it captured {self.start_gain_share:.0%} of the perfect-foresight "
                      f"start gain{rho}{mape}")
        return f"{used}: {record}."

    def as_dict(self) -> dict[str, object]:
        return {"label": self.label, "nights": self.nights, "start_gain_share": self.start_gain_share,
                "rank_correlation": self.rank_correlation, "mape_pct": self.mape_pct,
                "bias_g_per_kwh": self.bias_g_per_kwh, "weights": self.weights, "sentence": self.sentence()}


def night_scores(nights: Sequence[Night], window: StartWindow) -> tuple[float | None, float | None, float | None]:
    """(mean night-hour rank correlation, MAPE %, mean bias g/kWh) over the window's hours of ``nights``."""
    rhos, ape, err = [], [], []
    for night in nights:
        f = np.asarray(night.forecast, dtype=float)[1: window.end]  # lead 0 is observed, not forecast
        y = np.asarray(night.observed, dtype=float)[1: window.end]
        m = min(len(f), len(y))
        f, y = f[:m], y[:m]
        ok = ~(np.isnan(f) | np.isnan(y))
        rho = rank_correlation(f, y)
        if rho is not None:
            rhos.append(rho)
        err += list(f[ok] - y[ok])
        pos = ok & (y > 0)  # a zero-carbon hour has no percentage error
        ape += list(np.abs(f[pos] - y[pos]) / y[pos])
    mean = (lambda xs: float(np.mean(xs)) if len(xs) else None)
    mape = mean(ape)
    return mean(rhos), None if mape is None else 100.0 * mape, mean(err)
