"""From a policy action to proposed per-rank batch sizes (used by the env and the PPO controller).

Action = one level per worker in -k..+k (``n_levels = 2k + 1``) and one global-batch scale index.
One level moves a worker by ``step_frac`` x the current mean per-worker batch. The per-worker
moves change the *split*; the global scale changes the *total*: after the moves the proposal is
rescaled to sum to the (scaled) target global batch. Bounds, quantisation and the deadband are
applied afterwards by ``plan.next_plan`` as for every controller.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from dynamix_hvd.plan import PlanBounds


@dataclass(frozen=True)
class ActionConfig:
    n_levels: int = 5                                   # per-worker levels -2..+2
    step_frac: float = 0.125                            # one level = 1/8 of the mean per-worker batch
    global_scales: tuple[float, ...] = (0.8, 1.0, 1.25)  # global-batch multipliers; (1.0,) disables

    def __post_init__(self) -> None:
        object.__setattr__(self, "global_scales", tuple(float(s) for s in self.global_scales))
        if self.n_levels < 1 or self.n_levels % 2 == 0:
            raise ValueError(f"n_levels={self.n_levels}: must be odd and >= 1 (levels -k..k)")
        if not 0 < self.step_frac <= 1:
            raise ValueError(f"step_frac={self.step_frac}: must be in (0, 1]")
        if 1.0 not in self.global_scales or any(s <= 0 for s in self.global_scales):
            raise ValueError(f"global_scales={self.global_scales}: must be > 0 and contain 1.0")

    @property
    def k(self) -> int:
        return self.n_levels // 2

    @property
    def noop_global(self) -> int:
        return self.global_scales.index(1.0)

    def to_dict(self) -> dict:
        return {"n_levels": self.n_levels, "step_frac": self.step_frac, "global_scales": list(self.global_scales)}

    @staticmethod
    def from_dict(d: Mapping) -> "ActionConfig":
        return ActionConfig(int(d.get("n_levels", 5)), float(d.get("step_frac", 0.125)),
                            tuple(d.get("global_scales", (0.8, 1.0, 1.25))))


def global_batch_limits(bounds: PlanBounds) -> tuple[float, float]:
    n = len(bounds.max_batch)
    lo = max(bounds.min_global_batch, bounds.min_batch * n, 1)
    hi = float(sum(bounds.max_batch))
    if bounds.max_global_batch is not None:
        hi = min(hi, bounds.max_global_batch)
    return float(lo), float(hi)


def proposal_from_action(
    sizes: Sequence[int],
    levels: np.ndarray,
    global_index: int,
    target_global: float,
    config: ActionConfig,
    bounds: PlanBounds,
) -> tuple[np.ndarray, float]:
    """Proposed sizes (floats) and the new target global batch.

    ``levels`` are signed (-k..k), one per worker."""
    b = np.asarray(sizes, dtype=np.float64)
    lv = np.clip(np.asarray(levels, dtype=np.float64).reshape(-1)[: b.size], -config.k, config.k)
    if lv.size != b.size:
        raise ValueError(f"{lv.size} action levels for {b.size} workers")
    scale = config.global_scales[int(np.clip(global_index, 0, len(config.global_scales) - 1))]
    lo, hi = global_batch_limits(bounds)
    target = float(np.clip(target_global * scale, lo, hi))
    step = max(1.0, config.step_frac * b.mean())
    caps = np.asarray(bounds.max_batch, dtype=np.float64)
    prop = np.clip(b + lv * step, max(bounds.min_batch, 1), caps)
    prop = prop * (target / prop.sum())
    return prop, target
