"""bnstats.combine_stats: the global batch's mean and (biased) variance from the ranks' own."""
from __future__ import annotations

import numpy as np
import pytest

from dynamix_hvd.bnstats import combine_stats


def test_combined_statistics_equal_those_of_the_union():
    rng = np.random.default_rng(0)
    parts = [rng.normal(loc=3 * i, scale=1 + i, size=(n, 4)) for i, n in enumerate((2, 5, 17, 40))]
    means = np.stack([p.mean(0) for p in parts])
    var = np.stack([p.var(0) for p in parts])
    mean, v = combine_stats(means, var, [len(p) for p in parts])
    union = np.concatenate(parts)
    np.testing.assert_allclose(mean, union.mean(0), rtol=1e-12)
    np.testing.assert_allclose(v, union.var(0), rtol=1e-12)
    # without the between-rank term the variance would be far too small here
    within = (np.asarray([len(p) for p in parts]) / len(union)) @ var
    assert np.all(v > 1.1 * within)


def test_equal_weights_are_the_plain_average():
    means = np.array([[1.0, 2.0], [3.0, 6.0]])
    var = np.array([[1.0, 1.0], [1.0, 1.0]])
    mean, v = combine_stats(means, var, [8, 8])
    np.testing.assert_allclose(mean, [2.0, 4.0])
    np.testing.assert_allclose(v, [2.0, 5.0])


@pytest.mark.parametrize("w", [[0, 0], [1, -1], [1.0, float("nan")], [1, 2, 3]])
def test_bad_weights_are_refused(w):
    with pytest.raises(ValueError, match="weights"):
        combine_stats(np.zeros((2, 3)), np.ones((2, 3)), w)
