"""BatchNorm running statistics of the whole global batch, for evaluation and checkpoints.

With per-rank BatchNorm (``torch.nn.BatchNorm*``, not SyncBatchNorm) each rank's running mean and
variance are moving averages over its *own* local batches. Evaluating on rank 0 then measures a
model whose normalisation was estimated from rank 0's share of the data only; with uneven batches a
rank holding 16 of 144 samples has statistics several times noisier than the global batch's. Live
(hetero6_bn, session 11), PPO runs whose rank 0 held 16-20 samples evaluated 0.73-0.76 on single
evaluations between 0.98s, and the mean of the last five fell 6 points below static.

``sync_batchnorm_stats`` replaces every rank's running statistics by those of the global batch:
the batch-size-weighted combination of the ranks' statistics (law of total variance)

    mean = sum_i w_i mean_i
    var  = sum_i w_i (var_i + (mean_i - mean)^2),      w_i = b_i / B

so a rank with more samples counts more, and with equal batches it is the plain average that
timm's ``distribute_bn`` takes before evaluation. One allgather of the buffers (a few kilobytes), at
evaluation time only: nothing per step. Training itself is unchanged (use SyncBatchNorm for that).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch.nn.modules.batchnorm import _BatchNorm


def combine_stats(means: np.ndarray, variances: np.ndarray, weights: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Global-batch (mean, var) from per-rank rows ``means``, ``variances`` (N, C) and weights (N,)
    (normalised here; a non-positive total raises)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size != means.shape[0] or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"combine_stats: weights {w.tolist()} must be {means.shape[0]} finite values >= 0 "
                         "with a positive sum")
    w = w / w.sum()
    mean = w @ means
    var = w @ (variances + (means - mean) ** 2)
    return mean, var


def batchnorm_layers(model: torch.nn.Module) -> list[_BatchNorm]:
    """The BatchNorm layers that keep running statistics (SyncBatchNorm's are already global)."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and not isinstance(m, torch.nn.SyncBatchNorm)
            and m.track_running_stats and m.running_mean is not None and m.running_var is not None]


def sync_batchnorm_stats(model: torch.nn.Module, comm: Any, weight: float) -> int:
    """Collective: every rank calls it with its share ``weight`` (its local batch) and every rank
    ends with the global-batch running statistics. ``comm.allgather_floats`` moves them (comm.py).
    Returns the number of layers synchronised (0: nothing was exchanged, on any rank, since every
    rank holds the same model)."""
    layers = batchnorm_layers(model)
    if not layers or comm.size < 2:
        return len(layers)
    sizes = [m.running_mean.numel() for m in layers]
    flat = torch.cat([torch.cat([m.running_mean.detach().double().reshape(-1), m.running_var.detach().double().reshape(-1)])
                      for m in layers]).numpy()
    rows = comm.allgather_floats([float(weight)] + flat.tolist())          # (N, 1 + 2 sum C)
    w, data = rows[:, 0], rows[:, 1:]
    off = 0
    with torch.no_grad():
        for m, c in zip(layers, sizes):
            mean, var = combine_stats(data[:, off:off + c], data[:, off + c:off + 2 * c], w)
            m.running_mean.copy_(torch.from_numpy(mean).reshape(m.running_mean.shape).to(m.running_mean.dtype))
            m.running_var.copy_(torch.from_numpy(var).reshape(m.running_var.shape).to(m.running_var.dtype))
            off += 2 * c
    return len(layers)
