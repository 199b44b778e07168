"""Is a controller measurably worse than another, or inside the bench's noise? (issue 24)

Issue 24's figure for a controller X is the largest ratio, over targets 0.80-0.95 of the plateau,
of X's median time to target to the better of static's and proportional's medians. Two draws of
one controller (proportional and its A/A twin, ``proportional#twin``) already miss 1.03x on some
scenarios with 3 repeats: the median of a few runs, the smaller of two such medians, and the
largest of 16 ratios are all noisy and biased upward.

This module measures that noise on the runs themselves with an exact **permutation test**. If X
behaves like proportional, then within one repeat (same seed, same cluster) the runs of X,
proportional and the twin are exchangeable: any relabelling of them is as likely as the one
observed. Recomputing the figure under every relabelling (3! per repeat, all combinations;
a random sample of them when that is more than ``max_perms``) gives its distribution under "X
is proportional":

* ``p``: the share of relabellings whose figure is at least the observed one. A small ``p``
  (e.g. < 0.05) means X is worse than proportional beyond the bench's noise; a large one means the
  bench cannot tell them apart.
* ``p_mean``: the same with a statistic that has more power, the mean over repeats and targets
  of log(X's time / the geometric mean of the pool's times in the same repeat): is X slower than
  proportional-like runs, whichever of proportional and its twin was lucky (against the better of
  static and proportional alone, proportional's luck in every repeat reads as X being slow). With 3 repeats the figure
  cannot reach p < 0.05 even for a controller slower in every run (a median of 3 needs only 2
  of them: 14 of the 216 relabellings are as extreme); this one reaches 0.037 or less.
* ``null_pass``: the share of relabellings whose figure is <= the criterion (1.03x): how often a
  controller *identical to proportional* would meet the criterion with these runs. The
  criterion's resolution, measured.

Pure: over ``targets_table``'s per-run times.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, Sequence

import numpy as np

from dynamix_hvd.emulate.targets import BASELINES, baseline_times, median_or_none, paired_ratios


def figure_ratios(runs: Mapping[str, Sequence[Sequence[float | None]]], name: str,
                  baselines: Sequence[str] = BASELINES, paired: bool = False) -> list[float | None]:
    """Per target, from per-run times (``runs[c][repeat][target]``): ``name``'s median time over the
    better of the baselines' medians (``paired``: the median over repeats of the ratio to the
    better baseline of the same repeat, ``targets.paired_ratios``); None where that is undefined."""
    n_t = len(runs[name][0]) if runs[name] else 0
    tab = {"targets": [0.0] * n_t,
           "controllers": {c: {"runs": runs[c], "time_to_target_s": [median_or_none(r[j] for r in runs[c])
                                                                      for j in range(n_t)]}
                           for c in (name, *baselines) if c in runs}}
    if paired:
        return paired_ratios(tab, name, baselines)
    base = baseline_times(tab, baselines)
    mine = tab["controllers"][name]["time_to_target_s"]
    return [x / b if x is not None and b else None for x, b in zip(mine, base)]


def figure(runs: Mapping[str, Sequence[Sequence[float | None]]], name: str,
           baselines: Sequence[str] = BASELINES, paired: bool = False) -> float:
    """Issue 24's figure for ``name``: the largest of ``figure_ratios`` (NaN when none is defined)."""
    ratios = [r for r in figure_ratios(runs, name, baselines, paired) if r is not None]
    return max(ratios) if ratios else math.nan


def mean_log_ratio(runs: Mapping[str, Sequence[Sequence[float | None]]], name: str,
                   others: Sequence[str]) -> float:
    """Mean over repeats and targets of log(``name``'s time / the geometric mean of the ``others``'
    times in the same repeat), over the (repeat, target) pairs where all reached; NaN without any.
    With ``others`` = proportional and its twin: is ``name`` slower than proportional-like runs,
    whichever of the two happened to be lucky."""
    logs = []
    for r, row in enumerate(runs[name]):
        for j, x in enumerate(row):
            ref = [runs[c][r][j] for c in others if c in runs and r < len(runs[c])]
            if x is not None and x > 0 and ref and all(v is not None and v > 0 for v in ref):
                logs.append(math.log(x) - float(np.mean([math.log(v) for v in ref])))  # type: ignore[arg-type]
    return float(np.mean(logs)) if logs else math.nan


