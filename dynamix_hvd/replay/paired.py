"""Paired comparison of two controllers' times to target over the same seeds (pure).

A replay cell's times spread widely across seeds where stragglers come and go (YOLOv3 with the CoV
trace at N = 8: goodput from 5,677 to 11,271 s over 20 seeds), so the ratio of two medians over 20
seeds moves by several percent with the draw (1.103 over seeds 5-24, 1.024 over seeds 25-44, session
47). ``ratio_interval`` says how far: seeds are resampled as pairs (a seed is one world for both
controllers). ``geomean_interval`` does the same for the geometric mean of that ratio over cells (an
ablation against the full policy, session 54). Used by ``dynamix replay``, ``dynamix eval-replay`` and
``benchmarks/compare_eval_caches.py``.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

INTERVAL = 0.90          # the bootstrap interval's coverage
RESAMPLES = 2000
NOT_ABOVE = 1.03         # the bound on any cell's ratio to goodput


def _times(xs: Sequence[float | None]) -> np.ndarray:
    return np.array([math.inf if x is None else float(x) for x in xs])


def _resampled_ratios(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """median(a) / median(b) over ``resamples`` draws of the seeds with replacement, as pairs (the
    same indices for both); both infinite on a draw (both missed) counts as a tie, 1."""
    idx = rng.integers(0, a.size, size=(int(resamples), a.size))
    with np.errstate(invalid="ignore"):
        r = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    return np.where(np.isnan(r), 1.0, r)


def ratio_interval(policy: Sequence[float | None], goodput: Sequence[float | None], level: float = INTERVAL,
                   resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """The paired bootstrap interval of median(policy) / median(goodput) over seeds: the seeds
    (pairs: a seed is one world for both) resampled with replacement ``resamples`` times, the
    central ``level`` share of the ratios. A miss (None) counts as infinitely slow; both missing
    on a resample counts as a tie (1). Pure: a fixed ``seed`` gives the same interval."""
    a, b = _times(policy), _times(goodput)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"ratio_interval: {a.size} policy and {b.size} goodput times (one per seed, same seeds)")
    if not 0.0 < level < 1.0:
        raise ValueError(f"ratio_interval: level={level!r} must be in (0, 1)")
    r = _resampled_ratios(a, b, np.random.default_rng(seed), resamples)
    lo, hi = np.quantile(r, [(1.0 - level) / 2.0, (1.0 + level) / 2.0], method="nearest")   # (inf - inf: no interpolation)
    return float(lo), float(hi)


def geomean_interval(cells: Sequence[tuple[Sequence[float | None], Sequence[float | None]]], level: float = INTERVAL,
                     resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """The paired bootstrap interval of the geometric mean over cells of median(A) / median(B): each
    cell is a pair (A's times, B's times), one per seed, the same seeds; every resample draws each
    cell's seeds with replacement (as pairs, as ``ratio_interval``) and takes the geometric mean of
    the cells' ratios; the central ``level`` share of those means. A miss counts as infinitely slow.
    Pure: a fixed ``seed`` gives the same interval."""
    if not cells:
        raise ValueError("geomean_interval: no cells")
    if not 0.0 < level < 1.0:
        raise ValueError(f"geomean_interval: level={level!r} must be in (0, 1)")
    rng = np.random.default_rng(seed)
    logs = np.zeros(int(resamples))
    for i, (pa, pb) in enumerate(cells):
        a, b = _times(pa), _times(pb)
        if a.shape != b.shape or a.size == 0:
            raise ValueError(f"geomean_interval: cell {i} has {a.size} and {b.size} times (one per seed, same seeds)")
        with np.errstate(divide="ignore"):
            logs += np.log(_resampled_ratios(a, b, rng, resamples))
    lo, hi = np.quantile(np.exp(logs / len(cells)), [(1.0 - level) / 2.0, (1.0 + level) / 2.0], method="nearest")
    return float(lo), float(hi)
