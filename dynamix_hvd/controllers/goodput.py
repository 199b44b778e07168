"""Goodput controller (Pollux style).

Per rank it fits a throughput model ``t_i(b) = alpha_i + beta_i * b`` (least squares over the
recent (b_i, compute_s) observations; ``alpha_i = 0`` until two distinct sizes were seen), adds
the communication time left exposed after overlap, and multiplies throughput by the statistical
efficiency ``E(B) = (phi + B_ref) / (phi + B)`` from the gradient noise scale ``phi =
glob.noise_scale``. It picks the global batch B from a grid around B_ref (= base_batch x N) that
maximises predicted goodput ``B / T(B) * E(B)`` and splits it so every rank's predicted compute
time is equal. Without a noise scale it keeps the current global batch. A switching threshold
(``switch_gain``) stops B from flapping between near-equal candidates.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.plan import PlanBounds
from dynamix_hvd.records import ClusterState

SCALES = (0.5, 0.63, 0.8, 1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0)


def fit_affine(b: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(alpha, beta) of t = alpha + beta * b, with alpha >= 0 and beta > 0."""
    ok = np.isfinite(b) & np.isfinite(t) & (b > 0) & (t > 0)
    b, t = b[ok], t[ok]
    if b.size == 0:
        return math.nan, math.nan
    if b.size >= 2 and np.ptp(b) > 0.05 * b.mean():
        beta, alpha = np.polyfit(b, t, 1)
        if beta > 0 and alpha >= 0:
            return float(alpha), float(beta)
        if beta > 0:
            return 0.0, float(np.sum(b * t) / np.sum(b * b))
    return 0.0, float(np.mean(t / b))


def equal_time_split(alpha: np.ndarray, beta: np.ndarray, total: float, lo: float, hi: np.ndarray) -> np.ndarray:
    """Continuous split of ``total`` equalising alpha_i + beta_i b_i within [lo, hi_i].

    Closed form T = (total - fixed + sum alpha/beta) / sum 1/beta over the unclipped ranks,
    repeated after clipping the ranks that leave [lo, hi_i] (at most N rounds, usually 1-2)."""
    n = alpha.size
    b = np.empty(n)
    free = np.ones(n, dtype=bool)
    hi = np.asarray(hi, dtype=float)
    for _ in range(n + 1):
        fixed = float(b[~free].sum()) if (~free).any() else 0.0
        inv = 1.0 / beta[free]
        t = (total - fixed + float((alpha[free] * inv).sum())) / float(inv.sum())
        cand = (t - alpha[free]) * inv
        idx = np.flatnonzero(free)
        low, high = cand < lo, cand > hi[idx]
        if not (low.any() or high.any()):
            b[idx] = cand
            break
        b[idx[low]] = lo
        b[idx[high]] = hi[idx[high]]
        free[idx[low | high]] = False
        if not free.any():
            break
    return b


class GoodputController(Controller):
    name = "goodput"

    def __init__(self, bounds: PlanBounds, base_batch: int, history: int = 16, switch_gain: float = 0.03,
                 scales: Sequence[float] = SCALES) -> None:
        super().__init__(bounds, base_batch)
        self.history = int(history)
        self.switch_gain = float(switch_gain)
        self.scales = tuple(float(s) for s in scales)
        self.obs: list[deque] = []
        self.last_fit: dict[str, Any] = {}

    def _record(self, state: ClusterState) -> None:
        if len(self.obs) != state.world_size:
            self.obs = [deque(maxlen=self.history) for _ in range(state.world_size)]
        for i, w in enumerate(state.workers):
            if math.isfinite(w.compute_s) and w.batch_size > 0:
                self.obs[i].append((float(w.batch_size), float(w.compute_s)))

    def predict(self, alpha: np.ndarray, beta: np.ndarray, B: float, comm: float, overlap: float,
                phi: float, b_ref: float) -> tuple[float, np.ndarray]:
        lo = max(self.bounds.min_batch, 1)
        b = equal_time_split(alpha, beta, B, lo, np.asarray(self.bounds.max_batch, dtype=float))
        tc = float(np.max(alpha + beta * b))
        step = tc + max(comm - overlap * tc, 0.05 * comm)
        eff = (phi + b_ref) / (phi + b.sum()) if math.isfinite(phi) and phi > 0 else 1.0
        return b.sum() / step * eff, b

    def decide(self, state: ClusterState) -> Sequence[float]:
        self._record(state)
        current = np.asarray(state.plan.batch_sizes, dtype=float)
        n = state.world_size
        fits = [fit_affine(np.array([p[0] for p in d]), np.array([p[1] for p in d])) for d in self.obs]
        alpha = np.array([f[0] for f in fits])
        beta = np.array([f[1] for f in fits])
        if not np.isfinite(beta).any():
            return list(current)
        alpha = np.where(np.isfinite(alpha), alpha, np.nanmean(alpha))
        beta = np.where(np.isfinite(beta), beta, np.nanmean(beta))
        compute = np.array([w.compute_s for w in state.workers])
        step = np.nanmedian([w.step_s for w in state.workers])
        comm = np.nanmedian([w.allreduce_p50_s for w in state.workers])
        max_c = np.nanmax(compute) if np.isfinite(compute).any() else math.nan
        if not math.isfinite(comm):
            comm = max(0.0, step - max_c) if math.isfinite(step) and math.isfinite(max_c) else 0.0
        exposed = step - max_c if math.isfinite(step) and math.isfinite(max_c) else comm
        overlap = float(np.clip((comm - exposed) / max_c, 0.0, 1.0)) if max_c and math.isfinite(max_c) and max_c > 0 else 0.0
        phi = float(state.glob.noise_scale)
        b_ref = float(self.base_batch * n)
        lo = max(self.bounds.min_global_batch, self.bounds.min_batch * n, 1)
        hi = float(sum(self.bounds.max_batch))
        if self.bounds.max_global_batch is not None:
            hi = min(hi, self.bounds.max_global_batch)
        B_now = float(current.sum())
        if math.isfinite(phi) and phi > 0:
            cands = sorted({float(np.clip(s * b_ref, lo, hi)) for s in self.scales} | {B_now})
        else:
            cands = [B_now]
        scored = [(self.predict(alpha, beta, B, comm, overlap, phi, b_ref), B) for B in cands]
        (g_now, b_now) = self.predict(alpha, beta, B_now, comm, overlap, phi, b_ref)
        (g_best, b_best), B_best = max(scored, key=lambda s: s[0][0])
        self.last_fit = {"alpha": alpha.tolist(), "beta": beta.tolist(), "comm": comm, "overlap": overlap,
                         "B": B_best, "goodput": g_best}
        if g_best < (1.0 + self.switch_gain) * g_now:
            return list(b_now)
        return list(b_best)

    def state_dict(self) -> dict[str, Any]:
        return {"obs": [list(d) for d in self.obs]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.obs = [deque((tuple(p) for p in d), maxlen=self.history) for d in state.get("obs", [])]
