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
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from dynamix_hvd.controllers.affine import (IDENTIFY_SPREAD, WEIGHT_FLOOR, fit_affine, fit_scaled,
                                            identified, precision_weight)
from dynamix_hvd.controllers.split import TIE_TOL_MAX, TIE_Z, seed_runs, tie_groups  # noqa: F401 (TIE_*: the tie's thresholds)

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


def _row_nanmedian(x: np.ndarray) -> np.ndarray:
    """``np.nanmedian(x, axis=1)`` of a 2-D array (NaN for an all-NaN row) by one sort: numpy's
    own takes its masked-array path for short rows, ~1 ms at 1024 x 16 against ~0.15 ms."""
    srt = np.sort(x, axis=1)                              # NaN last
    k = np.sum(~np.isnan(x), axis=1)
    lo = np.take_along_axis(srt, np.maximum((k - 1) // 2, 0)[:, None], axis=1)[:, 0]
    hi = np.take_along_axis(srt, np.minimum(k // 2, x.shape[1] - 1)[:, None], axis=1)[:, 0]
    return np.where(k > 0, (lo + hi) / 2, np.nan)


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
    """Bounded (b, t, rel. error) history per rank, change detection, and the fitted (alpha, beta).

    The histories live in three (ranks, ``history``) arrays (sizes, times, relative errors), each
    rank's row left-aligned from its oldest point, with a count per rank; the held-back deviations,
    the priors and the cached per-rank fits are per-rank arrays too (NaN / 0 for none), so a
    decision at 1024 ranks reads and updates them in numpy passes (per-rank deques and Python loops
    were about a third of a decision at that scale, session 41)."""

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
        self.resets = 0
        self._fit: tuple[np.ndarray, np.ndarray] | None = None   # fit() of the current histories
        self._all_points: tuple[np.ndarray, np.ndarray] | None = None   # every rank's points, counts
        self._resize(0)

    def _resize(self, n: int) -> None:
        """Empty histories for ``n`` ranks."""
        h = self.history
        self._b, self._t, self._r = (np.full((n, h), np.nan) for _ in range(3))   # points, left-aligned
        self._n = np.zeros(n, dtype=int)                 # points per rank
        self._pend = np.zeros(n, dtype=int)              # sign of an unconfirmed deviation (0: none)
        self._pend_pt = np.full((n, 3), np.nan)          # ... and its (b, t, rel. error)
        self._prior = np.full((n, 2), np.nan)            # (alpha, beta) before the last restart (NaN: none)
        self._fits = np.full((n, 2), np.nan)             # cached _compute_rank_fit of each rank
        self._fresh = np.zeros(n, dtype=bool)            # ... valid for the rank's current history
        self._fit = self._all_points = None

    # -- read-only views (checkpoints, tests) ---------------------------------------------------
    @property
    def obs(self) -> list[list[tuple[float, float, float]]]:
        """Each rank's history, oldest first, as (b, t, rel. error) triples (a copy)."""
        return [list(zip(b[:k], t[:k], r[:k])) for b, t, r, k in
                zip(self._b.tolist(), self._t.tolist(), self._r.tolist(), self._n.tolist())]

    @property
    def prior(self) -> list[tuple[float, float] | None]:
        """Each rank's fit before its last restart, or None."""
        return [None if math.isnan(a) else (a, b) for a, b in self._prior.tolist()]

    @property
    def pending(self) -> list[tuple[int, tuple[float, float, float]] | None]:
        """Each rank's unconfirmed deviation (sign, (b, t, rel. error)), or None."""
        return [None if s == 0 else (s, tuple(p)) for s, p in zip(self._pend.tolist(), self._pend_pt.tolist())]

    def add(self, sizes: Sequence[float], times: Sequence[float], changed: Sequence[int] | None = None,
            rel_se: Sequence[float] | None = None) -> None:
        """Record one interval's per-rank batch sizes and compute times (NaN times are skipped).

        ``changed[i]`` true: rank i's own step-by-step detector saw its compute time change
        within the interval and ``times[i]`` covers only the steps since (see ``react``), so
        the history restarts from this observation without waiting for a second one.
        ``rel_se[i]``: the relative standard error of ``times[i]``; the fit weights the
        observation by ``precision_weight`` of it (equal weights without), and a deviation
        within three combined standard errors is noise, not a change. Every rank in numpy
        passes: each rank's outcome depends on its own history only."""
        self._fit = self._all_points = None
        n = len(sizes)
        if self._n.size != n:
            self._resize(n)
        b = np.asarray(sizes, dtype=float).reshape(-1)
        t = np.asarray(times, dtype=float).reshape(-1)
        rels = np.full(n, np.nan) if rel_se is None else np.asarray(rel_se, dtype=float).reshape(-1)
        # every rank's deviation from its own history, before any rank's history changes
        devs = self._deviations(b, t, rels)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(t) & (t > 0) & (b > 0)
            r = np.where(np.isfinite(rels) & (rels > 0), rels, np.nan)
        has = self._n > 0
        flagged = ok & has & (np.asarray(changed, dtype=bool).reshape(-1) if changed is not None else False)
        rest = ok & ~flagged
        dev = np.where(has, devs, 0)
        # two deviations in a row in the same direction: the rank changed; the history restarts
        # from the observations made since the change
        confirmed = rest & (dev != 0) & (self._pend == dev)
        held = rest & (dev != 0) & ~confirmed          # a suspect observation is held back until confirmed
        fine = rest & (dev == 0)
        pt = np.stack([b, t, r], axis=1)
        restart = np.flatnonzero(flagged | confirmed)
        if restart.size:
            self._ensure_fits(restart, batch=False)
            a0, b0 = self._fits[restart, 0], self._fits[restart, 1]
            with np.errstate(invalid="ignore"):
                keep = np.isfinite(a0) & (a0 > 0) & (b0 > 0)
            self._prior[restart] = np.where(keep[:, None], self._fits[restart], np.nan)
            two = confirmed[restart] & (self.history >= 2)     # (a history of one keeps the latest)
            first = np.where(two[:, None], self._pend_pt[restart], pt[restart])
            self._b[restart], self._t[restart], self._r[restart] = np.nan, np.nan, np.nan
            self._b[restart, 0], self._t[restart, 0], self._r[restart, 0] = first[:, 0], first[:, 1], first[:, 2]
            second = restart[two]
            if second.size:
                self._b[second, 1], self._t[second, 1], self._r[second, 1] = b[second], t[second], r[second]
            self._n[restart] = np.where(two, 2, 1)
            self._pend[restart] = 0
            self._fresh[restart] = False
            self.resets += int(restart.size)
        if held.any():
            self._pend[held] = dev[held]
            self._pend_pt[held] = pt[held]
        if fine.any():
            self._pend[fine] = 0
            self._append(np.flatnonzero(fine), b, t, r)
        self._fit = self._all_points = None      # (the change test read the histories before they changed)

    def _append(self, ranks: np.ndarray, b: np.ndarray, t: np.ndarray, r: np.ndarray) -> None:
        """Append point i of (b, t, r) to each rank i of ``ranks``, dropping the oldest of a full history."""
        full = ranks[self._n[ranks] >= self.history]
        if full.size:
            for x in (self._b, self._t, self._r):
                x[full, :-1] = x[full, 1:]
            self._n[full] -= 1
        col = self._n[ranks]
        self._b[ranks, col], self._t[ranks, col], self._r[ranks, col] = b[ranks], t[ranks], r[ranks]
        self._n[ranks] += 1
        self._fresh[ranks] = False

    def add_state(self, state: "ClusterState") -> None:
        """``add`` for one decision's state: the plan's sizes, each rank's compute time and
        ``changed`` flag, and the relative standard error of that time (the fit's weight)."""
        self.add(state.plan.batch_sizes, [w.compute_s for w in state.workers],
                 changed=[w.changed for w in state.workers],
                 rel_se=[w.compute_se_s / w.compute_s if w.compute_s > 0 else math.nan for w in state.workers])

    def _deviations(self, sizes: Sequence[float], times: Sequence[float], rels: Sequence[float]) -> np.ndarray:
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
        if self._n.size != len(sizes):
            return out
        have = np.flatnonzero(self._n > 0)
        if have.size == 0:
            return out
        stale = have[~self._fresh[have]]
        if stale.size >= BATCH_FIT_MIN:
            self._batch_fit(stale.tolist())
        cnt = self._n[have]
        m, H = have.size, int(cnt.max())
        X, T, R = self._b[have, :H], self._t[have, :H], self._r[have, :H]
        valid = ~np.isnan(X)
        bn = np.asarray(sizes, dtype=float)[have]
        tn = np.asarray(times, dtype=float)[have]
        rn = np.asarray(rels, dtype=float)[have]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)    # all-NaN rows (no point of the same size)
            spread = np.nanmax(X, axis=1) - np.nanmin(X, axis=1)
            ident = (cnt >= 2) & (spread > IDENTIFY_SPREAD * np.nanmean(X, axis=1))
            self._ensure_fits(have[ident], batch=False)
            fits = np.where(ident[:, None], self._fits[have], np.nan)
            a, b = fits[:, :1], fits[:, 1:]
            same = valid & (np.abs(X - bn[:, None]) <= 0.05 * bn[:, None])
            use = np.where(ident[:, None], valid, same)
            med_t = _row_nanmedian(np.where(same, T, np.nan)) if (~ident).any() else np.full(m, np.nan)
            pred = np.where(ident, a[:, 0] + b[:, 0] * bn, med_t)
            base = np.where(ident[:, None], a + b * X, med_t[:, None])
            rel = np.where(use, np.abs(T / base - 1.0), np.nan)
            rel = np.where(np.isfinite(rel), rel, np.nan)
            k = np.sum(~np.isnan(rel), axis=1)
            scatter = _row_nanmedian(np.where(k[:, None] >= 4, rel, 0.0))
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
        self._ensure_fits(np.arange(self._n.size))
        alpha, beta = self._fits[:, 0].copy(), self._fits[:, 1].copy()
        if self.pool:
            alpha, beta = self._pooled(alpha, beta)
        if self.tie:
            alpha, beta = self._tied(alpha, beta)
        if np.isfinite(self._fits[:, 1]).all():
            return alpha, beta
        if np.isfinite(beta).any():
            alpha = np.where(np.isfinite(alpha), alpha, np.nanmean(alpha))
            beta = np.where(np.isfinite(beta), beta, np.nanmean(beta))
        return alpha, beta

    def _fitted_latest(self, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points per rank, the ranks with points and a finite fit of positive slope, their
        latest (b, t, rel. error) as an (m, 3) array): what ``_pooled`` and ``_tied`` compare."""
        counts = self._n
        with np.errstate(invalid="ignore"):
            idx = np.flatnonzero((counts > 0) & np.isfinite(alpha) & np.isfinite(beta) & (beta > 0))
        col = counts[idx] - 1
        last = np.stack([self._b[idx, col], self._t[idx, col], self._r[idx, col]], axis=1)
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
        One numpy pass over all ranks' points; the grouping walk in runs (``split.seed_runs``)."""
        counts, idx, last = self._fitted_latest(alpha, beta)
        if idx.size < 2:
            return alpha, beta
        a, bt, lb, lt = alpha[idx], beta[idx], last[:, 0], last[:, 1]
        order = np.argsort(lt * (a + bt * float(np.median(lb))) / (a + bt * lb), kind="stable")
        rel = np.where(np.isfinite(last[:, 2]) & (last[:, 2] > 0), last[:, 2], 0.0)
        tol = np.clip(3.0 * rel, POOL_TOL, POOL_TOL_MAX)[order]
        a, bt, lb, lt = a[order], bt[order], lb[order], lt[order]

        def joins(s: int, lo: int, hi: int) -> np.ndarray:
            # ranks lo..hi-1 (in order): the latest time carried to the seed's latest size along
            # the rank's own fit, within the larger tolerance of the two
            k = slice(lo, hi)
            with np.errstate(divide="ignore", invalid="ignore"):
                off = np.abs(lt[k] * (a[k] + bt[k] * lb[s]) / (a[k] + bt[k] * lb[k]) / lt[s] - 1.0)
            return ~(off > np.maximum(tol[s], tol[k]))

        group = np.empty(idx.size, dtype=int)
        group[order] = seed_runs(idx.size, joins)
        n_groups = int(group.max()) + 1
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
        self._ensure_fits(np.array([int(i)]), batch=False)
        a, b = self._fits[int(i)].tolist()
        return a, b

    def _ensure_fits(self, ranks: np.ndarray, batch: bool = True) -> None:
        """Compute the cached fit (``_compute_rank_fit``) of each rank of ``ranks`` whose history
        changed since its last fit: in one numpy pass (``_batch_fit``) from ``BATCH_FIT_MIN`` of
        them when ``batch``, else rank by rank. A decision asks for a rank's fit up to three
        times (change detection, the fit, the uncertainty)."""
        stale = ranks[~self._fresh[ranks]]
        if batch and stale.size >= BATCH_FIT_MIN:
            self._batch_fit(stale.tolist())
            stale = stale[~self._fresh[stale]]
        for i in stale.tolist():
            self._fits[i] = self._compute_rank_fit(i)
            self._fresh[i] = True

    def _batch_fit(self, ranks: list[int]) -> None:
        """``_compute_rank_fit`` of many ranks at once (numpy over all their points; the same
        formulas, summed in another order: equal to about 1e-12). A decision at hundreds of
        ranks refits nearly every rank, since each gets a new observation per interval."""
        rk = np.asarray(ranks, dtype=int)
        counts = self._n[rk]
        have = counts > 0
        if not have.any():
            self._fits[rk] = np.nan
            self._fresh[rk] = True
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
        prior = self._prior[rk[have]]
        a0, b0 = prior[:, 0], prior[:, 1]
        scaled = np.isfinite(a0) & ~ident
        if scaled.any():
            pred = np.repeat(a0, cnt) + np.repeat(b0, cnt) * b
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = seg(w * pred * t) / seg(w * pred * pred)
            a_out = np.where(scaled, scale * a0, a_out)
            b_out = np.where(scaled, scale * b0, b_out)
        self._fits[rk[have]] = np.stack([a_out, b_out], axis=1)
        self._fits[rk[~have]] = np.nan
        self._fresh[rk] = True

    def _points(self, ranks: list[int]) -> np.ndarray:
        """The (b, t, rel. error) points of ``ranks`` (ascending) laid end to end, (points, 3)
        floats: a selection from every rank's points, built once per change of the histories (a
        decision reads them up to four times: change test, batch fit, pooling, scatter)."""
        if self._all_points is None:
            valid = np.arange(self.history) < self._n[:, None]
            pts = np.stack([self._b[valid], self._t[valid], self._r[valid]], axis=1)
            self._all_points = (pts, self._n.copy())
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
        n = self._n.size
        out = np.full(n, np.nan)
        counts = self._n
        many = np.flatnonzero(counts >= 2)
        if many.size == 0:
            return out
        self._ensure_fits(many, batch=False)
        fits = self._fits[many]
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
        k = int(self._n[i])
        bs, ts = self._b[i, :k].tolist(), self._t[i, :k].tolist()
        ws = [precision_weight(r) for r in self._r[i, :k].tolist()]
        a0, b0 = self._prior[i].tolist()
        if not math.isnan(a0) and not identified(bs):
            return fit_scaled((a0, b0), bs, ts, ws)
        return fit_affine(bs, ts, ws)

    def state_dict(self) -> dict[str, Any]:
        return {"obs": self.obs, "prior": [None if p is None else list(p) for p in self.prior],
                "pending": [None if p is None else [p[0], list(p[1])] for p in self.pending], "resets": self.resets}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        obs = state.get("obs", [])
        self._resize(len(obs))
        for i, d in enumerate(obs):
            # (b, t) pairs of a checkpoint from before the weights: equal weights
            pts = [_triple(p) for p in d][-self.history:]
            self._n[i] = len(pts)
            for j, (b, t, r) in enumerate(pts):
                self._b[i, j], self._t[i, j], self._r[i, j] = b, t, r
        for i, p in enumerate(state.get("pending", [None] * len(obs))):
            if p is not None:
                self._pend[i], self._pend_pt[i] = int(p[0]), _triple(p[1])
        for i, p in enumerate(state.get("prior", [None] * len(obs))):
            if p is not None:
                self._prior[i] = (float(p[0]), float(p[1]))
        self.resets = int(state.get("resets", 0))
