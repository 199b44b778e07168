"""Statistical progress from measured validation curves (ground truth of the replay simulator).

Each measured run at global batch ``B_c`` gives the metric after ``iteration x B_c`` samples. The
curves are turned into *samples needed to reach each of K metric levels*:

* direction: the metric increases (accuracy, F1, hit rate) or decreases (WER, loss) as the curves'
  last values compare with their first ones (majority of curves; a tie counts as increasing);
* ``start`` = the worst first-epoch value over all curves; every curve gets the point
  (0 samples, start) prepended (nothing is measured before the first epoch);
* a curve's best-so-far envelope (running max, or min for a decreasing metric) with linear
  interpolation between epochs gives the first sample count at which it reaches a level;
* levels ``m_k = start + k/K (target - start)``, k = 0..K, equally spaced up to the target.

Default target (``default_target``): ``start + 0.95 (common_best - start)``, where ``common_best``
is the worst over curves of each curve's best value, so every measured batch size reaches it.

Between measured batch sizes the samples to each level are interpolated linearly in
(log B, log samples). Below the smallest measured B they are those of the smallest (smaller
batches are taken as sample-efficient as the smallest measured one); above the largest they are
extrapolated in log-log with the slope of the last measured segment clipped to [0, 1] (1 = no
gain from a larger batch; with a single curve the slope is 1). A level that a neighbouring measured
curve never reached is unreachable in between (infinite samples).

**How progress composes when B changes mid-run.** The state is ``P`` in [0, K] (level index plus
the fraction of the current level-to-level segment). Training ``n`` samples at batch B maps P to
B's own sample axis (``s = cum_B[k] + f (cum_B[k+1] - cum_B[k])``), adds n and maps back. So
each segment between two metric levels is covered in *equivalent samples of the batch in force*:
a run that did half of a segment at B1 needs half of that segment's samples at B2 (Pollux-style
"fraction of the curve", but per segment, so a batch that is efficient early and inefficient late
is treated as such). A constant B reaches the target after exactly ``cum_B[K]`` samples (the
curve itself); at a batch whose next level is unreachable progress stays where it is.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dynamix_hvd.traces.csvio import TraceError
from dynamix_hvd.traces.pollux import Curve, PolluxWorkload

DEFAULT_TARGET_FRACTION = 0.95
DEFAULT_LEVELS = 4
DEFAULT_GNS_SIGMA = 0.3


def metric_increases(curves: Sequence[Curve]) -> bool:
    votes = [float(np.sign(c.metric[-1] - c.metric[0])) for c in curves if c.metric.size > 1]
    return sum(votes) >= 0


def _oriented(metric: np.ndarray, increasing: bool) -> np.ndarray:
    return metric if increasing else -metric


def start_level(curves: Sequence[Curve], increasing: bool) -> float:
    """The worst first-epoch value over the curves (the level every run starts from)."""
    firsts = np.array([_oriented(c.metric[:1], increasing)[0] for c in curves])
    return float(_oriented(np.array([firsts.min()]), increasing)[0])


def default_target(curves: Sequence[Curve], increasing: bool, fraction: float = DEFAULT_TARGET_FRACTION) -> float:
    """``start + fraction (common_best - start)``: a level every measured batch size reaches."""
    start = _oriented(np.array([start_level(curves, increasing)]), increasing)[0]
    bests = [float(np.max(_oriented(c.metric, increasing))) for c in curves]
    common_best = min(bests)
    if not common_best > start:
        worst = curves[int(np.argmin(bests))]       # the run that never gets past every run's start: name it
        best = _oriented(np.array([common_best]), increasing)[0]
        raise TraceError(worst.path, f"this run's best metric ({best:g} over {worst.metric.size} epoch(s)) does not "
                                     f"improve on the worst first value of the validation curves "
                                     f"({_oriented(np.array([start]), increasing)[0]:g}): no target every measured "
                                     "batch size reaches can be derived (pass --target, or drop this run)",
                         column="metric")
    return float(_oriented(np.array([start + fraction * (common_best - start)]), increasing)[0])


def samples_to_levels(samples: np.ndarray, metric: np.ndarray, levels: np.ndarray, start: float,
                      increasing: bool) -> np.ndarray:
    """First sample count at which the curve's best-so-far envelope reaches each level (inf: never)."""
    s = np.concatenate([[0.0], np.asarray(samples, dtype=float)])
    y = _oriented(np.concatenate([[start], np.asarray(metric, dtype=float)]), increasing)
    env = np.maximum.accumulate(y)
    lv = _oriented(np.asarray(levels, dtype=float), increasing)
    j = np.searchsorted(env, lv, side="left")
    out = np.full(lv.shape, math.inf)
    ok = j < env.size
    j0 = np.clip(j - 1, 0, env.size - 1)
    jj = np.clip(j, 0, env.size - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(env[jj] > env[j0], (lv - env[j0]) / (env[jj] - env[j0]), 0.0)
    val = np.where(j == 0, 0.0, s[j0] + frac * (s[jj] - s[j0]))
    out[ok] = val[ok]
    return out


@dataclass
class ProgressModel:
    """Samples needed per metric level at any global batch, and the truth behind the noise scale."""

    batches: np.ndarray          # (C,) measured global batches, increasing
    increasing: bool
    start: float
    target: float
    levels: np.ndarray           # (K+1,) metric levels, levels[0] = start, levels[K] = target
    cum: np.ndarray              # (C, K+1) samples to reach each level on each measured curve
    log_ratio: np.ndarray        # (C, K+1) log(grad_var / grad_sqr) at each level's position
    unit_batch: float            # grad_var is the variance at this batch (the smallest measured one)
    best: float                  # best metric seen on any curve
    gns_sigma: float             # relative (log) estimator noise of the noise scale

    @property
    def n_levels(self) -> int:
        return self.levels.size - 1

    # --------------------------------------------------------------- samples
    def cum_for(self, B: Sequence[float] | float) -> np.ndarray:
        """(M, K+1) samples to reach each level at global batches B (inf where unreachable)."""
        Bv = np.atleast_1d(np.asarray(B, dtype=float))
        lb = np.log(self.batches)
        with np.errstate(divide="ignore"):
            L = np.log(self.cum[:, 1:])                        # (C, K), +inf = unreachable
        x = np.log(np.maximum(Bv, 1e-9))
        C = lb.size
        out = np.empty((Bv.size, L.shape[1]))
        if C == 1:
            slope = np.ones(L.shape[1])
            lo_i = hi_i = np.zeros(Bv.size, dtype=int)
            w = np.zeros(Bv.size)
        else:
            with np.errstate(invalid="ignore"):
                d = L[-1] - L[-2]
            slope = np.clip(np.where(np.isfinite(d), d / (lb[-1] - lb[-2]), 1.0), 0.0, 1.0)
            hi_i = np.clip(np.searchsorted(lb, x, side="left"), 1, C - 1)
            lo_i = hi_i - 1
            w = np.clip((x - lb[lo_i]) / (lb[hi_i] - lb[lo_i]), 0.0, 1.0)
        for m in range(Bv.size):
            if x[m] <= lb[0]:
                out[m] = L[0]
            elif x[m] >= lb[-1]:
                out[m] = L[-1] + slope * (x[m] - lb[-1])
            else:
                a, b, ww = L[lo_i[m]], L[hi_i[m]], w[m]
                fin = np.isfinite(a) & np.isfinite(b)
                out[m] = np.where(fin, (1 - ww) * np.where(fin, a, 0) + ww * np.where(fin, b, 0), math.inf)
                if ww == 0.0:
                    out[m] = a
                elif ww == 1.0:
                    out[m] = b
        out = np.maximum.accumulate(out, axis=1)
        return np.concatenate([np.zeros((Bv.size, 1)), np.exp(out)], axis=1)

    # --------------------------------------------------------------- composition
    @staticmethod
    def position(P: np.ndarray | float, cum: np.ndarray) -> np.ndarray:
        """Sample position on each row's axis for progress P (inf when the next level is unreachable)."""
        cum = np.atleast_2d(cum)
        K = cum.shape[1] - 1
        P = np.broadcast_to(np.asarray(P, dtype=float), (cum.shape[0],))
        k = np.clip(np.floor(P).astype(int), 0, K - 1)
        f = P - k
        r = np.arange(cum.shape[0])
        c0, c1 = cum[r, k], cum[r, k + 1]
        with np.errstate(invalid="ignore"):
            return np.where(f > 0, c0 + f * (c1 - c0), c0)

    @staticmethod
    def advance(P: np.ndarray | float, cum: np.ndarray, samples: np.ndarray | float) -> np.ndarray:
        """Progress after ``samples`` more samples at the batch whose level samples are ``cum``."""
        cum = np.atleast_2d(cum)
        K = cum.shape[1] - 1
        P = np.broadcast_to(np.asarray(P, dtype=float), (cum.shape[0],))
        s2 = ProgressModel.position(P, cum) + samples
        k2 = np.clip((cum <= s2[:, None]).sum(axis=1) - 1, 0, K)
        r = np.arange(cum.shape[0])
        c0 = cum[r, k2]
        c1 = cum[r, np.minimum(k2 + 1, K)]
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.where((k2 < K) & np.isfinite(c1) & (c1 > c0), (s2 - c0) / (c1 - c0), 0.0)
        new = np.where(np.isfinite(s2), k2 + f, P)
        return np.maximum(P, np.minimum(new, K))

    @staticmethod
    def advance1(P: float, cum: Sequence[float], samples: float) -> float:
        """``advance`` for one batch with Python floats (the simulator's hot path; same result)."""
        K = len(cum) - 1
        k = min(int(P), K - 1)
        f = P - k
        c0, c1 = cum[k], cum[k + 1]
        if f > 0:
            if not math.isfinite(c1):
                return P
            s = c0 + f * (c1 - c0)
        else:
            s = c0
        if not math.isfinite(s):
            return P
        s += samples
        k2 = bisect.bisect_right(cum, s) - 1
        if k2 >= K:
            return float(K)
        c0, c1 = cum[k2], cum[k2 + 1]
        f2 = (s - c0) / (c1 - c0) if math.isfinite(c1) and c1 > c0 else 0.0
        return max(P, min(k2 + f2, float(K)))

    def level_efficiency(self, P: float, B_ref: float, batches: Sequence[float] | np.ndarray) -> np.ndarray:
        """The true statistical efficiency of each global batch relative to ``B_ref`` at progress
        ``P``: samples from the current level to the next at ``B_ref`` over those at B (NaN where
        B does not reach the next level). Unlike Pollux's ``(phi + B_ref) / (phi + B)`` it can
        exceed 1 for B > B_ref where the measured runs say so."""
        cum = self.cum_for(np.concatenate([[float(B_ref)], np.atleast_1d(np.asarray(batches, dtype=float))]))
        k = min(int(P), self.n_levels - 1)
        seg = cum[:, k + 1] - cum[:, k]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.isfinite(seg[1:]) & (seg[1:] > 0), seg[0] / seg[1:], np.nan)

    def metric_at(self, P: float) -> float:
        K = self.n_levels
        k = min(int(P), K - 1)
        return float(self.levels[k] + (P - k) * (self.levels[k + 1] - self.levels[k]))

    # --------------------------------------------------------------- noise scale
    def noise_scale(self, P: float, B: float) -> float:
        """True gradient noise scale (samples) at progress P for batch B: ``unit_batch x var/sqr``,
        interpolated linearly along the levels and in log B between the measured runs (clamped)."""
        lb = math.log(max(B, 1e-9))
        bl = self._log_batches
        if lb <= bl[0]:
            i, w = 0, 0.0
        elif lb >= bl[-1]:
            i, w = len(bl) - 1, 0.0
        else:
            i = bisect.bisect_right(bl, lb) - 1
            w = (lb - bl[i]) / (bl[i + 1] - bl[i])
        K = self.n_levels
        k = min(int(P), K - 1)
        f = P - k
        lr = self.log_ratio
        a = lr[i, k] + f * (lr[i, k + 1] - lr[i, k])
        if w > 0:
            b = lr[i + 1, k] + f * (lr[i + 1, k + 1] - lr[i + 1, k])
            a = a + w * (b - a)
        return self.unit_batch * math.exp(float(a))

    def __post_init__(self) -> None:
        self._log_batches = [math.log(b) for b in self.batches]


