"""Random controller (evaluation baseline): each rank moves by a random -k..k steps of
``step_frac`` x the mean batch every decision, the global batch kept constant."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.plan import PlanBounds
from dynamix_hvd.records import ClusterState


class RandomController(Controller):
    name = "random"
    uses_noise_scale = False

    def __init__(self, bounds: PlanBounds, base_batch: int, seed: int = 0, k: int = 2,
                 step_frac: float = 0.125) -> None:
        super().__init__(bounds, base_batch)
        self.rng = np.random.default_rng(seed)
        self.k, self.step_frac = int(k), float(step_frac)

    def decide(self, state: ClusterState) -> Sequence[float]:
        b = np.asarray(state.plan.batch_sizes, dtype=float)
        moves = self.rng.integers(-self.k, self.k + 1, b.size) * max(1.0, self.step_frac * b.mean())
        prop = np.clip(b + moves, max(self.bounds.min_batch, 1), self.bounds.max_batch)
        return list(prop * (b.sum() / prop.sum()))

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
