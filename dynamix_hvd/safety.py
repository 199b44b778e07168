"""Guards applied around any controller, on rank 0. Pure logic, no MPI.

- ControllerErrors: an exception inside a controller keeps the current plan (logged); after
  ``max_errors`` in a row the run falls back to the fallback controller.
- GoodputGuard: after a learned controller's decision, if goodput (throughput x statistical
  efficiency) stays more than ``drop`` below the level before that decision for ``patience``
  intervals, fall back (the issue's rule: 10% for 2 intervals).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class GoodputGuard:
    drop: float = 0.10
    patience: int = 2
    baseline: float = float("nan")
    bad: int = 0
    history: list[float] = field(default_factory=list)

    def observe(self, goodput: float, plan_changed_last_time: bool) -> bool:
        """Feed one interval's goodput; True when the guard fires (fall back now)."""
        if not math.isfinite(goodput) or goodput <= 0:
            return False
        self.history.append(goodput)
        if not math.isfinite(self.baseline):
            self.baseline = goodput
            return False
        if goodput < (1.0 - self.drop) * self.baseline:
            self.bad += 1
        else:
            self.bad = 0
            if not plan_changed_last_time:
                # steady state under an unchanged plan: the new reference level
                self.baseline = 0.5 * self.baseline + 0.5 * goodput
        return self.bad >= self.patience


@dataclass
class ControllerErrors:
    max_errors: int = 3
    in_a_row: int = 0

    def failed(self) -> bool:
        self.in_a_row += 1
        return self.in_a_row >= self.max_errors

    def ok(self) -> None:
        self.in_a_row = 0