def _curve_log_ratio(c: Curve, positions: np.ndarray) -> np.ndarray:
    ok = (c.grad_sqr > 0) & (c.grad_var > 0)
    if not ok.any():
        raise TraceError(c.path, "no row with grad_sqr > 0 and grad_var > 0: the noise scale is undefined",
                         column="grad_sqr")
    lr = np.log(c.grad_var[ok] / c.grad_sqr[ok])
    s = c.samples[ok]
    pos = np.where(np.isfinite(positions), positions, s[-1])
    return np.interp(pos, s, lr)


def estimator_sigma(curves: Sequence[Curve], default: float = DEFAULT_GNS_SIGMA) -> float:
    """Log-scale noise of one noise-scale estimate: the within-run scatter of log(var/sqr) in the
    traces, from second differences between consecutive epochs (a linear trend cancels):
    1.4826 x median |d2| / sqrt(6), pooled over runs with >= 3 usable epochs, clipped to
    [0.05, 1]; ``default`` when no run has 3 (nothing measures the scatter)."""
    d2 = []
    for c in curves:
        ok = (c.grad_sqr > 0) & (c.grad_var > 0)
        lr = np.log(c.grad_var[ok] / c.grad_sqr[ok])
        if lr.size >= 3:
            d2.extend(np.abs(np.diff(lr, 2)).tolist())
    if not d2:
        return default
    return float(np.clip(1.4826 * np.median(d2) / math.sqrt(6.0), 0.05, 1.0))


