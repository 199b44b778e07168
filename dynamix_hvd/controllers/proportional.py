"""Proportional controller (OmniLearn / LB-BSP style).

Measures each rank's compute time per sample, smooths it with an EMA, and splits the current
global batch in proportion to the measured speeds (1 / time per sample), so every rank's compute
phase takes the same time. A switching threshold (``threshold``: re-split only when the
predicted compute times differ by more than this fraction) keeps it from flapping on noise.
Communication is not modelled: the global batch is left unchanged.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.plan import PlanBounds, split_global
from dynamix_hvd.records import ClusterState


class ProportionalController(Controller):
    name = "proportional"

    def __init__(self, bounds: PlanBounds, base_batch: int, ema: float = 0.5, threshold: float = 0.05) -> None:
        super().__init__(bounds, base_batch)
        if not 0 < ema <= 1:
            raise ValueError(f"ema={ema}: must be in (0, 1]")
        self.ema, self.threshold = float(ema), float(threshold)
        self.tps: list[float] | None = None

    def decide(self, state: ClusterState) -> Sequence[float]:
        current = [float(b) for b in state.plan.batch_sizes]
        n = state.world_size
        if self.tps is None or len(self.tps) != n:
            self.tps = [math.nan] * n
        for i, w in enumerate(state.workers):
            t = w.time_per_sample_s
            if math.isfinite(t) and t > 0:
                self.tps[i] = t if not math.isfinite(self.tps[i]) else self.ema * t + (1 - self.ema) * self.tps[i]
        tps = np.asarray(self.tps)
        if not np.isfinite(tps).any():
            return current
        tps = np.where(np.isfinite(tps), tps, np.nanmean(tps))
        # predicted compute times under the current split: re-split only if they differ enough
        pred = tps * np.asarray(current)
        if pred.max() <= (1.0 + self.threshold) * pred.mean():
            return current
        return [float(b) for b in split_global(int(round(sum(current))), list(1.0 / tps), self.bounds)]

    def state_dict(self) -> dict[str, Any]:
        return {"tps": self.tps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tps = state.get("tps")

    def update_bounds(self, bounds: PlanBounds) -> None:
        self.bounds = bounds
