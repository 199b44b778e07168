"""Oracle controller: the global batch split in proportion to the TRUE per-rank speeds.

It is the balance limit a measured controller can at best reach. The truth comes from
``speed_fn()`` (per-rank samples/s, e.g. the emulated scenario's configured speeds, which may
change over time); ``global_batch`` defaults to ``base_batch * N``.
"""
from __future__ import annotations

from typing import Callable, Sequence

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.plan import PlanBounds, split_global
from dynamix_hvd.records import ClusterState


class OracleController(Controller):
    name = "oracle"
    uses_noise_scale = False
    exact = True

    def __init__(self, bounds: PlanBounds, base_batch: int,
                 speed_fn: Callable[[], Sequence[float]] | None = None,
                 global_batch: int | None = None) -> None:
        super().__init__(bounds, base_batch)
        if speed_fn is None:
            raise ValueError("the oracle controller needs speed_fn=callable returning per-rank samples/s "
                             "(the scenario's true speeds)")
        self.speed_fn = speed_fn
        self.global_batch = global_batch

    def decide(self, state: ClusterState) -> Sequence[float]:
        speeds = [float(s) for s in self.speed_fn()]
        if len(speeds) != state.world_size:
            raise ValueError(f"speed_fn returned {len(speeds)} speeds for {state.world_size} ranks")
        total = self.global_batch or self.base_batch * state.world_size
        return [float(b) for b in split_global(total, speeds, self.bounds)]
