"""One interface for every batch-size controller (static, oracle, proportional, goodput, ppo).

A controller is called on rank 0 once per decision interval with the ClusterState and
returns the proposed per-rank batch sizes (floats are fine). Bounds, quantisation and the
deadband are applied afterwards by ``dynamix_hvd.plan.next_plan``, never by the controller.
"""
from __future__ import annotations

import abc
from typing import Any, Sequence

from dynamix_hvd.plan import PlanBounds
from dynamix_hvd.records import ClusterState


class Controller(abc.ABC):
    """Decides per-rank batch sizes. Implementations keep their own state; no globals."""

    name: str = "base"
    # True for a controller that reads the truth instead of measuring (the bench's oracle): the
    # safety layer's limits on what measurements can justify (safety.limit_proposal) do not apply
    exact: bool = False
    # True for a controller that changes the global batch on its own model (goodput, ppo): the
    # goodput guard (safety.GoodputGuard) falls back to the simple controller when measured goodput
    # stays below the level before its decisions
    guarded: bool = False
    # the controller that guard hands the job to (None: the configured ``fallback_controller``); a
    # policy anchored on goodput names goodput, its own no-op (``PPOController``'s ``guard_fallback``)
    guard_fallback: str | None = None
    # True when ``decide`` reads the gradient noise scale (state.glob.noise_scale, directly or
    # through the goodput guard): with ``gns`` left to auto the hook takes gradient statistics
    # (a per-step cost: issue 25) only for such a controller. True by default: a controller of
    # the user's may read it
    uses_noise_scale: bool = True
    # True when the last decision's global move is the controller's own judgement of an unstable
    # noise-scale estimate (a policy trained with ``ActionConfig.pass_hold``): ``decide.decide_plan``
    # then lifts the safety layer's hold on that estimate for it (its per-decision limits stay)
    passes_hold: bool = False
    # one line on why the last decision proposed what it did (decision log, progress output)
    last_reason: str | None = None

    def __init__(self, bounds: PlanBounds, base_batch: int) -> None:
        self.bounds = bounds
        self.base_batch = int(base_batch)

    @abc.abstractmethod
    def decide(self, state: ClusterState) -> Sequence[float]:
        """Return the proposed per-rank batch sizes for the next interval."""

    def state_dict(self) -> dict[str, Any]:
        """Controller state for checkpoints (JSON-serialisable)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""

    def update_bounds(self, bounds: PlanBounds) -> None:
        """Called when a rank's max batch is lowered (e.g. after an out-of-memory probe)."""
        self.bounds = bounds
