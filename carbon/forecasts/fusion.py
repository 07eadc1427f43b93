"""Fuse several forecasts of the same signal into one, learning from their recent record. Pure numpy.

Every array is over *leads* ``0 .. L-1`` from one origin (lead 0 is now, whose value is observed).
The inputs are the provider's forecasts (as issued), the built-in history forecast
(:func:`carbon.forecasts.builtin.daily_profile`) and the latest observation, which enters through each
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
    """bias[k], carry[k] minimising sum (e_k - bias - carry e_0)^2 with carry in [0, 1], every lead at once."""
    ok = ~np.isnan(err)
    ok[:, 0] = False  # lead 0 is observed: nothing to correct
    e = np.where(ok, err, 0.0)
    x = np.where(ok, np.nan_to_num(err[:, :1]), 0.0)  # an input silent about now carries nothing
    count = ok.sum(axis=0)
    fitted = count >= max(min_pairs, 1)
    c = np.maximum(count, 1)
    mx, me = x.sum(axis=0) / c, e.sum(axis=0) / c
    xc = np.where(ok, x - mx, 0.0)
    var = (xc * xc).sum(axis=0)
    cov = (xc * np.where(ok, e - me, 0.0)).sum(axis=0)
    carry = np.where(fitted & (var > 0), np.clip(cov / np.where(var > 0, var, 1.0), 0.0, 1.0), 0.0)
    bias = np.where(fitted, me - carry * mx, 0.0)  # one variable left, the profile's optimum is exact
    return bias, carry


def _simplex_min(S: np.ndarray) -> np.ndarray:
    """Per lead: argmin w' S w over w >= 0, sum w = 1 (S: leads x k x k, symmetric PSD), by its best support's closed form."""
    n_leads, k, _ = S.shape
    best_w = np.full((n_leads, k), 1.0 / k)
    best_v = np.full(n_leads, np.inf)
    for size in range(1, k + 1):
        for sup in combinations(range(k), size):
            idx = list(sup)
            sub = S[:, idx][:, :, idx]
            ridge = 1e-12 * np.trace(sub, axis1=1, axis2=2)[:, None, None] * np.eye(size) + 1e-300 * np.eye(size)
            z = np.linalg.solve(sub + ridge, np.ones((n_leads, size, 1)))[:, :, 0]
            total = z.sum(axis=1)
            good = (total > 0) & (z >= -1e-12).all(axis=1)
            w = np.zeros((n_leads, k))
            w[:, idx] = np.maximum(z, 0.0) / np.where(total > 0, total, 1.0)[:, None]
            v = np.einsum("li,lij,lj->l", w, S, w)
            better = good & (v < best_v)
            best_w[better], best_v[better] = w[better], v[better]
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
    ok = ~np.isnan(R).any(axis=0)  # origins x leads where every input said something and it was seen
    pairs = ok.sum(axis=0)
    X = np.where(ok[None], R, 0.0)
    S = np.einsum("ior,jor->rij", X, X) / np.maximum(pairs, 1)[:, None, None]
    fitted = pairs >= min_pairs
    fitted[0] = False
    if fitted.any():
        weights[:, fitted] = _simplex_min(S[fitted]).T
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
