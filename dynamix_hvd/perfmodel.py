"""The performance model, each formula once: used by the goodput controller, the PPO anchor,
online fine-tuning, the reward, the (model-based) simulator and the emulated cluster.

- ``efficiency(B, B_ref, phi)``: Pollux's statistical efficiency E(B) = (phi + B_ref)/(phi + B),
  the fraction of per-sample progress kept at global batch B relative to B_ref, from the gradient
  noise scale phi (McCandlish et al. 2018); 1 when phi is unknown.
- ``exposed_comm(a, compute, overlap)``: allreduce time left after overlapping a fraction
  ``overlap`` of it with the slowest rank's backward: max(a - overlap x compute, 0.05 a) (some
  of the last bucket is always exposed).
- ``step_time(compute, a, overlap, overhead)``: slowest compute + exposed communication + overhead.
- ``fit_overlap(compute, exposed, batches)``: the overlap as the decisions' history measures it,
  minus the least-squares slope of the exposed time against the slowest rank's compute, once the
  global batches run span ``OVERLAP_SPAN`` (Pollux fits its sync term to the iteration times of
  every configuration it has run; one interval cannot tell how much of the allreduce a longer
  backward would hide).
- ``ring_allreduce_s(nbytes, bw, lat)``: a ring allreduce over N ranks on a star network (each rank
  one link to a switch): 2(N-1)/N x nbytes over the slowest link, plus 2(N-1) rounds whose hop
  i -> i+1 crosses two links (lat_i + lat_{i+1}) and is bounded by the slowest hop.

The replay simulator (``dynamix_hvd.replay``) does not use these: its ground truth is measured.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def efficiency(global_batch: float, ref_batch: float, noise_scale: float) -> float:
    """E(B) = (phi + B_ref) / (phi + B); 1.0 when the noise scale is unknown (NaN or <= 0)."""
    if not (math.isfinite(noise_scale) and noise_scale > 0):
        return 1.0
    return (noise_scale + ref_batch) / (noise_scale + global_batch)


def efficiency_array(global_batch: np.ndarray, ref_batch: float, noise_scale: float) -> np.ndarray | float:
    """``efficiency`` for an array of global batches (1.0 when the noise scale is unknown)."""
    if not (math.isfinite(noise_scale) and noise_scale > 0):
        return 1.0
    return (noise_scale + ref_batch) / (noise_scale + np.asarray(global_batch, dtype=float))


def exposed_comm(allreduce_s: float | np.ndarray, compute_s: float | np.ndarray,
                 overlap: float) -> float | np.ndarray:
    """Communication left after overlap: max(a - overlap x compute, 0.05 a)."""
    return np.maximum(allreduce_s - overlap * compute_s, 0.05 * allreduce_s)


def step_time(compute_s: float | np.ndarray, allreduce_s: float, overlap: float,
              overhead_s: float = 0.0) -> float | np.ndarray:
    """Step time from the slowest rank's compute: compute + exposed communication + overhead."""
    return compute_s + exposed_comm(allreduce_s, compute_s, overlap) + overhead_s


OVERLAP_SPAN = 0.2      # fit_overlap: the largest global batch run must exceed the smallest by this share


def fit_overlap(compute_s: Sequence[float], exposed_s: Sequence[float], global_batches: Sequence[float],
                span: float = OVERLAP_SPAN) -> float | None:
    """Overlap in [0, 1] fitted over (slowest compute, exposed communication) pairs measured at
    several global batches: ``-slope`` of ``exposed = a - overlap x compute`` by least squares,
    clipped to [0, 1]. None (not identified) with fewer than two finite pairs, when the global
    batches do not span ``span`` (max > (1 + span) x min) or when the compute times do not differ."""
    c, e, B = (np.asarray(x, dtype=float) for x in (compute_s, exposed_s, global_batches))
    ok = np.isfinite(c) & np.isfinite(e) & np.isfinite(B) & (B > 0)
    c, e, B = c[ok], e[ok], B[ok]
    if c.size < 2 or not B.max() > (1.0 + span) * B.min():
        return None
    dc = c - c.mean()
    var = float(dc @ dc)
    if not var > 0:
        return None
    return float(np.clip(-(dc @ (e - e.mean())) / var, 0.0, 1.0))


def ring_allreduce_s(nbytes: float, bandwidth_Bps: Sequence[float], latency_s: Sequence[float]) -> float:
    """Ring allreduce time on a star network (see the module doc); 0 for one rank."""
    lat = [float(x) for x in latency_s]
    n = len(lat)
    if n < 2:
        return 0.0
    hop = max(lat[i] + lat[(i + 1) % n] for i in range(n))
    transfer = 2.0 * (n - 1) / n * nbytes / float(min(bandwidth_Bps)) if nbytes > 0 else 0.0
    return transfer + 2.0 * (n - 1) * hop
