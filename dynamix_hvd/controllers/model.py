"""Per-rank compute-time model shared by the proportional and goodput controllers.

Each rank's compute time per step is modelled as ``t_i(b) = alpha_i + beta_i * b`` (a fixed
cost plus a per-sample cost), fitted by least squares over the rank's recent (b, t)
observations. Splitting a global batch so that every rank's *predicted time* is equal
(``equal_time_split``) is what balances an overhead-dominated model: splitting by time per
sample alone (t/b) makes a rank with a smaller batch look slower per sample, so it is given an
even smaller batch, a feedback loop that ran two identical ranks to [2, 62].

``ComputeModel`` keeps a bounded history per rank and forgets it when a rank changes: once the
fit is identified (two distinct sizes seen) or the same size was seen before, a new observation
further from the prediction than the tolerance (``change_tol``, or three times the history's
own scatter if larger) is held back, not fitted; a second one in a row in the same direction
restarts that rank's history from those two observations (one jump to the new split, measured
in the bench: 2 intervals instead of a 12 s staircase), while a lone outlier is dropped, so
measurement noise alone does not reset or skew the fit. A rank whose own step-by-step detector
saw the change (``WorkerStats.changed``, the early decisions of ``react``) restarts at once, from
its mean since the change.

After a restart the history holds one batch size, so the fixed cost is not identifiable again
until a second size is seen. Counting it as zero meanwhile (time proportional to the batch)
made the smallest global batch look best: live, on the overhead-dominated ResNet-1D, one
restart sent the goodput plan from B=257 to 64 and cost accuracy. Instead the rank keeps the
fit it had before the change, scaled by one factor to the new observations (``fit_scaled``):
a slowdown is assumed to stretch fixed and per-sample cost alike until two sizes say otherwise.

Each observation is weighted by its precision, 1 / (r^2 + ``WEIGHT_FLOOR``^2) with r the
interval's relative standard error (``WorkerStats.compute_se_s / compute_s``): the first interval
of a job (warm-up) or one disturbed by another process on the node is much noisier than the next,
and an equal-weight mean of the two gave a split far from equal time. Live (hetero6_bn, session 9),
a first interval at 13-20% standard error and a second at 1-4% made the fitted speed ratio of the
slowest and fastest ranks 1.76 where it is 2.45, so the first re-split moved only half way and the
next waited for evidence. Observations of equal precision (the simulators report one relative error
for all) keep equal weights: the fit is then plain least squares.
"""
from __future__ import annotations

import math
import warnings
from collections import deque
from itertools import chain
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from dynamix_hvd.controllers.affine import (IDENTIFY_SPREAD, WEIGHT_FLOOR, fit_affine, fit_scaled,
                                            identified, precision_weight)
from dynamix_hvd.controllers.split import TIE_TOL_MAX, TIE_Z, tie_groups  # noqa: F401 (TIE_*: the tie's thresholds)

if TYPE_CHECKING:
    from dynamix_hvd.records import ClusterState


BATCH_FIT_MIN = 32       # stale ranks from which ComputeModel refits them in one numpy pass
POOL_TOL = 0.15          # ranks whose times agree within this share (carried to one size) pool their shape
POOL_TOL_MAX = 0.30      # ... or within 3 standard errors of their latest time, up to this share
POOL_ITERS = 8           # alternations of the pooled fit (group shape, rank levels)


