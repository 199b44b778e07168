"""Records of one decision interval, shared by the live hook and the simulator so that
controllers and the PPO agent see exactly the same state either way."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from dynamix_hvd.plan import Plan

NAN = float("nan")


@dataclass
class WorkerStats:
    """What one rank measured over the last decision interval (means per step).

    Absent metrics are NaN ("no data" is not zero)."""

    rank: int
    batch_size: int
    max_batch: int
    steps: int = 0
    compute_s: float = NAN        # forward + backward (+ emulated padding) per step
    step_s: float = NAN           # wall time per step
    comm_s: float = NAN           # time in the gradient allreduce incl. waiting for others
    allreduce_p50_s: float = NAN  # median data-allreduce duration from the PMPI recorder
    allreduce_bytes: float = NAN  # data-allreduce bytes per step
    nic_tx_Bps: float = NAN
    nic_rx_Bps: float = NAN
    link_capacity_Bps: float = NAN  # configured or estimated link capacity
    cpu_util: float = NAN         # 0..1, process
    gpu_util: float = NAN         # 0..1
    mem_headroom: float = NAN     # 0..1, free fraction of device / host memory
    grad_sqnorm: float = NAN      # |g_i|^2 of this rank's local mean gradient
    loss: float = NAN
    changed: int = 0              # 1: this rank's compute time changed during the interval (its
                                  # early-decision detector fired); compute_s covers the steps since
    compute_se_s: float = NAN     # standard error of compute_s (per-step scatter / sqrt(steps))

    @property
    def time_per_sample_s(self) -> float:
        return self.compute_s / self.batch_size if self.batch_size > 0 else NAN

    def to_array(self) -> np.ndarray:
        return np.array([float(v) for v in asdict(self).values()], dtype=np.float64)

    @staticmethod
    def field_names() -> list[str]:
        return list(WorkerStats.__dataclass_fields__)

    @staticmethod
    def from_array(a: np.ndarray) -> "WorkerStats":
        names = WorkerStats.field_names()
        vals: dict[str, Any] = dict(zip(names, (float(x) for x in a)))
        for k in ("rank", "batch_size", "max_batch", "steps", "changed"):
            vals[k] = int(vals[k])
        return WorkerStats(**vals)


@dataclass
class GlobalStats:
    """Job-wide statistics computed on rank 0 for the same interval."""

    step: int = 0
    progress: float = 0.0        # 0..1 of the training budget
    noise_scale: float = NAN     # B_simple (gradient noise scale), in samples
    noise_scale_rel_err: float = NAN  # its relative standard error (NaN: unknown, not to be acted on)
    noise_scale_stable: bool = False  # enough intervals and a small enough error to change B on
    noise_scale_room: float = 0.0     # without a stable estimate, B may still grow up to this (stats.growth_room)
    loss: float = NAN
    loss_trend: float = NAN      # relative change per interval (negative = improving)
    grad_var_trend: float = NAN  # relative change of the gradient variance estimate
    val_loss: float = NAN
    val_loss_trend: float = NAN
    samples_per_s: float = NAN


@dataclass
class ClusterState:
    """Everything a controller may look at when it decides the next plan."""

    plan: Plan
    workers: list[WorkerStats]
    glob: GlobalStats = field(default_factory=GlobalStats)
    last_action: np.ndarray | None = None   # live: each rank's batch change (samples) applied at the last decision

    @property
    def world_size(self) -> int:
        return len(self.workers)
