"""Per-rank step time from the measured step / sync times (ground truth of the replay simulator).

For world size N the replay uses the placement that spreads N replicas over the most nodes (one
GPU per node where measured; the ranks of a heterogeneous cluster sit on different machines);
several placements of that shape (e.g. 1123 and 1213) are combined by the median per local batch.
At each measured local batch b of that placement:

    compute_N(b) = step_time - sync_time,    sync_N(b) = sync_time

World sizes between two measured replica counts interpolate both linearly in N; below the smallest
measured count the smallest is used; above the largest, compute is the largest count's and sync is
extrapolated as ``sync(N_max) + slope x log2(N / N_max)``, slope = least-squares fit of the median
sync time against log2(replicas) over every measured count >= 2 (clipped at >= 0).

Local batches are taken on the grid of every local batch measured anywhere in the directory, from
1 to the memory cap = the largest measured local batch. Outside a placement's own measured range:
below it, linear extrapolation of the first segment (slope clipped at >= 0) floored at
proportional-to-b; above it, the
last value scaled like the median compute over all placements at those batches; sync clamped.

Rank i with speed multiplier h_i (hardware factor x fluctuation) and local batch b takes
``tau_i(b)`` = the piecewise-linear interpolation over the grid of ``h_i compute_N + sync_N``;
the synchronous step takes ``max_i tau_i(b_i)``. At equal batches, h = 1 and a measured (N, b) this
is the measured step time. The measurements are not always monotone in b (ncf: 36.4 ms at 513,
34.6 ms at 725 for 16 replicas); the physics keeps them as measured, and the oracle's split uses
their running maximum (``envelope``), which is never below the true time.

That is the ``"rank"`` sync model: each rank is charged the sync measured at *its own* local batch.
The measured sync is the allreduce time a longer backward did not hide (cifar10, 8 replicas: 150 ms
at 32 samples per rank, 6 ms at 513), and an allreduce is collective: its buckets leave when the
slowest rank has produced them, so what stays exposed depends on how long the pacing rank's backward
lasts in wall time, not on how many samples it holds. A slow rank (h = 4) at a small batch computes
as long as a fast one at a large batch, and hides as much. The ``"collective"`` model charges that:
``tau_i = h_i compute_N(b_i) + S``, with S the sync measured at the local batch b_eq whose (h = 1)
compute lasts as long as the pacing rank's, T_c = max_i h_i compute_N(b_i): b_eq = the compute's
running maximum inverted at T_c, and never below the pacing rank's own batch (where the measured
compute is not monotone in b, as ncf's, the inversion lands earlier; a rank at h = 1 then keeps the
sync measured at its own batch). At h = 1 and equal batches it is the measured step time, as the
"rank" model is; on a heterogeneous cluster the equal-compute split is the equal-time split.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dynamix_hvd.traces.pollux import ThroughputTable


def _median_by(keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = np.unique(keys)
    return u, np.array([np.median(vals[keys == k]) for k in u])


def _on_grid(b: np.ndarray, v: np.ndarray, grid: np.ndarray, pool_b: np.ndarray, pool_v: np.ndarray,
             proportional_floor: bool) -> np.ndarray:
    out = np.interp(grid, b, v)
    lo, hi = grid < b[0], grid > b[-1]
    if lo.any():
        slope = max(0.0, (v[1] - v[0]) / (b[1] - b[0])) if b.size > 1 else v[0] / b[0]
        ext = v[0] - slope * (b[0] - grid[lo])
        out[lo] = np.maximum(ext, v[0] * grid[lo] / b[0]) if proportional_floor else v[0]
    if hi.any() and proportional_floor:
        ref = np.interp(b[-1], pool_b, pool_v)
        out[hi] = v[-1] * np.interp(grid[hi], pool_b, pool_v) / ref
    return out


@dataclass(frozen=True)
class Link:
    """The links' effect on the measured sync time: ``mult`` x measured + ``add`` seconds (a
    scenario's link changes, ``replay/scenario.py``: a captured workload adds the wire time it
    did not measure, another workload's sync is scaled)."""

    mult: float = 1.0
    add: float = 0.0

    def apply(self, sync: np.ndarray | float) -> np.ndarray | float:
        return sync * self.mult + self.add

    @staticmethod
    def mean(links: "list[Link]", weights: np.ndarray) -> "Link":
        """The weighted mean link (e.g. over an interval's chunks, weighted by their steps)."""
        w = np.asarray(weights, dtype=float)
        return Link(float(w @ np.array([x.mult for x in links]) / w.sum()),
                    float(w @ np.array([x.add for x in links]) / w.sum()))


NO_LINK = Link()
SYNC_MODELS = ("rank", "collective")   # ThroughputModel.sync_model: whose compute hides the allreduce