def _identified_runs(b: np.ndarray, starts: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """``affine.identified`` of each run of sizes ``b[starts[k]:starts[k] + cnt[k]]`` (every run
    non-empty), in one numpy pass."""
    spread = np.maximum.reduceat(b, starts) - np.minimum.reduceat(b, starts)
    return (cnt >= 2) & (spread > IDENTIFY_SPREAD * (np.add.reduceat(b, starts) / cnt))


def _triple(p: Sequence[float]) -> tuple[float, float, float]:
    """A stored observation as (b, t, relative standard error); (b, t) from an older checkpoint
    gets an unknown (NaN) error."""
    return (float(p[0]), float(p[1]), float(p[2]) if len(p) > 2 else math.nan)


def _combined_rel_se(points: Sequence[tuple[float, float, float]]) -> float:
    """Relative error of the precision-weighted mean of ``points`` (0 when none is known)."""
    inv = sum(1.0 / (r * r) for _, _, r in points if math.isfinite(r) and r > 0)
    if inv == 0 or any(not (math.isfinite(r) and r > 0) for _, _, r in points):
        return 0.0
    return math.sqrt(1.0 / inv)


class ComputeModel:
    """Bounded (b, t, weight) history per rank, change detection, and the fitted (alpha, beta)."""

    def __init__(self, history: int = 16, change_tol: float = 0.3, pool: bool = True, tie: bool = True) -> None:
        if history < 1:
            raise ValueError(f"history={history}: must be >= 1")
        if not change_tol > 0:
            raise ValueError(f"change_tol={change_tol}: must be > 0")
        self.history, self.change_tol = int(history), float(change_tol)
        # ranks that measure alike share the shape of their fit, each keeping its level
        # (``_pooled``); on by default since session 18 (measured live on hetero16, hetero8,
        # hetero4x, node_slowdown, trace_cov, hetero6_bn, link_degrade; README, issue 24)
        self.pool = bool(pool)
        # ranks whose times the measurements cannot tell apart get one fit (``_tied``)
        self.tie = bool(tie)
        self.obs: list[deque] = []
        self.pending: list = []    # per rank: (sign, (b, t, weight)) of an unconfirmed deviation, or None
        self.prior: list = []      # per rank: the (alpha, beta) fitted before the last restart, or None
        self.resets = 0
        self._fit: tuple[np.ndarray, np.ndarray] | None = None   # fit() of the current history
        self._rank_fits: list[tuple[float, float] | None] = []   # _fit_rank(i) of rank i's history, or None
        self._all_points: tuple[np.ndarray, np.ndarray] | None = None   # every rank's points, counts

    def add(self, sizes: Sequence[float], times: Sequence[float], changed: Sequence[int] | None = None,
            rel_se: Sequence[float] | None = None) -> None:
        """Record one interval's per-rank batch sizes and compute times (NaN times are skipped).

        ``changed[i]`` true: rank i's own step-by-step detector saw its compute time change
        within the interval and ``times[i]`` covers only the steps since (see ``react``), so
        the history restarts from this observation without waiting for a second one.
        ``rel_se[i]``: the relative standard error of ``times[i]``; the fit weights the
        observation by ``precision_weight`` of it (equal weights without), and a deviation
        within three combined standard errors is noise, not a change."""
        self._fit = self._all_points = None
        if len(self.obs) != len(sizes):
            self.obs = [deque(maxlen=self.history) for _ in sizes]
            self.pending = [None] * len(sizes)
            self.prior = [None] * len(sizes)
            self._rank_fits = [None] * len(sizes)
        rels = [float(rel_se[i]) if rel_se is not None else math.nan for i in range(len(sizes))]
        # every rank's deviation from its own history, before any rank's history changes (each
        # depends on that rank's history only)
        devs = self._deviations([float(b) for b in sizes], [float(t) for t in times], rels)
        for i, (b, t) in enumerate(zip(sizes, times)):
            b, t = float(b), float(t)
            if not (math.isfinite(t) and t > 0 and b > 0):
                continue
            r = rels[i]
            pt = (b, t, r if math.isfinite(r) and r > 0 else math.nan)
            d = self.obs[i]
            if changed is not None and changed[i] and d:
                self._restart(i, [pt])
                continue
            dev = int(devs[i]) if d else 0
            held = self.pending[i]
            if dev != 0 and held is not None and dev == held[0]:
                # two deviations in a row in the same direction: the rank changed; the history
                # restarts from the observations made since the change
                self._restart(i, [held[1], pt])
            elif dev != 0:
                # a suspect observation is held back (not fitted) until the next one confirms it
                self.pending[i] = (dev, pt)
            else:
                self.pending[i] = None
                d.append(pt)
                self._rank_fits[i] = None
        self._all_points = None

    def add_state(self, state: "ClusterState") -> None:
        """``add`` for one decision's state: the plan's sizes, each rank's compute time and
        ``changed`` flag, and the relative standard error of that time (the fit's weight)."""
        self.add(state.plan.batch_sizes, [w.compute_s for w in state.workers],
                 changed=[w.changed for w in state.workers],
                 rel_se=[w.compute_se_s / w.compute_s if w.compute_s > 0 else math.nan for w in state.workers])

    def _restart(self, i: int, points: list[tuple[float, float, float]]) -> None:
        """Rank i changed: its history restarts from ``points``; the fit before the change is
        the prior until the new history identifies a fixed cost."""
        alpha, beta = self._fit_rank(i)
        self.prior[i] = (alpha, beta) if math.isfinite(alpha) and alpha > 0 and beta > 0 else None
        self.obs[i].clear()
        self.obs[i].extend(points)
        self._all_points = None
        self._rank_fits[i] = None
        self.resets += 1
        self.pending[i] = None

    def _deviations(self, sizes: list[float], times: list[float], rels: list[float]) -> np.ndarray:
        """Per rank: +1/-1 when its new time is further from its history's prediction than the
        tolerance, else 0 (0 for a rank without history or without a point of the same size).

        The prediction: the affine fit when the history identifies a fixed cost, else the
        median time of the points at the same size (within 5%). The tolerance is the largest
        of ``change_tol``, three times the history's own relative scatter (1.4826 x the median
        absolute relative residual, from 4 points on) and three times the combined standard
        error of the new time and of the history it is compared with, so measurement noise
        alone does not look like a change. All ranks in one numpy pass (per rank in Python it
        was ~10 ms of a decision at 1024 ranks)."""
        out = np.zeros(len(sizes), dtype=int)
        if len(self.obs) != len(sizes):
            return out
        counts = np.array([len(d) for d in self.obs], dtype=int)
        have = np.flatnonzero(counts > 0)
        if have.size == 0:
            return out
        if len(self._rank_fits) != len(self.obs):
            self._rank_fits = [None] * len(self.obs)
        stale = [int(i) for i in have if self._rank_fits[i] is None]
        if len(stale) >= BATCH_FIT_MIN:
            self._batch_fit(stale)
        cnt = counts[have]
        pts = self._points(have.tolist())
        m, H = have.size, int(cnt.max())
        row = np.repeat(np.arange(m), cnt)
        col = np.arange(pts.shape[0]) - np.repeat(np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt)
        X, T, R = (np.full((m, H), np.nan) for _ in range(3))
        X[row, col], T[row, col], R[row, col] = pts[:, 0], pts[:, 1], pts[:, 2]
        valid = ~np.isnan(X)
        bn = np.asarray(sizes, dtype=float)[have]
        tn = np.asarray(times, dtype=float)[have]
        rn = np.asarray(rels, dtype=float)[have]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)    # all-NaN rows (no point of the same size)
            spread = np.nanmax(X, axis=1) - np.nanmin(X, axis=1)
            ident = (cnt >= 2) & (spread > IDENTIFY_SPREAD * np.nanmean(X, axis=1))
            fits = np.array([self._fit_rank(int(i)) if ok else (math.nan, math.nan)
                             for i, ok in zip(have, ident)], dtype=float).reshape(m, 2)
            a, b = fits[:, :1], fits[:, 1:]
            same = valid & (np.abs(X - bn[:, None]) <= 0.05 * bn[:, None])
            use = np.where(ident[:, None], valid, same)
            med_t = np.nanmedian(np.where(same, T, np.nan), axis=1) if (~ident).any() else np.full(m, np.nan)
            pred = np.where(ident, a[:, 0] + b[:, 0] * bn, med_t)
            base = np.where(ident[:, None], a + b * X, med_t[:, None])
            rel = np.where(use, np.abs(T / base - 1.0), np.nan)
            rel = np.where(np.isfinite(rel), rel, np.nan)
            k = np.sum(~np.isnan(rel), axis=1)
            scatter = np.nanmedian(np.where(k[:, None] >= 4, rel, 0.0), axis=1)
            known = use & np.isfinite(R) & (R > 0)
            inv = np.sum(np.where(known, 1.0 / (R * R), 0.0), axis=1)
            r_pred = np.where((inv > 0) & (np.sum(use & ~known, axis=1) == 0), np.sqrt(1.0 / inv), 0.0)
            tol = np.full(m, self.change_tol)
            tol = np.where(k >= 4, np.maximum(tol, 3.0 * 1.4826 * scatter), tol)
            tol = np.where(np.isfinite(rn), np.maximum(tol, 3.0 * np.sqrt(rn * rn + r_pred * r_pred)), tol)
            off = (pred > 0) & (np.abs(tn - pred) > tol * pred) & (ident | same.any(axis=1))
        out[have] = np.where(off, np.where(tn > pred, 1, -1), 0)
        return out

    def fit(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-rank (alpha, beta); ranks with no observation get the mean of the others (NaN if none).

        Computed once per history (a decision asks for it more than once: the goodput model, then
        the PPO anchor's split); callers get copies."""
        if self._fit is None:
            self._fit = self._compute_fit()
        return self._fit[0].copy(), self._fit[1].copy()

    def _compute_fit(self) -> tuple[np.ndarray, np.ndarray]:
        if len(self._rank_fits) != len(self.obs):
            self._rank_fits = [None] * len(self.obs)
        stale = [i for i, f in enumerate(self._rank_fits) if f is None]
        if len(stale) >= BATCH_FIT_MIN:
            self._batch_fit(stale)
        fits = [self._fit_rank(i) for i in range(len(self.obs))]
        alpha = np.array([f[0] for f in fits], dtype=float)
        beta = np.array([f[1] for f in fits], dtype=float)
        if self.pool:
            alpha, beta = self._pooled(alpha, beta)
        if self.tie:
            alpha, beta = self._tied(alpha, beta)
        if all(math.isfinite(f[1]) for f in fits):
            return alpha, beta
        if np.isfinite(beta).any():
            alpha = np.where(np.isfinite(alpha), alpha, np.nanmean(alpha))
            beta = np.where(np.isfinite(beta), beta, np.nanmean(beta))
        return alpha, beta

    def _fitted_latest(self, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points per rank, the ranks with points and a finite fit of positive slope, their
        latest (b, t, rel. error) as an (m, 3) array): what ``_pooled`` and ``_tied`` compare."""
        counts = np.array([len(d) for d in self.obs], dtype=int)
        idx = np.flatnonzero((counts > 0) & np.isfinite(alpha) & np.isfinite(beta) & (beta > 0))
        last = np.array([self.obs[int(i)][-1] for i in idx], dtype=float).reshape(-1, 3)
        return counts, idx, last

    def _pooled(self, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ranks that measure alike share the shape of their time curve, each keeping its level.

        Ranks are sorted by their latest time carried along their own fit to a common size (the
        median of the latest sizes); walking that order, a rank joins the group of the first
        rank (the seed) when its latest time, carried along its own fit to the seed's latest
        size, is within ``POOL_TOL`` of the seed's (or three standard errors of either's latest
        time, up to ``POOL_TOL_MAX``); otherwise it seeds the next group. The
        group's shape, t = s_i (fixed + slope b) with a level s_i per rank, is fitted by alternating
        least squares (``POOL_ITERS`` rounds: the shape through every member's points divided by its
        level, then each level scaled to the rank's points as ``fit_scaled`` does), so that the
        shape comes from the variation within each rank, not from the levels' differences; a group
        is fitted when one of its ranks alone saw sizes spread enough to identify a fixed cost
        (``identified``), and each member's fit becomes s_i (fixed, slope). Live (hetero16, session
        16), four ranks of one kind had each been fitted from two sizes a sample or two apart: two
        were identified (about 20 ms + 2.4 ms/sample), two not (time taken as proportional to the
        batch, 4.4 ms/sample), so ranks of the same hardware got 11 and 16 samples and the 8%
        imbalance stayed below the 10% worth a plan change. A first version fitted one curve
        through the group's points without levels: hetero16 then ended within one sample in all 6
        runs (PPO 0.99x of proportional at worst), but on hetero8 it pooled a 2.0 and a 2.5
        ms/sample rank, read their difference in level as a flat shape (the second fitted at 25 ms
        + 1.2 ms/sample, given 7 samples instead of 10-11; 16.8 + 1.76 with levels). This version
        is on by default since it was measured live (session 18: hetero16 0.98x at worst).
        One numpy pass over all ranks' points (the grouping walk is O(N) Python)."""
        counts, idx, last = self._fitted_latest(alpha, beta)
        if idx.size < 2:
            return alpha, beta
        a, bt, lb, lt = alpha[idx], beta[idx], last[:, 0], last[:, 1]
        order = np.argsort(lt * (a + bt * float(np.median(lb))) / (a + bt * lb), kind="stable").tolist()
        rel = np.where(np.isfinite(last[:, 2]) & (last[:, 2] > 0), last[:, 2], 0.0)
        tol = np.clip(3.0 * rel, POOL_TOL, POOL_TOL_MAX).tolist()
        a, bt, lb, lt = a.tolist(), bt.tolist(), lb.tolist(), lt.tolist()
        group = np.empty(idx.size, dtype=int)
        g, s = -1, 0
        for k in order:
            # rank k's latest time carried to the seed's latest size along k's own fit
            if g < 0 or abs(lt[k] * (a[k] + bt[k] * lb[s]) / (a[k] + bt[k] * lb[k]) / lt[s] - 1.0) > max(tol[s], tol[k]):
                g, s = g + 1, k
            group[k] = g
        n_groups = g + 1
        members = np.bincount(group, minlength=n_groups)
        if members.max() < 2:
            return alpha, beta
        cnt = counts[idx]
        pts = self._points(idx.tolist())
        b, t, r = pts[:, 0], pts[:, 1], pts[:, 2]
        if not (np.isfinite(b).all() and np.isfinite(t).all() and (b > 0).all() and (t > 0).all()):
            return alpha, beta          # (points a checkpoint brought in unchecked)
        f2 = WEIGHT_FLOOR * WEIGHT_FLOOR
        rr = np.where(np.isfinite(r) & (r > 0), r, 0.0)
        w = f2 / (rr * rr + f2)
        pg, pr = np.repeat(group, cnt), np.repeat(np.arange(idx.size), cnt)

        def per_group(x: np.ndarray) -> np.ndarray:
            return np.bincount(pg, weights=x, minlength=n_groups)

        def per_rank(x: np.ndarray) -> np.ndarray:
            return np.bincount(pr, weights=x, minlength=idx.size)

        starts = np.concatenate(([0], np.cumsum(cnt)[:-1]))
        own = _identified_runs(b, starts, cnt)
        scale = np.ones(idx.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            for _ in range(POOL_ITERS):
                # the shape given each rank's level: t / s_i = fixed + slope b, residuals weighted w s_i^2
                sp = scale[pr]
                y, ws = t / sp, w * sp * sp
                sw = per_group(ws)
                bm, ym = per_group(ws * b) / sw, per_group(ws * y) / sw
                db = b - bm[pg]
                slope = per_group(ws * db * (y - ym[pg])) / per_group(ws * db * db)
                fixed = ym - slope * bm
                # each rank's level given the shape
                pred = fixed[pg] + slope[pg] * b
                scale = per_rank(w * pred * t) / per_rank(w * pred * pred)
            shared = ((members >= 2) & (np.bincount(group, weights=own.astype(float), minlength=n_groups) > 0)
                      & (slope > 0) & (fixed > 0))
        use = shared[group] & np.isfinite(scale) & (scale > 0)
        if use.any():
            alpha, beta = alpha.copy(), beta.copy()
            alpha[idx[use]] = scale[use] * fixed[group[use]]
            beta[idx[use]] = scale[use] * slope[group[use]]
        return alpha, beta

    def _tied(self, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ranks whose predicted times the measurements cannot tell apart share one fit.

        Each rank's fit predicts its time at 0.5, 1 and 1.5 times one size (the median of the
        latest sizes; three sizes so that the shapes must agree too, or a rank whose fixed cost is
        identified would be averaged with one timed at one size). Walking the ranks from the
        fastest (``split.tie_groups``), a rank joins the group of the first (the seed) when the three predictions differ
        by at most ``TIE_Z`` combined standard errors of their latest intervals (the latest
        point's ``rel_se``; no tie where it is unknown) and at most ``TIE_TOL_MAX`` (a first
        interval at 13-20% error would otherwise tie a 0.6 and a 1.2 ms/sample rank, hetero6_bn).
        Every member of a group of two or more gets the group's mean (alpha, beta). Equal ranks
        then get equal splits, and ``round_by_time`` gives a remainder to the lowest ranks, so the
        plan does not depend on which of them happened to time a few percent slower.

        Live (issue 24, session 20), the three equal ranks of hetero4x_resnet timed 48-52 ms at
        1-4% standard error in the first interval and were split [36, 39, 37], [39, 36, 37],
        [37, 38, 37] ... in runs of one seed; with BatchNorm, which rank holds which samples moves
        the time to a target by up to 20% either way, so two controllers with the same policy
        differed by that much. The tolerance is the evidence rule's (a difference of less than 3
        standard errors is not acted on, ``evidence.split_evidence``)."""
        _, idx, last = self._fitted_latest(alpha, beta)
        if idx.size < 2:
            return alpha, beta
        ref = float(np.median(last[:, 0]))
        preds = alpha[idx] + beta[idx] * np.array([[1.0], [0.5], [1.5]]) * ref
        group = tie_groups(preds, last[:, 2])
        members = np.bincount(group)
        if members.max() < 2:
            return alpha, beta
        alpha, beta = alpha.copy(), beta.copy()
        a_mean = np.bincount(group, weights=alpha[idx]) / members
        b_mean = np.bincount(group, weights=beta[idx]) / members
        many = members[group] >= 2
        alpha[idx[many]] = a_mean[group[many]]
        beta[idx[many]] = b_mean[group[many]]
        return alpha, beta

    def fit_rank(self, i: int) -> tuple[float, float]:
        """Rank i's (alpha, beta) from its history (the prior scaled to it while no fixed cost is
        identified); NaN without observations."""
        return self._fit_rank(i)

    def _fit_rank(self, i: int) -> tuple[float, float]:
        """Rank i's (alpha, beta), computed once per change of its history (a decision asks for
        it up to three times: change detection, the fit, the uncertainty)."""
        if len(self._rank_fits) != len(self.obs):
            self._rank_fits = [None] * len(self.obs)
        got = self._rank_fits[i]
        if got is None:
            got = self._rank_fits[i] = self._compute_rank_fit(i)
        return got

    def _batch_fit(self, ranks: list[int]) -> None:
        """``_compute_rank_fit`` of many ranks at once (numpy over all their points; the same
        formulas, summed in another order: equal to about 1e-12). A decision at hundreds of
        ranks refits nearly every rank, since each gets a new observation per interval."""
        counts = np.array([len(self.obs[i]) for i in ranks])
        have = counts > 0
        if not have.any():
            return
        pts = self._points(ranks)
        b, t, r = pts[:, 0], pts[:, 1], pts[:, 2]
        if not (np.isfinite(b).all() and np.isfinite(t).all() and (b > 0).all() and (t > 0).all()):
            return                      # (points a checkpoint brought in unchecked: the per-rank path)
        f2 = WEIGHT_FLOOR * WEIGHT_FLOOR
        rr = np.where(np.isfinite(r) & (r > 0), r, 0.0)
        w = f2 / (rr * rr + f2)
        cnt = counts[have]
        starts = np.concatenate(([0], np.cumsum(cnt)[:-1]))

        def seg(x: np.ndarray) -> np.ndarray:
            return np.add.reduceat(x, starts)

        sw = seg(w)
        bm, tm = seg(w * b) / sw, seg(w * t) / sw
        db, dt = b - np.repeat(bm, cnt), t - np.repeat(tm, cnt)
        with np.errstate(divide="ignore", invalid="ignore"):
            beta = seg(w * db * dt) / seg(w * db * db)
        alpha = tm - beta * bm
        ident = _identified_runs(b, starts, cnt)
        through0 = seg(w * b * t) / seg(w * b * b)
        ratio = seg(w * t / b) / sw
        a_out = np.where(ident & (beta > 0) & (alpha >= 0), alpha, 0.0)
        b_out = np.where(ident & (beta > 0), np.where(alpha >= 0, beta, through0), ratio)
        priors = [self.prior[i] for i, h in zip(ranks, have) if h]
        if any(p is not None for p in priors):
            a0 = np.array([p[0] if p is not None else np.nan for p in priors])
            b0 = np.array([p[1] if p is not None else np.nan for p in priors])
            pred = np.repeat(a0, cnt) + np.repeat(b0, cnt) * b
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = seg(w * pred * t) / seg(w * pred * pred)
            scaled = np.array([p is not None for p in priors]) & ~ident
            a_out = np.where(scaled, scale * a0, a_out)
            b_out = np.where(scaled, scale * b0, b_out)
        out = iter(zip(a_out.tolist(), b_out.tolist()))
        for i, h in zip(ranks, have):
            self._rank_fits[i] = next(out) if h else (math.nan, math.nan)

    def _points(self, ranks: list[int]) -> np.ndarray:
        """The (b, t, rel. error) points of ``ranks`` (ascending) laid end to end, (points, 3)
        floats: a selection from every rank's points, built once per change of the histories (a
        decision reads them up to four times: change test, batch fit, pooling, scatter)."""
        if self._all_points is None:
            counts = np.array([len(d) for d in self.obs], dtype=int)
            flat = chain.from_iterable(chain.from_iterable(self.obs))
            self._all_points = (np.fromiter(flat, dtype=float, count=3 * int(counts.sum())).reshape(-1, 3), counts)
        pts, counts = self._all_points
        if len(ranks) == len(counts):
            return pts
        keep = np.zeros(len(counts), dtype=bool)
        keep[ranks] = True
        return pts[np.repeat(keep, counts)]

    def fit_scatter(self) -> np.ndarray:
        """Per rank: the scatter of its interval means around its own fit, as a relative standard
        error of the fit, sqrt(sum r^2 / (k - 1)) / sqrt(k) with r = t / (alpha + beta b) - 1
        over its k points with a positive prediction (0 without such points); NaN for a rank
        with fewer than two observations. One numpy pass over every rank's points (a decision
        at 1024 ranks spent ~10 ms on this in Python)."""
        n = len(self.obs)
        out = np.full(n, np.nan)
        counts = np.array([len(d) for d in self.obs], dtype=int)
        many = np.flatnonzero(counts >= 2)
        if many.size == 0:
            return out
        fits = np.array([self._fit_rank(int(i)) for i in many], dtype=float)
        cnt = counts[many]
        pts = self._points(many.tolist())
        a, b = np.repeat(fits[:, 0], cnt), np.repeat(fits[:, 1], cnt)
        with np.errstate(divide="ignore", invalid="ignore"):
            pred = a + b * pts[:, 0]
            ok = pred > 0
            rel = np.where(ok, pts[:, 1] / np.where(ok, pred, 1.0) - 1.0, 0.0)
        starts = np.concatenate(([0], np.cumsum(cnt)[:-1]))
        k = np.add.reduceat(ok.astype(float), starts)
        ss = np.add.reduceat(rel * rel, starts)
        with np.errstate(divide="ignore", invalid="ignore"):
            across = np.sqrt(ss / np.maximum(k - 1, 1)) / np.sqrt(k)
        out[many] = np.where(k > 0, across, 0.0)
        return out

    def _compute_rank_fit(self, i: int) -> tuple[float, float]:
        bs, ts = [p[0] for p in self.obs[i]], [p[1] for p in self.obs[i]]
        ws = [precision_weight(p[2]) for p in self.obs[i]]
        prior = self.prior[i]
        if prior is not None and not identified(bs):
            return fit_scaled(prior, bs, ts, ws)
        return fit_affine(bs, ts, ws)

    def state_dict(self) -> dict[str, Any]:
        return {"obs": [list(d) for d in self.obs], "prior": [None if p is None else list(p) for p in self.prior],
                "pending": [None if p is None else [p[0], list(p[1])] for p in self.pending], "resets": self.resets}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._fit = self._all_points = None
        # (b, t) pairs of a checkpoint from before the weights: equal weights
        self.obs = [deque((_triple(p) for p in d), maxlen=self.history) for d in state.get("obs", [])]
        self.pending = [None if p is None else (int(p[0]), _triple(p[1]))
                        for p in state.get("pending", [None] * len(self.obs))]
        self.prior = [None if p is None else (float(p[0]), float(p[1]))
                      for p in state.get("prior", [None] * len(self.obs))]
        self.resets = int(state.get("resets", 0))
        self._rank_fits = [None] * len(self.obs)
