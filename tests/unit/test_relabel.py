"""The permutation test of issue 24's figure (emulate/relabel.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dynamix_hvd.emulate.relabel import figure, relabel_test

POOL = ("proportional", "proportional#twin")


def _runs(ppo_scale: float, seed: int = 0, n_rep: int = 3, n_t: int = 4, noise: float = 0.05):
    rng = np.random.default_rng(seed)
    base = np.linspace(10, 40, n_t)
    draw = lambda s: [[float(t) for t in base * s * np.exp(rng.normal(0, noise, n_t))] for _ in range(n_rep)]
    return {"static": draw(2.0), "proportional": draw(1.0), "proportional#twin": draw(1.0), "ppo": draw(ppo_scale)}


def test_figure_is_the_worst_ratio_to_the_better_baseline_median():
    runs = {"static": [[10.0, 20.0]] * 3, "proportional": [[12.0, 16.0]] * 3, "ppo": [[11.0, 18.0]] * 3}
    assert figure(runs, "ppo") == pytest.approx(18 / 16)           # 11/10 and 18/16
    assert figure(runs, "ppo", paired=True) == pytest.approx(18 / 16)
    runs["ppo"] = [[None, 18.0]] * 3                               # a target not reached by most: left out
    assert figure(runs, "ppo") == pytest.approx(18 / 16)


def test_a_slower_controller_is_told_apart_and_a_twin_is_not():
    slow = relabel_test(_runs(1.3), "ppo", POOL)
    assert slow["perms"] == 6 ** 3 and slow["observed"] > 1.2
    assert slow["p"] > 0.05                                        # a median of 3 needs only 2 slow runs
    assert slow["p_mean"] <= 8 / 216 + 1e-9                       # slowest in every repeat: among the most extreme
    assert slow["mean_log"] == pytest.approx(math.log(1.3), abs=0.06)
    same = [relabel_test(_runs(1.0, seed=s), "ppo", POOL)["p_mean"] for s in range(40)]
    assert 0.25 < float(np.mean(same)) < 0.75                      # under the null p is about uniform
    assert np.mean(np.asarray(same) < 0.05) < 0.2


def test_null_pass_is_how_often_an_identical_controller_meets_the_criterion():
    quiet = relabel_test(_runs(1.0, noise=0.002), "ppo", POOL)
    noisy = relabel_test(_runs(1.0, noise=0.15), "ppo", POOL)
    assert quiet["null_pass"] == 1.0 and noisy["null_pass"] < 0.5


def test_many_repeats_are_sampled_with_the_observed_labelling_first():
    r = relabel_test(_runs(1.0, n_rep=7), "ppo", POOL, max_perms=500)
    assert r["perms"] == 500 and r["observed"] == pytest.approx(figure(_runs(1.0, n_rep=7), "ppo"))
    with pytest.raises(ValueError, match="no runs"):
        relabel_test({"static": [], "proportional": [], "proportional#twin": [], "ppo": []}, "ppo", POOL)
    assert math.isnan(figure({"ppo": [[None]], "static": [[None]]}, "ppo"))


def test_more_repeats_let_an_identical_controller_meet_the_criterion_more_often():
    from dynamix_hvd.emulate.relabel import null_pass_by_repeats

    runs = _runs(1.0, noise=0.04, n_rep=5, n_t=8)
    share = null_pass_by_repeats(runs, "ppo", POOL, (3, 40), draws=300)
    assert share[3] < 0.3 and share[40] > 0.7
    slower = null_pass_by_repeats(_runs(1.0, noise=0.0), "ppo", POOL, (3,), criterion=0.99, draws=50)
    assert slower[3] == 0.0                                        # identical runs: exactly 1.00x > 0.99


def test_a_lucky_proportional_does_not_make_a_twin_look_slow():
    """The geomean test compares X with the pool (proportional and its twin), not with proportional
    alone: when proportional's runs are the fastest in every repeat, a twin-like X is not flagged."""
    runs = _runs(1.0, noise=0.0)
    runs["proportional"] = [[t * 0.9 for t in row] for row in runs["proportional"]]   # lucky every time
    r = relabel_test(runs, "ppo", POOL)
    assert r["mean_log"] == pytest.approx(0.5 * -math.log(0.9)) and r["p_mean"] > 0.2
