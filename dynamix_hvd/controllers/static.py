"""Static controller: every rank keeps ``base_batch`` (what plain Horovod does)."""
from __future__ import annotations

from typing import Sequence

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.records import ClusterState


class StaticController(Controller):
    name = "static"
    uses_noise_scale = False

    def decide(self, state: ClusterState) -> Sequence[float]:
        return [float(self.base_batch)] * state.world_size