@dataclass
class ThroughputModel:
    """Compute and sync per local batch on a grid, for one world size."""

    n: int
    grid: np.ndarray       # (L,) local batches, grid[0] = 1, grid[-1] = cap
    compute: np.ndarray    # (L,)
    sync: np.ndarray       # (L,)
    idx: np.ndarray        # (cap+1,) segment index of each integer local batch
    w: np.ndarray          # (cap+1,) position inside the segment
    timing_sigma: float    # spread of repeated measurements (relative), used as timing noise
    sync_model: str = "rank"   # SYNC_MODELS: "rank" (each rank's own batch) or "collective" (the pacing compute)

    def __post_init__(self) -> None:
        if self.sync_model not in SYNC_MODELS:
            raise ValueError(f"sync_model={self.sync_model!r}: expected one of {SYNC_MODELS}")
        self.cap = int(self.grid[-1])
        # the compute's running maximum, made strictly increasing, to invert: the local batch whose
        # compute takes T (the "collective" model's exposed sync)
        c = np.maximum.accumulate(np.asarray(self.compute, dtype=float))
        self._c_inv = c + np.arange(c.size) * (1e-12 * max(1.0, float(c.max())))

    def envelope(self, h: np.ndarray) -> np.ndarray:
        """(..., L) running max of h compute + sync for multipliers h of shape (...) ("rank" model)."""
        h = np.asarray(h, dtype=float)
        return np.maximum.accumulate(h[..., None] * self.compute + self.sync, axis=-1)

    def exposed(self, comp: np.ndarray, b: np.ndarray) -> np.ndarray:
        """("collective") The exposed sync (..., 1) of ranks with compute times ``comp`` (..., N) at local
        batches ``b`` (broadcastable): the sync measured at the batch whose h = 1 compute lasts as long
        as the pacing rank's, and not below that rank's own batch."""
        comp = np.asarray(comp, dtype=float)
        p = np.argmax(comp, axis=-1)[..., None]
        b_p = np.take_along_axis(np.broadcast_to(np.asarray(b, dtype=float), comp.shape), p, axis=-1)
        b_eq = np.maximum(b_p, np.interp(np.take_along_axis(comp, p, axis=-1), self._c_inv, self.grid))
        return np.interp(b_eq, self.grid, self.sync)

    def rank_times(self, h: np.ndarray, b: np.ndarray, link: Link = NO_LINK) -> np.ndarray:
        """tau_i(b_i) for multipliers h (C, N) (or (N,)) and integer local batches b (N,); the sync
        time is the measured one under ``link`` (``sync_model``)."""
        if self.sync_model == "collective":
            comp = self.compute_times(h, b)
            return comp + self.sync_times(comp, b, link)
        b = np.asarray(b, dtype=np.int64)
        j, w = self.idx[b], self.w[b]
        r = self._ranks(b.size)
        U = np.asarray(h, dtype=float)[..., None] * self.compute + (self.sync if link == NO_LINK else link.apply(self.sync))
        u0, u1 = U[..., r, j], U[..., r, j + 1]
        return u0 + w * (u1 - u0)

    def compute_times(self, h: np.ndarray, b: np.ndarray) -> np.ndarray:
        """h_i compute_N(b_i) for multipliers h (C, N) (or (N,)) and integer local batches b (N,)."""
        b = np.asarray(b, dtype=np.int64)
        j, w = self.idx[b], self.w[b]
        return np.asarray(h, dtype=float) * (self.compute[j] + w * (self.compute[j + 1] - self.compute[j]))

    def sync_times(self, comp: np.ndarray, b: np.ndarray, link: Link = NO_LINK) -> np.ndarray:
        """("collective") Every rank's exposed sync for per-rank compute times ``comp`` (..., N) at local
        batches ``b``: the pacing rank's (``exposed``) under ``link``, the same for all ranks."""
        comp = np.asarray(comp, dtype=float)
        return np.broadcast_to(link.apply(self.exposed(comp, b)), comp.shape)

    def equal_time(self, h: np.ndarray, totals: np.ndarray, link: Link = NO_LINK) -> tuple[np.ndarray, np.ndarray]:
        """Step time and continuous split of each global batch in ``totals`` that equalises the ranks'
        times at multipliers ``h`` (N,) under ``link``: ("rank") h compute + L sync + a = L (h/L compute
        + sync) + a, so the split of h/L is the same and its time is scaled by L and shifted by a;
        ("collective") the equal-compute split, its time T_c + S(T_c)."""
        h = np.asarray(h, dtype=float)
        if self.sync_model == "collective":
            Tc, cont = equal_time_totals(np.maximum.accumulate(h[:, None] * self.compute, axis=-1), self.grid, totals)
            comp = h * np.stack([np.interp(cont[:, i], self.grid, self.compute) for i in range(h.size)], axis=1)
            return Tc + link.apply(self.exposed(comp, cont))[:, 0], cont
        T, cont = equal_time_totals(self.envelope(h / link.mult), self.grid, totals)
        return link.apply(T), cont

    def _ranks(self, n: int) -> np.ndarray:
        r = getattr(self, "_r", None)
        if r is None or r.size != n:
            r = self._r = np.arange(n)
        return r

    def sync_at(self, b: np.ndarray) -> np.ndarray:
        b = np.asarray(b, dtype=int)
        j, w = self.idx[b], self.w[b]
        return self.sync[j] + w * (self.sync[j + 1] - self.sync[j])


