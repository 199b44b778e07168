"""benchmarks/departure_auc.py: its AUC and its classifier, on data with a known answer."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "departure_auc", Path(__file__).resolve().parents[2] / "benchmarks" / "departure_auc.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_auc_matches_the_pairwise_definition():
    rng = np.random.default_rng(0)
    s = np.round(rng.normal(size=60), 1)          # ties on purpose
    y = (rng.random(60) < 0.3).astype(int)
    pos, neg = s[y == 1], s[y == 0]
    pairs = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert bench.auc(s, y) == pytest.approx(pairs, abs=1e-12)
    assert bench.auc(np.arange(4.0), np.array([0, 0, 1, 1])) == 1.0
    assert bench.auc(np.arange(4.0), np.array([1, 1, 0, 0])) == 0.0
    assert math.isnan(bench.auc(np.arange(3.0), np.zeros(3, int)))


def test_classifier_finds_a_feature_that_decides_and_not_one_that_does_not():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 3))
    y = (X[:, 1] > 0.5).astype(int)
    for hidden in (0, 16):
        score = bench.fit_predict(X[:300], y[:300], X[300:], hidden)
        assert bench.auc(score, y[300:]) > 0.95
    noise = rng.normal(size=(400, 3))
    score = bench.fit_predict(noise[:300], y[:300], noise[300:], 0)
    assert abs(bench.auc(score, y[300:]) - 0.5) < 0.2



def test_departure_oracle_collects_aligned_states_and_true_ratios():
    """benchmarks/departure_oracle.py: one short expert roll-out gives one row of observation,
    oracle features and regrets per decision; the true ratios of B over itself are 1 (log 0)."""
    spec = importlib.util.spec_from_file_location(
        "departure_oracle", Path(__file__).resolve().parents[2] / "benchmarks" / "departure_oracle.py")
    orc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(orc)
    d = orc.collect(1, 0, 1)
    n = d["regret"].shape[0]
    assert n > 5 and d["obs"].shape[0] == d["oracle"].shape[0] == d["workload"].shape[0] == n
    assert d["oracle"].shape[1] == len(orc.FEATURES)
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    sim = build_sim(WorldSpec("cifar10", 4, "none", 3))
    sim.reset(3)
    sim.step([64.0] * 4)
    B = 256.0
    assert orc.true_log_eff(sim, B, (1.0,)) == pytest.approx([0.0], abs=1e-12)
    assert orc.true_log_rate(sim, B, (1.0,)) == pytest.approx([0.0], abs=1e-12)
    # the measured curves, unlike goodput's model, can reward a larger batch per sample: cifar10's
    # runs at 512 reach its first level in fewer samples than those at 256
    assert orc.true_log_eff(sim, B, (2.0,))[0] > 0.0
