"""The documented reward: each term moves the right way."""
from __future__ import annotations

import pytest

from dynamix_hvd.agent.reward import RewardWeights, reward_terms
from dynamix_hvd.perfmodel import efficiency


def _terms(**kw):
    base = dict(goodput=100.0, reference_goodput=100.0, compute_s=[1.0, 1.0], step_s=1.2, sizes=[32, 32],
                prev_sizes=[32, 32], noise_scale=1000.0, grad_var_trend=0.0, val_loss_trend=-0.01)
    base.update(kw)
    return reward_terms(**base)


def test_balanced_oracle_interval_scores_one():
    t = _terms()
    assert t["efficiency"] == pytest.approx(1.0) and t["reward"] == pytest.approx(1.0)


def test_idle_straggler_is_penalised():
    assert _terms(compute_s=[1.0, 0.25])["idle"] < 0
    assert _terms(compute_s=[1.0, 0.25])["reward"] < _terms()["reward"]


def test_churn_and_instability_penalised():
    t = _terms(sizes=[16, 48])
    assert t["churn"] < 0 and t["instability"] == 0.0
    t2 = _terms(sizes=[64, 64])
    assert t2["instability"] < 0


def test_generalisation_penalises_batch_far_above_noise_scale():
    w = RewardWeights()
    assert _terms(noise_scale=1000.0)["generalisation"] == 0.0
    assert _terms(noise_scale=64 / (4 * w.gen_ratio))["generalisation"] == pytest.approx(-2 * w.gen)
    assert _terms(val_loss_trend=0.05)["generalisation"] < 0


def test_weights_scale_terms():
    t = reward_terms(goodput=50, reference_goodput=100, compute_s=[1, 0.5], step_s=1, sizes=[1, 1],
                     prev_sizes=[1, 1], noise_scale=float("nan"), weights=RewardWeights(eff=2.0, idle=0.0))
    assert t["efficiency"] == pytest.approx(1.0) and t["idle"] == 0.0


def test_statistical_efficiency():
    assert efficiency(100, 100, float("nan")) == 1.0
    assert efficiency(100, 100, 50) == pytest.approx(1.0)
    assert efficiency(200, 100, 100) == pytest.approx(200 / 300)