def relabel_test(runs: Mapping[str, Sequence[Sequence[float | None]]], name: str, pool: Sequence[str],
                 baselines: Sequence[str] = BASELINES, paired: bool = False, criterion: float = 1.03,
                 max_perms: int = 20_000, seed: int = 0) -> dict[str, Any]:
    """Permutation test of "``name`` behaves like the controllers in ``pool``" (e.g. ``ppo`` against
    ``proportional`` and ``proportional#twin``): labels are exchanged among ``name`` and ``pool``
    within each repeat, the other controllers (static) keep theirs. Returns ``observed`` (the
    figure), ``p``, ``null_pass``, ``null_median``, ``mean_log`` (observed), ``p_mean`` and ``perms``
    (how many relabellings)."""
    labels = [name, *[c for c in pool if c != name]]
    n_rep = min(len(runs[c]) for c in labels)
    if n_rep == 0:
        raise ValueError(f"relabel_test: no runs for one of {labels}")
    fixed = {c: list(v)[:n_rep] for c, v in runs.items() if c not in labels}
    orders = list(itertools.permutations(range(len(labels))))
    total = len(orders) ** n_rep
    if total <= max_perms:
        perms = itertools.product(orders, repeat=n_rep)
    else:                                   # a random sample, the observed labelling first
        rng = np.random.default_rng(seed)
        ident = tuple(range(len(labels)))
        perms = itertools.chain([(ident,) * n_rep],
                                (tuple(orders[i] for i in rng.integers(len(orders), size=n_rep))
                                 for _ in range(max_perms - 1)))
    stats, means = [], []
    for perm in perms:                      # perm[r][i]: whose run of repeat r plays label i
        relab = dict(fixed)
        for i, lab in enumerate(labels):
            relab[lab] = [runs[labels[perm[r][i]]][r] for r in range(n_rep)]
        stats.append(figure(relab, name, baselines, paired))
        means.append(mean_log_ratio(relab, name, labels[1:]))
    s, m = np.asarray(stats, dtype=float), np.asarray(means, dtype=float)
    mok = m[np.isfinite(m)]
    observed = float(s[0])
    ok = s[np.isfinite(s)]
    return {"observed": observed, "perms": int(s.size),
            "p": float(np.mean(ok >= observed - 1e-12)) if ok.size and math.isfinite(observed) else math.nan,
            "null_pass": float(np.mean(ok <= criterion)) if ok.size else math.nan,
            "null_median": float(np.median(ok)) if ok.size else math.nan,
            "mean_log": float(m[0]),
            "p_mean": float(np.mean(mok >= m[0] - 1e-12)) if mok.size and math.isfinite(m[0]) else math.nan}


def null_pass_by_repeats(runs: Mapping[str, Sequence[Sequence[float | None]]], name: str, pool: Sequence[str],
                         repeats: Sequence[int], baselines: Sequence[str] = BASELINES, paired: bool = False,
                         criterion: float = 1.03, draws: int = 2_000, seed: int = 0) -> dict[int, float]:
    """How often a controller identical to the ``pool``'s would meet ``criterion`` with more repeats:
    a bootstrap over the measured repeats (each drawn repeat keeps its static run, and its runs of
    ``name`` and the ``pool`` are relabelled at random, as in ``relabel_test``). ``{n: share of
    draws of n repeats whose figure is <= criterion}``. With few measured repeats the bootstrap
    reuses them, so it is an estimate of how the criterion's resolution grows, not a promise."""
    labels = [name, *[c for c in pool if c != name]]
    n_have = min(len(runs[c]) for c in (*labels, *[b for b in baselines if b in runs]))
    if n_have == 0:
        raise ValueError(f"null_pass_by_repeats: no runs for one of {labels}")
    rng = np.random.default_rng(seed)
    out = {}
    for n in repeats:
        ok = 0
        for _ in range(draws):
            reps = rng.integers(n_have, size=n)
            relab = {c: [runs[c][r] for r in reps] for c in runs if c not in labels}
            order = np.argsort(rng.random((n, len(labels))), axis=1)
            for i, lab in enumerate(labels):
                relab[lab] = [runs[labels[order[k, i]]][r] for k, r in enumerate(reps)]
            ok += figure(relab, name, baselines, paired) <= criterion
        out[int(n)] = ok / draws
    return out
