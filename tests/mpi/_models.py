"""Small deterministic models, data and a scripted controller shared by the MPI tests."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.plan import PlanBounds
from dynamix_hvd.records import ClusterState


def make_data(n: int = 600, d: int = 12, classes: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, classes, generator=g)
    y = (x @ w + 0.5 * torch.randn(n, classes, generator=g)).argmax(1)
    return x, y


def make_model(d: int = 12, classes: int = 4, seed: int = 1) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.Tanh(), torch.nn.Linear(16, classes))


class ScriptedController(Controller):
    """Proposes a fixed sequence of plans (one per decision), for tests only."""

    name = "scripted"

    def __init__(self, bounds: PlanBounds, base_batch: int, script: Sequence[Sequence[int]]) -> None:
        super().__init__(bounds, base_batch)
        self.script = [list(s) for s in script]
        self.calls = 0

    def decide(self, state: ClusterState) -> Sequence[float]:
        i = min(self.calls, len(self.script) - 1)
        self.calls += 1
        return self.script[i]

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = int(state["calls"])


def uneven_script(world: int, n_plans: int = 4, seed: int = 5) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(rng.integers(1, 40, size=world)) for _ in range(n_plans)]


def reference_grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The single-process gradient of the mean loss over (x, y): what a big batch would give."""
    import copy

    import torch.nn.functional as F

    ref = copy.deepcopy(model)
    ref.zero_grad()
    F.cross_entropy(ref(x), y).backward()
    return [p.grad.clone() for p in ref.parameters()]
