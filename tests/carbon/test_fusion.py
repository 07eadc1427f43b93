"""Fusion and skill: pure, fitted on the record only, never worse in-sample than the best input."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from carbon.forecasts.fusion import IN_SAMPLE_TOLERANCE, Hindcast, apply_fusion, corrected_inputs, fit_fusion
from carbon.forecasts.skill import ForecastSkill, Night, StartWindow, rank_correlation, start_gain, start_gain_share

L = 8
finite = st.floats(min_value=0.0, max_value=1000.0, allow_nan=False)


def _mse(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    return np.mean((pred - truth) ** 2, axis=0)


@settings(max_examples=30, deadline=None)
@given(origins=st.integers(min_value=7, max_value=20), data=st.data())
def test_fusion_is_never_worse_in_sample_than_its_best_input(origins: int, data: st.DataObject) -> None:
    shape = (origins, L)
    truth = data.draw(arrays(float, shape, elements=finite))
    a = data.draw(arrays(float, shape, elements=finite))
    b = data.draw(arrays(float, shape, elements=finite))
    hind = [Hindcast(inputs={"a": a[r], "b": b[r]}, observed=truth[r]) for r in range(origins)]
    fit = fit_fusion(hind, ("a", "b"), L)
    fused = np.array([apply_fusion(fit, h.inputs, float(h.observed[0])) for h in hind])
    best = np.minimum(_mse(a, truth), _mse(b, truth))
    # apply_fusion clips at 0 g/kWh, which only moves a value towards the (non-negative) truth
    assert (_mse(fused, truth)[1:] <= best[1:] * (1 + IN_SAMPLE_TOLERANCE) + 1e-6).all()


def test_a_steady_bias_and_a_lasting_error_are_learned() -> None:
    rng = np.random.default_rng(1)
    hind = []
    for _ in range(28):
        y = 300 + 50 * rng.standard_normal(L)
        miss = 40 * rng.standard_normal()  # the input's error now, and it lasts all night
        said = y + 20 + miss
        said[0] -= 20  # the steady bias is ahead only; now it is just the lasting miss
        hind.append(Hindcast(inputs={"p": said}, observed=y))
    fit = fit_fusion(hind, ("p",), L)
    assert np.allclose(fit.bias[0, 1:], 20, atol=1e-6) and np.allclose(fit.carry[0, 1:], 1, atol=1e-6)
    y = np.full(L, 250.0)
    said = y + 20 + 30
    said[0] -= 20
    got = corrected_inputs(fit, {"p": said}, observed_now=250.0)
    assert np.allclose(got[0, 1:], 250.0)


def test_without_a_record_inputs_are_equal_and_uncorrected() -> None:
    fit = fit_fusion([], ("a", "b"), L)
    out = apply_fusion(fit, {"a": np.full(L, 100.0), "b": np.full(L, 300.0)}, observed_now=150.0)
    assert out[0] == 150.0 and np.allclose(out[1:], 200.0)
    silent = apply_fusion(fit, {"a": np.full(L, np.nan), "b": np.full(L, 300.0)}, observed_now=150.0)
    assert np.allclose(silent[1:], 300.0)  # an input that says nothing gives its weight away


def test_start_gain_share_scores_the_start_choice_not_the_level() -> None:
    window = StartWindow(reference=0, starts=(0, 1, 2, 3), length=2)
    y = np.array([400.0, 400, 300, 100, 100, 400])
    assert start_gain(Night(forecast=y * 2 + 50, observed=y), window) == (300.0, 300.0)  # wrong level, right order
    wrong = Night(forecast=np.array([500.0, 500, 100, 100, 500, 500]), observed=np.array([200.0, 200, 400, 400, 100, 100]))
    assert start_gain(wrong, StartWindow(reference=0, starts=(0, 1, 2, 3, 4), length=2)) == (-200.0, 100.0)
    flat = Night(forecast=np.full(6, 200.0), observed=y)
    assert start_gain(flat, window) == (0.0, 300.0)  # sees no gain, keeps the cron start
    share, n = start_gain_share([Night(forecast=y, observed=y), flat], window)
    assert n == 2 and share == 0.5
    assert rank_correlation(y[:4], np.array([4.0, 3, 2, 1])) is not None
    assert rank_correlation(np.ones(4), y[:4]) is None


def test_the_sentence_names_the_forecast_and_its_record() -> None:
    s = ForecastSkill(label="fused", nights=28, start_gain_share=0.91, rank_correlation=0.74, mape_pct=8.1,
                      bias_g_per_kwh=-2.0, weights={"dacf.csv": 0.8, "history": 0.2})
    text = s.sentence()
    assert text.startswith("fused forecast (dacf.csv 80 %, history 20 %".replace(" %", "%"))
    assert "28 nights" in text and "91%" in text and "rank correlation 0.74" in text
    assert s.as_dict()["sentence"] == text
