"""Horovod elastic (Gloo) support: a TorchState that also commits, restores and syncs the
dynamix state, and re-plans for the new world after workers join or leave.

    dyn = Dynamix(model, optimizer, dataset_size=len(ds), base_batch=32)
    state = DynamixState(dyn)

    @hvd.elastic.run
    def train(state):
        for epoch in range(state.dyn.epoch, epochs):
            for idx in state.dyn.batches(epoch):
                ...; state.dyn.step(loss)
                state.commit()          # every step, or every few steps

    train(state)

Coverage stays exact-once in terms of *committed* steps: on a failure Horovod restores the
last commit (model, optimizer, and here the sampler position and plan), so the steps after it
are trained again, from the same permutation position, with a plan for the new world.
A worker that leaves gracefully (fewer slots discovered) interrupts everyone at a commit, so
nothing is lost; a worker that dies loses the step in flight, which the others redo.

Under elastic horovodrun (``HOROVOD_ELASTIC=1``) ``Dynamix`` skips its constructor broadcasts
by default (``broadcast_initial_state=None``): a worker joining later would otherwise run them
while the others run ``state.sync()``, and the job deadlocks. ``state.sync()`` broadcasts.
All slots on one host: pass ``horovodrun --network-interface lo``, or Horovod's elastic
driver waits for a second host to compare interfaces (and looks hung). Tested live in
tests/launch/test_elastic.py (leave, join, SIGKILL).
"""
from __future__ import annotations

from typing import Any

from horovod.torch import broadcast_object
from horovod.torch.elastic import TorchState

from dynamix_hvd.horovod import Dynamix


class DynamixState(TorchState):
    """``hvd.elastic.TorchState`` for the model and optimizer plus the Dynamix state."""

    def __init__(self, dyn: Dynamix, **kwargs: Any) -> None:
        self._dynamix = dyn
        self._dynamix_saved = dyn.state_dict()
        super().__init__(model=dyn.model, optimizer=dyn.hvd_optimizer, **kwargs)
        self.register_reset_callbacks([self._on_world_change])

    @property
    def dyn(self) -> Dynamix:
        return self._dynamix

    def save(self) -> None:
        super().save()
        if self._dynamix._current is None:  # between steps: the consumed position is exact
            self._dynamix_saved = self._dynamix.state_dict()

    def restore(self) -> None:
        super().restore()
        self._dynamix.load_state_dict(self._dynamix_saved, allow_resize=True)

    def sync(self) -> None:
        super().sync()
        self._dynamix_saved = broadcast_object(self._dynamix_saved, root_rank=0, name="dynamix.elastic_state")
        self._dynamix.load_state_dict(self._dynamix_saved, allow_resize=True)

    def _on_world_change(self) -> None:
        self._dynamix.reconnect()
        self._dynamix.adapt_to_world()