def build_throughput(t: ThroughputTable, n: int) -> ThroughputModel:
    if n < 1:
        raise ValueError(f"world size {n}: must be >= 1")
    comp_all = np.maximum(t.step_time - t.sync_time, 0.01 * t.step_time)
    pool_b, pool_c = _median_by(t.local_bsz, comp_all)
    cap = int(round(pool_b[-1]))
    grid = np.unique(np.concatenate([[1.0], np.round(pool_b)]))
    if grid.size < 2:
        grid = np.array([1.0, 2.0])
        cap = 2
    reps = np.unique(t.num_replicas)
    tables: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    med_sync = []
    for r in reps:
        m = t.num_replicas == r
        most = m & (t.num_nodes == t.num_nodes[m].max())
        b, c = _median_by(t.local_bsz[most], comp_all[most])
        _, s = _median_by(t.local_bsz[most], t.sync_time[most])
        tables[float(r)] = (_on_grid(b, c, grid, pool_b, pool_c, True), _on_grid(b, s, grid, pool_b, pool_c, False))
        med_sync.append(float(np.median(s)))
    rr = reps.astype(float)
    if n <= rr[0]:
        comp, sync = tables[rr[0]]
    elif n >= rr[-1]:
        comp, sync = tables[rr[-1]]
        if n > rr[-1]:
            sel = rr >= 2
            slope = 0.0
            if sel.sum() >= 2:
                slope = max(0.0, float(np.polyfit(np.log2(rr[sel]), np.array(med_sync)[sel], 1)[0]))
            sync = sync + slope * math.log2(n / rr[-1])
    else:
        k = int(np.searchsorted(rr, n))
        a, b_ = rr[k - 1], rr[k]
        wgt = (n - a) / (b_ - a)
        comp = (1 - wgt) * tables[a][0] + wgt * tables[b_][0]
        sync = (1 - wgt) * tables[a][1] + wgt * tables[b_][1]
    bs = np.arange(cap + 1, dtype=float)
    idx = np.clip(np.searchsorted(grid, bs, side="right") - 1, 0, grid.size - 2)
    w = np.clip((bs - grid[idx]) / (grid[idx + 1] - grid[idx]), 0.0, 1.0)
    # repeat-measurement spread: robust relative spread of compute at the same local batch
    spreads = [np.subtract(*np.percentile(comp_all[t.local_bsz == b], [75, 25])) / 1.349 / np.median(comp_all[t.local_bsz == b])
               for b in pool_b if (t.local_bsz == b).sum() >= 4]
    sigma = float(np.clip(np.median(spreads), 0.005, 0.2)) if spreads else 0.03
    return ThroughputModel(n, grid, np.asarray(comp, float), np.asarray(sync, float), idx.astype(np.int64), w, sigma)


def equal_time_totals(U: np.ndarray, grid: np.ndarray, totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Continuous split equalising the ranks' times: for each total, (step time, (N,) batches).

    ``U`` (N, L) are the ranks' non-decreasing times on ``grid``; rank i's batch at time T is the
    largest b with tau_i(b) <= T (at least grid[0]); the step time is max(T, max_i U_i[0])."""
    n, L = U.shape
    Us = U + np.arange(L) * (1e-12 * max(1.0, float(U.max())))       # strictly increasing rows
    X = np.unique(Us.ravel())
    S = np.zeros(X.size)
    for i in range(n):
        S += np.interp(X, Us[i], grid)
    totals = np.asarray(totals, dtype=float)
    k = np.clip(np.searchsorted(S, totals, side="left"), 1, X.size - 1)
    dS = S[k] - S[k - 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        T = np.where(dS > 0, X[k - 1] + (totals - S[k - 1]) * (X[k] - X[k - 1]) / dS, X[k])
    T = np.where(totals <= S[0], X[0], T)
    b = np.empty((totals.size, n))
    for i in range(n):
        b[:, i] = np.interp(T, Us[i], grid)
    return np.maximum(T, Us[:, 0].max()), b
