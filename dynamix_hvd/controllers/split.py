"""Equal-time splits of a global batch (pure): every rank's predicted compute time
``alpha_i + beta_i * b_i`` equal, within per-rank bounds. Used by the proportional and goodput
controllers, the PPO anchor, the live reward and the simulator, beside the compute model
(model.py) whose fits they split by."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from dynamix_hvd.plan import PlanBounds


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
    rank left short takes at most one more quantum (then one more sample), given to the ranks
    whose predicted time ``alpha_i + beta_i b_i`` after taking it is the smallest.

    Rounding by the largest remainder instead treats a sample as the same cost on every rank: on
    hetero16 (2 and 8 ms per sample, 3-14 samples per rank) it gave a slow rank a fourth sample
    (+8 ms) and took one from a fast rank (-2 ms), an 8% imbalance that the 10% worth a plan
    change then kept for the whole run. Pure; float array (the controllers' proposal type)."""
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
                t = np.where(ok, alpha + beta * (b + step), np.inf)
                # the k smallest times, ties to the lowest ranks (stable): equal ranks split alike
                pick = np.argsort(t, kind="stable")[:k] if k < n else np.flatnonzero(ok)
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
