"""The unequal-batch gradient-noise-scale estimator recovers known S = tr(Sigma) and |G|^2."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dynamix_hvd.stats import NoiseScaleEstimator, Trend, gns_step_estimates, statistical_efficiency


def simulate(batch_sizes, steps=3000, dim=20, seed=0):
    rng = np.random.default_rng(seed)
    true_g = rng.normal(size=dim) * 0.3
    scales = rng.uniform(0.5, 2.0, size=dim)           # per-coordinate noise std
    S_true, G2_true = float((scales ** 2).sum()), float(true_g @ true_g)
    B = sum(batch_sizes)
    s_hat, g_hat = [], []
    for _ in range(steps):
        local = [true_g + rng.normal(size=dim) * scales / math.sqrt(b) for b in batch_sizes]  # mean of b samples
        G = sum(b * g for b, g in zip(batch_sizes, local)) / B
        A = sum((b / B) * float(g @ g) for b, g in zip(batch_sizes, local))
        s, g2 = gns_step_estimates(A, float(G @ G), B, len(batch_sizes))
        s_hat.append(s)
        g_hat.append(g2)
    return S_true, G2_true, float(np.mean(s_hat)), float(np.mean(g_hat))


@pytest.mark.parametrize("sizes", [(8, 8, 8, 8), (2, 5, 17, 40), (1, 64), (3, 3, 9, 30, 30, 1, 7, 12)])
def test_unbiased_for_unequal_batches(sizes):
    S, G2, s_hat, g_hat = simulate(sizes)
    assert s_hat == pytest.approx(S, rel=0.08)
    assert g_hat == pytest.approx(G2, rel=0.15, abs=0.05)


def test_naive_mean_of_local_norms_would_be_biased():
    # sanity check that the test above can fail: ignoring the b_i weights biases S
    sizes = (2, 5, 17, 40)
    rng = np.random.default_rng(1)
    dim = 10
    scales = np.ones(dim)
    B = sum(sizes)
    est = []
    for _ in range(2000):
        local = [rng.normal(size=dim) * scales / math.sqrt(b) for b in sizes]
        G = sum(b * g for b, g in zip(sizes, local)) / B
        A_naive = float(np.mean([g @ g for g in local]))
        est.append(gns_step_estimates(A_naive, float(G @ G), B, len(sizes))[0])
    assert abs(np.mean(est) - dim) / dim > 0.5


def test_single_rank_gives_nan():
    s, g2 = gns_step_estimates(1.0, 1.0, 32, 1)
    assert math.isnan(s) and math.isnan(g2)


def test_estimator_ema_and_state_roundtrip():
    est = NoiseScaleEstimator(beta=0.5)
    assert math.isnan(est.noise_scale)
    est.update(100.0, 2.0)
    est.update(200.0, 2.0)
    assert est.noise_scale == pytest.approx(75.0)
    other = NoiseScaleEstimator()
    other.load_state_dict(est.state_dict())
    assert other.noise_scale == est.noise_scale
    est.update(float("nan"), 1.0)
    assert est.updates == 2


def test_trend_sign():
    t = Trend(beta=0.0)
    t.update(10.0)
    assert t.update(5.0) == pytest.approx(-0.5)
    assert t.update(10.0) == pytest.approx(1.0)


def test_statistical_efficiency():
    assert statistical_efficiency(32, 32, 100.0) == pytest.approx(1.0)
    assert statistical_efficiency(256, 32, 100.0) < 1.0
    assert statistical_efficiency(256, 32, float("nan")) == 1.0
