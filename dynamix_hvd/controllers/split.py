"""Equal-time splits of a global batch (pure): every rank's predicted compute time
``alpha_i + beta_i * b_i`` equal, within per-rank bounds. Used by the proportional and goodput
controllers, the PPO anchor, the live reward and the simulator, beside the compute model
(model.py) whose fits they split by."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    from dynamix_hvd.plan import PlanBounds

# (evidence.Z_MIN and MIN_EXCESS: evidence imports the compute model, which imports this module, so
# they are restated here, and tests/unit/test_controllers.py holds them equal)
TIE_Z = 3.0              # predicted times differing by less than this many standard errors are tied
TIE_TOL_MAX = 0.10       # ... and by less than this share (a noisy interval does not tie unlike ranks)


def seed_runs(m: int, joins: Callable[[int, int, int], np.ndarray], bound: Sequence[int] | None = None) -> np.ndarray:
    """Group ids (0, 1, ...) of ``m`` items walked in order: an item joins the current group when it
    is close enough to the group's first item (its seed), else it seeds the next group, so every
    group is a run of consecutive items.

    ``joins(s, lo, hi)``: for items ``lo .. hi - 1`` (all after ``s``), whether each would join seed
    ``s`` (a bool array). ``bound[s]`` (optional): an item index from which no item can join ``s``
    (a superset of the candidates, so an item before it may still fail). A run is found with a few
    numpy calls, in windows growing fourfold, instead of one Python comparison per item: a decision at
    1024 ranks with ~15 groups spent ~3 ms per walk in Python (session 42). Pure."""
    group = np.empty(m, dtype=int)
    g = s = 0
    while s < m:
        stop = m if bound is None else min(m, int(bound[s]))
        end, width = s + 1, 4
        while end < stop:
            hi = min(stop, end + width)
            ok = np.asarray(joins(s, end, hi), dtype=bool)
            if not ok.all():
                end += int(np.argmin(ok))
                break
            end, width = hi, 4 * width
        group[s:end] = g
        g, s = g + 1, end
    return group


def tie_groups(preds: np.ndarray, rel_se: np.ndarray) -> np.ndarray:
    """Group ids (0, 1, ... from the smallest prediction) of the columns of ``preds`` that the
    measurements cannot tell apart.

    ``preds`` is (k, m): m predicted times (ranks), each at k points; ``rel_se`` (m,) their relative
    standard errors (<= 0 or NaN: unknown, tied to nothing). Walking the columns in order of the
    first row, a column joins the current group when every one of its k predictions is within
    ``TIE_Z`` combined standard errors of the group's first column (its seed) and within
    ``TIE_TOL_MAX`` of it; otherwise it seeds the next group (``seed_runs``). Comparing with the
    seed, not the previous column, keeps a chain of small steps from tying the ends. A column
    whose first prediction is more than ``TIE_TOL_MAX`` (or ``TIE_Z`` combined errors with the
    largest error) above the seed's cannot join it, which bounds each seed's candidates. Pure."""
    p = np.atleast_2d(np.asarray(preds, dtype=float))
    rel = np.asarray(rel_se, dtype=float).reshape(-1)
    m = p.shape[1]
    if rel.size != m:
        raise ValueError(f"tie_groups: {rel.size} standard errors for {m} predictions")
    order = np.argsort(p[0], kind="stable")
    q = p[:, order]
    with np.errstate(invalid="ignore"):
        rl = np.where(np.isfinite(rel) & (rel > 0), rel, 0.0)[order]
        widest = np.minimum(TIE_Z * np.hypot(rl, rl.max(initial=0.0)), TIE_TOL_MAX)
        bound = np.where(rl > 0, np.searchsorted(q[0], q[0] * (1.0 + widest) * (1.0 + 1e-9), side="right"),
                         np.arange(m) + 1) if (np.isfinite(q[0]).all() and (q[0] > 0).all()) else None

    def joins(s: int, lo: int, hi: int) -> np.ndarray:
        r = rl[lo:hi]
        if rl[s] <= 0:
            return np.zeros(hi - lo, dtype=bool)
        tol = np.minimum(TIE_Z * np.hypot(r, rl[s]), TIE_TOL_MAX)
        with np.errstate(divide="ignore", invalid="ignore"):
            close = (np.abs(q[:, lo:hi] / q[:, s:s + 1] - 1.0) <= tol).all(axis=0)
        return (r > 0) & (tol > 0) & close

    group = np.empty(m, dtype=int)
    group[order] = seed_runs(m, joins, bound)
    return group


def equal_time_split(alpha: np.ndarray, beta: np.ndarray, total: float, lo: float, hi: np.ndarray) -> np.ndarray:
    """Continuous split of ``total`` equalising alpha_i + beta_i b_i within [lo, hi_i].

    Every rank not at a bound finishes at the same time T, ranks at ``lo`` take longer and
    ranks at ``hi_i`` less (exact water filling, see ``equal_time_splits``). A total outside
    [N lo, sum hi] gives every rank its bound."""
    return equal_time_splits(alpha, beta, [total], lo, hi)[0]


def equal_time_splits(alpha: np.ndarray, beta: np.ndarray, totals: Sequence[float], lo: float,
                      hi: np.ndarray) -> np.ndarray:
    """``equal_time_split`` of several totals at once: an (len(totals), N) array.

    The split at finish time T is b_i(T) = clip((T - alpha_i) / beta_i, lo, hi_i), and its sum
    F(T) is piecewise linear and non-decreasing with breakpoints where a rank meets a bound. F is
    evaluated at the 2N breakpoints, each total is located between two of them and T
    interpolated: exact (a greedy clip-and-repeat left ranks floored that should have come back
    once other ranks hit their caps) and one pass for all totals (the goodput model scores ~11
    candidate global batches per decision)."""
    alpha = np.asarray(alpha, dtype=float)
    inv = 1.0 / np.asarray(beta, dtype=float)
    if inv.shape != alpha.shape or np.size(hi) not in (1, alpha.size):
        raise ValueError(f"equal_time_splits: alpha {alpha.shape}, beta {inv.shape} and hi {np.shape(hi)} "
                         "must have one entry per rank")
    hi = np.maximum(np.broadcast_to(np.asarray(hi, dtype=float), alpha.shape), lo)
    totals = np.asarray(totals, dtype=float).reshape(-1)
    bp = np.sort(np.concatenate([alpha + lo / inv, alpha + hi / inv]))
    F = _split_sums(alpha, inv, lo, hi, bp)
    k = np.clip(np.searchsorted(F, totals, side="left"), 1, bp.size - 1)
    dF = F[k] - F[k - 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        T = np.where(dF > 0, bp[k - 1] + (totals - F[k - 1]) * (bp[k] - bp[k - 1]) / dF, bp[k])
    return np.clip((T[:, None] - alpha) * inv, lo, hi)


def _split_sums(alpha: np.ndarray, inv: np.ndarray, lo: float, hi: np.ndarray, T: np.ndarray) -> np.ndarray:
    """F(T) = sum_i clip((T - alpha_i) inv_i, lo, hi_i) at each finish time in ``T``, in
    O((N + len(T)) log N): rank i adds lo below t_lo_i = alpha_i + lo / inv_i, its linear part
    between, and hi_i from t_hi_i = alpha_i + hi_i / inv_i on, so F is N lo plus prefix sums over
    the ranks sorted by t_lo minus those sorted by t_hi. (The (2N, N) clip it replaces took 24 ms
    per call at N = 1024: the decision-latency target there is 20 ms.)"""
    ai = alpha * inv
    t_lo, t_hi = alpha + lo / inv, alpha + hi / inv
    o1, o2 = np.argsort(t_lo, kind="stable"), np.argsort(t_hi, kind="stable")
    z = np.zeros(1)
    c1_inv, c1_ai = np.concatenate([z, np.cumsum(inv[o1])]), np.concatenate([z, np.cumsum(ai[o1])])
    c2_inv, c2_ai = np.concatenate([z, np.cumsum(inv[o2])]), np.concatenate([z, np.cumsum(ai[o2])])
    c2_hi = np.concatenate([z, np.cumsum(hi[o2])])
    k1 = np.searchsorted(t_lo[o1], T, side="left")      # ranks above their floor: t_lo < T
    k2 = np.searchsorted(t_hi[o2], T, side="right")     # ranks at their cap: t_hi <= T
    above = T * c1_inv[k1] - c1_ai[k1] - lo * k1          # sum of ((T - alpha) inv - lo) over them
    capped = T * c2_inv[k2] - c2_ai[k2] - c2_hi[k2]       # sum of ((T - alpha) inv - hi) over them
    return lo * alpha.size + above - capped


def integer_split(alpha: np.ndarray, beta: np.ndarray, total: int, bounds: "PlanBounds") -> np.ndarray:
    """The equal-time split of the integer ``total`` in integers (``round_by_time`` of the
    continuous ``equal_time_split``): within the bounds, the slowest rank's predicted compute
    time ``alpha_i + beta_i b_i`` as small as integers allow."""
    lo = float(max(int(bounds.min_batch), 1))
    cont = equal_time_split(alpha, beta, float(total), lo, np.asarray(bounds.max_batch, dtype=float))
    return round_by_time(cont, alpha, beta, total, bounds)


def round_by_time(split: np.ndarray, alpha: np.ndarray, beta: np.ndarray, total: int,
                  bounds: "PlanBounds") -> np.ndarray:
    """Integer local batches summing to ``total`` (multiples of ``bounds.quantum`` where the total
    allows) within the bounds, near the continuous ``split``: each rank rounded down, then each
    rank left short takes at most one more quantum (then one more sample). A rank that can take
    it without its predicted time ``alpha_i + beta_i b_i`` exceeding the slowest rank's (the step
    time does not change) takes it first, the lowest such ranks first; then the ranks whose
    predicted time after taking it is the smallest.

    Rounding by the largest remainder instead treats a sample as the same cost on every rank: on
    hetero16 (2 and 8 ms per sample, 3-14 samples per rank) it gave a slow rank a fourth sample
    (+8 ms) and took one from a fast rank (-2 ms), an 8% imbalance that the 10% worth a plan
    change then kept for the whole run.

    Where a remainder costs nothing, which rank takes it is decided by rank, not by timing noise.
    Live (issue 24, held-out heldout_bn5), the slowest rank sat at its BatchNorm floor and the
    other four took the two left-over samples well below its time; by smallest predicted time,
    runs of one seed split them [33, 33, 21, 17, 16] or [33, 32, 21, 18, 16] on noise of 1-2%, and
    with BatchNorm that one sample moved the time to a target by up to 24%. Pure; float array
    (the controllers' proposal type)."""
    alpha, beta = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    n, q = alpha.size, int(bounds.quantum)
    lo_b = max(int(bounds.min_batch), 1)
    hi = np.asarray(bounds.max_batch, dtype=np.int64)
    total = int(min(max(int(total), lo_b * n), int(hi.sum())))
    b = np.clip((np.floor(np.asarray(split, dtype=float) / q + 1e-9) * q).astype(np.int64), lo_b, hi)
    for step in ((q, 1) if q > 1 else (1,)):
        deficit = total - int(b.sum())
        if deficit >= step:
            ok = b + step <= hi
            k = min(deficit // step, int(ok.sum()))
            if k > 0:
                pick = _remainder_ranks(alpha + beta * (b + step), ok, k, float(np.max(alpha + beta * b))) \
                    if k < n else np.flatnonzero(ok)
                b[pick] += step
    while int(b.sum()) > total:          # the floors of the bounds took more than the total
        ok = b - 1 >= lo_b
        if not ok.any():
            break
        b[int(np.argmax(np.where(ok, alpha + beta * b, -np.inf)))] -= 1
    while int(b.sum()) < total:          # a remainder no single pass placed (several ranks capped)
        ok = b + 1 <= hi
        if not ok.any():
            break
        b[int(np.argmin(np.where(ok, alpha + beta * (b + 1), np.inf)))] += 1
    return b.astype(float)


def _remainder_ranks(t: np.ndarray, ok: np.ndarray, k: int, limit: float) -> np.ndarray:
    """The k ranks (among ``ok``) to take one more quantum, given their predicted times ``t`` after
    taking it: first those that stay within ``limit`` (the slowest rank's time now: free), lowest
    ranks first; then the smallest times, ties to the lowest ranks (stable: equal ranks split alike)."""
    cand = np.flatnonzero(ok)
    tc = t[cand]
    free = tc <= limit
    rest = cand[~free][np.argsort(tc[~free], kind="stable")]
    return np.concatenate([cand[free], rest])[:k]
