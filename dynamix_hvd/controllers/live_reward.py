"""The training reward measured live, for online fine-tuning (``controllers.finetune``): the terms
of ``dynamix_hvd.reward`` on a decision's ``ClusterState``, with an estimate of the oracle goodput
G* (``reference_goodput``) since the true speeds are unknown outside the simulator."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dynamix_hvd.controllers.split import equal_time_split
from dynamix_hvd.perfmodel import efficiency, exposed_comm
from dynamix_hvd.plan import PlanBounds
from dynamix_hvd.records import ClusterState
from dynamix_hvd.reward import RewardWeights, reward_terms


def reference_goodput(state: ClusterState, ref_global_batch: float, bounds: PlanBounds | None = None) -> float:
    """Estimated goodput of the equal-compute-time split of ``ref_global_batch``: the live stand-in
    for the simulator's oracle goodput G* in the reward's efficiency term.

    Per rank the time per sample is the measured ``compute_s / batch_size`` (no fixed cost). The
    step time of that split is modelled as the goodput controller does: allreduce time ``a`` =
    median ``allreduce_p50_s``, overlap = (a - exposed) / max compute with exposed = ``step_s`` -
    max ``compute_s`` measured now, step = compute + max(a - overlap x compute, 0.05 a). So G* does
    not move with the current plan (only with the cluster). Without an allreduce time the exposed
    communication is taken as measured. NaN when no rank has a usable compute time."""
    b = np.array([w.batch_size for w in state.workers], dtype=float)
    c = np.array([w.compute_s for w in state.workers], dtype=float)
    ok = np.isfinite(c) & (c > 0) & (b > 0)
    if not ok.any() or ref_global_batch <= 0:
        return math.nan
    beta = np.where(ok, c / np.maximum(b, 1.0), np.nan)
    beta = np.where(ok, beta, np.nanmean(beta))
    n = b.size
    lo = float(max(bounds.min_batch, 1)) if bounds is not None else 1.0
    caps = np.asarray(bounds.max_batch, dtype=float) if bounds is not None and len(bounds.max_batch) == n \
        else np.full(n, np.inf)
    split = equal_time_split(np.zeros(n), beta, float(ref_global_batch), lo, caps)
    tc = float(np.max(beta * split))
    step = _median([w.step_s for w in state.workers])
    max_c = float(np.nanmax(c))
    exposed = max(step - max_c, 0.0) if math.isfinite(step) else 0.0
    comm = _median([w.allreduce_p50_s for w in state.workers])
    if math.isfinite(comm) and comm > 0 and max_c > 0:
        overlap = min(max((comm - exposed) / max_c, 0.0), 1.0)
        exposed = float(exposed_comm(comm, tc, overlap))
    t = tc + exposed
    return float(ref_global_batch) / t if t > 0 else math.nan


def _median(xs: Sequence[float]) -> float:
    a = np.asarray(xs, dtype=float)
    a = a[np.isfinite(a)]
    return float(np.median(a)) if a.size else math.nan


def live_reward(state: ClusterState, prev_sizes: Sequence[float], *, ref_global_batch: float,
                weights: RewardWeights = RewardWeights(), bounds: PlanBounds | None = None,
                reference: float | None = None) -> dict[str, float]:
    """The training reward (``dynamix_hvd.reward.reward_terms``) of the interval ``state`` describes,
    whose batch sizes followed ``prev_sizes``.

    Goodput G = samples/s x E(B) exactly as the simulator computes it; G* is ``reference`` if given
    (in the simulator: the oracle goodput, which reproduces ``sim_reward`` exactly) and otherwise
    ``reference_goodput``. Missing compute or step times contribute no idle time."""
    sizes = np.array([w.batch_size for w in state.workers], dtype=float)
    B = float(sizes.sum())
    step_s = _median([w.step_s for w in state.workers])
    thr = state.glob.samples_per_s
    if not (math.isfinite(thr) and thr > 0):
        thr = B / step_s if math.isfinite(step_s) and step_s > 0 else math.nan
    goodput = thr * efficiency(B, float(ref_global_batch), state.glob.noise_scale)
    ref = reference if reference is not None else reference_goodput(state, ref_global_batch, bounds)
    if not (math.isfinite(ref) and ref > 0):
        ref = goodput                     # no estimate: efficiency term 1
    c = np.array([w.compute_s for w in state.workers], dtype=float)
    c = np.where(np.isfinite(c), c, np.nanmax(c) if np.isfinite(c).any() else 0.0)
    return reward_terms(
        goodput=goodput if math.isfinite(goodput) else 0.0, reference_goodput=ref if math.isfinite(ref) else 0.0,
        compute_s=c, step_s=step_s if math.isfinite(step_s) else 0.0, sizes=sizes, prev_sizes=prev_sizes,
        noise_scale=state.glob.noise_scale, grad_var_trend=state.glob.grad_var_trend,
        val_loss_trend=state.glob.val_loss_trend, weights=weights)
