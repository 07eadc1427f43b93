"""Fuse several forecasts of the same signal into one, learning from their recent record. Pure numpy.

Every array is over *leads* ``0 .. L-1`` from one origin (lead 0 is now, whose value is observed).
The inputs are the provider's forecasts (as issued), the built-in history forecast
(:func:`carbon.forecast.daily_profile`) and the latest observation, which enters through each
input's error at lead 0. Fitted on :class:`Hindcast` s, what the inputs said at past origins and
what was then observed (the archive's join, or the simulator's causal replay):

1. **Correct each input, per lead.** Its error at lead k, ``e_k = x_k - y_k``, is regressed on its
   error now, ``e_0 = x_0 - y_0`` (known at decision time: the input's value for now against the
   observation): ``e_k ~ bias_k + carry_k e_0``, carry in [0, 1], by least squares. A day-ahead
   forecast that ran 40 g high this evening probably runs high tonight too; how much of it lasts,
   and any steady bias, is measured per input and lead, not assumed. The corrected input is
   ``x_k - bias_k - carry_k e_0``.
2. **Weight the corrected inputs, per lead**, by the convex combination with the least mean square
   error over the same hindcasts (the minimum of ``w' S w`` on the simplex, S the inputs' error
   second moments; exact, by enumerating supports). One-hot weights are on the simplex and zero
   corrections are feasible, so **in-sample the fused forecast is never worse than its best input
   at any lead** (up to rounding, :data:`IN_SAMPLE_TOLERANCE`).

A lead with fewer than ``min_pairs`` hindcasts keeps its inputs uncorrected and equally weighted
(no record, no opinion). Nothing here reads the clock or the archive: callers pass the record in.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Mapping, Sequence

import numpy as np

__all__ = ["IN_SAMPLE_TOLERANCE", "FusionFit", "Hindcast", "apply_fusion", "corrected_inputs", "fit_fusion"]

#: relative slack of the in-sample guarantee (float rounding of the simplex solve)
IN_SAMPLE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Hindcast:
    """One past origin: what each input said for leads 0..L-1, and what was observed (NaN: not forecast / not yet seen)."""

    inputs: Mapping[str, np.ndarray]
    observed: np.ndarray


@dataclass(frozen=True)
class FusionFit:
    """Per input (rows, in ``names`` order) and lead (columns): bias, carry of the error now, and weight."""

    names: tuple[str, ...]
    bias: np.ndarray
    carry: np.ndarray
    weights: np.ndarray
    pairs: np.ndarray  # hindcasts behind each lead's weights


def _errors(hindcasts: Sequence[Hindcast], name: str, n_leads: int) -> np.ndarray:
    """(origins x leads) errors of one input; NaN where it said nothing or nothing was observed yet."""
    out = np.full((len(hindcasts), n_leads), np.nan)
    for r, h in enumerate(hindcasts):
        x = np.asarray(h.inputs[name], dtype=float)[:n_leads]
        y = np.asarray(h.observed, dtype=float)[:n_leads]
        m = min(len(x), len(y))
        out[r, :m] = x[:m] - y[:m]
    return out


def _fit_correction(err: np.ndarray, min_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """bias[k], carry[k] minimising sum (e_k - bias - carry e_0)^2 with carry in [0, 1]."""
    n_leads = err.shape[1]
    bias = np.zeros(n_leads)
    carry = np.zeros(n_leads)
    e0 = np.nan_to_num(err[:, 0])  # an input silent about now carries nothing
    for k in range(1, n_leads):
        ok = ~np.isnan(err[:, k])
        if ok.sum() < min_pairs:
            continue
        ek, x = err[ok, k], e0[ok]
        xc = x - x.mean()
        den = float(xc @ xc)
        a = float(np.clip(xc @ (ek - ek.mean()) / den, 0.0, 1.0)) if den > 0 else 0.0
        carry[k] = a
        bias[k] = float(np.mean(ek - a * x))  # one variable left, the profile's optimum is exact
    return bias, carry


def _simplex_min(S: np.ndarray) -> np.ndarray:
    """argmin w' S w over w >= 0, sum w = 1 (S symmetric PSD, small): the best support's closed form."""
    k = len(S)
    best_w, best_v = np.full(k, 1.0 / k), np.inf
    for size in range(1, k + 1):
        for sup in combinations(range(k), size):
            sub = S[np.ix_(sup, sup)]
            try:
                z = np.linalg.solve(sub + 1e-12 * np.trace(sub) * np.eye(size), np.ones(size))
            except np.linalg.LinAlgError:
                continue
            if z.sum() <= 0 or (z < -1e-12).any():
                continue
            w = np.zeros(k)
            w[list(sup)] = np.maximum(z, 0.0) / z.sum()
            v = float(w @ S @ w)
            if v < best_v:
                best_w, best_v = w, v
    return best_w


def fit_fusion(hindcasts: Sequence[Hindcast], names: Sequence[str], n_leads: int, *, min_pairs: int = 7) -> FusionFit:
    """Corrections and weights per input and lead from ``hindcasts`` (see the module docstring)."""
    names = tuple(names)
    k = len(names)
    bias = np.zeros((k, n_leads))
    carry = np.zeros((k, n_leads))
    weights = np.full((k, n_leads), 1.0 / max(k, 1))
    pairs = np.zeros(n_leads, dtype=int)
    if not hindcasts or k == 0:
        return FusionFit(names, bias, carry, weights, pairs)
    errs = [_errors(hindcasts, n, n_leads) for n in names]
    resid = []
    for r, e in enumerate(errs):
        bias[r], carry[r] = _fit_correction(e, min_pairs)
        resid.append(e - bias[r][None, :] - carry[r][None, :] * np.nan_to_num(e[:, :1]))
    R = np.stack(resid)  # inputs x origins x leads
    for lead in range(1, n_leads):
        ok = ~np.isnan(R[:, :, lead]).any(axis=0)
        pairs[lead] = int(ok.sum())
        if pairs[lead] < min_pairs:
            continue
        X = R[:, ok, lead]
        weights[:, lead] = _simplex_min(X @ X.T / X.shape[1])
    weights[:, 0] = weights[:, 1] if n_leads > 1 else weights[:, 0]
    return FusionFit(names, bias, carry, weights, pairs)


def corrected_inputs(fit: FusionFit, inputs: Mapping[str, np.ndarray], observed_now: float) -> np.ndarray:
    """(inputs x leads) each input after its bias and carry correction; NaN where it said nothing."""
    n = max(len(v) for v in inputs.values())
    out = np.full((len(fit.names), n), np.nan)
    L = fit.bias.shape[1]
    for r, name in enumerate(fit.names):
        x = np.asarray(inputs[name], dtype=float)
        m = min(len(x), n)
        e0 = 0.0 if np.isnan(x[0]) else float(x[0] - observed_now)
        lead = np.minimum(np.arange(m), L - 1)  # beyond the fitted leads, the last fitted one's correction
        out[r, :m] = x[:m] - fit.bias[r, lead] - fit.carry[r, lead] * e0
    return out


def apply_fusion(fit: FusionFit, inputs: Mapping[str, np.ndarray], observed_now: float) -> np.ndarray:
    """The fused forecast at leads 0..n-1 (lead 0: the observation); an input silent at a lead gives its weight to the rest."""
    X = corrected_inputs(fit, inputs, observed_now)
    L = fit.weights.shape[1]
    lead = np.minimum(np.arange(X.shape[1]), L - 1)
    W = np.where(np.isnan(X), 0.0, fit.weights[:, lead])
    total = W.sum(axis=0)
    equal = np.where(np.isnan(X), 0.0, 1.0)  # every input with a say was weighted 0: share equally
    W = np.where(total > 0, W, equal)
    total = W.sum(axis=0)
    fused = np.where(total > 0, (W * np.nan_to_num(X)).sum(axis=0) / np.where(total > 0, total, 1.0), np.nan)
    fused[0] = observed_now
    return np.maximum(fused, 0.0)