def build_progress(wl: PolluxWorkload, target: float | None = None, n_levels: int = DEFAULT_LEVELS,
                   fraction: float = DEFAULT_TARGET_FRACTION) -> ProgressModel:
    curves = wl.curves
    inc = metric_increases(curves)
    start = start_level(curves, inc)
    tgt = default_target(curves, inc, fraction) if target is None else float(target)
    if not math.isfinite(tgt) or not (_oriented(np.array([tgt]), inc)[0] > _oriented(np.array([start]), inc)[0]):
        raise TraceError(wl.path, f"target {tgt:g} is not better than the worst first-epoch value {start:g} "
                                  f"(the metric {'increases' if inc else 'decreases'}): nothing to train for")
    levels = start + (tgt - start) * np.arange(n_levels + 1) / n_levels
    cum = np.array([samples_to_levels(c.samples, c.metric, levels, start, inc) for c in curves])
    if not np.isfinite(cum[:, -1]).any():
        raise TraceError(wl.path, f"no measured run reaches the target {tgt:g} (best {max(_oriented(c.metric, inc).max() for c in curves):g})")
    log_ratio = np.array([_curve_log_ratio(c, row) for c, row in zip(curves, cum)])
    allm = np.concatenate([c.metric for c in curves])
    best = float(allm.max() if inc else allm.min())
    return ProgressModel(np.array([c.batch for c in curves], dtype=float), inc, start, tgt, levels, cum, log_ratio,
                         float(curves[0].batch), best, estimator_sigma(curves))
