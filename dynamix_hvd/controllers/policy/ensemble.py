"""Combining the actions of several policies into one (pure).

One imitation policy is one draw of a high-variance recipe: the same DAgger recipe on the same
four workloads gave 0.971x goodput in one training run and a cell at 1.07x, 1.31x and 1.33x in
three others (issue 19, sessions 29-34), and each departed from goodput where the others did not.
An ensemble of independently trained policies moves only where they agree:

* ``consensus``: a move away from the no-op only when every member moves in the same direction,
  and then the smallest of their moves (the global scale nearest 1, the per-worker level nearest
  0); any disagreement, or one member at the no-op, is the no-op;
* ``median``: the median of the members' action indices (the lower middle for an even count);
* ``mean``: the action most probable under the members' mean probabilities (each member's softmax of
  its logits; a member outside its training support counts as certain of the no-op). The one rule that
  needs no order of the actions, so the one that combines policies with a pass action (session 55).

``consensus`` and ``median`` act on indices into ordered action lists (global scales ascending,
per-worker levels -k..k), relative to the no-op index; ``mean`` on the members' logits
(``mean_choice``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

RULES = ("consensus", "median", "mean")
ORDERED_RULES = ("consensus", "median")     # the rules that combine action indices (need ordered actions)


def combine(indices: Sequence[int] | np.ndarray, noop: int, rule: str = "consensus") -> int:
    """One action index from the members' indices ``indices`` (ordered actions, ``noop`` the
    index of the no-op) under ``rule``."""
    return int(combine_rows(np.asarray(indices, dtype=np.int64).reshape(-1, 1), noop, rule)[0])


def combine_rows(indices: np.ndarray, noop: int, rule: str = "consensus") -> np.ndarray:
    """Per column, one action index from the members' indices ``indices`` (members x columns)."""
    if rule not in ORDERED_RULES:
        raise ValueError(f"ensemble rule {rule!r}: expected one of {ORDERED_RULES} (mean: mean_choice)")
    a = np.asarray(indices, dtype=np.int64)
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"ensemble: expected (members, columns) action indices, got shape {a.shape}")
    d = a - int(noop)
    if rule == "median":
        return np.sort(a, axis=0)[(a.shape[0] - 1) // 2]
    up, down = (d > 0).all(axis=0), (d < 0).all(axis=0)
    return np.where(up, noop + d.min(axis=0), np.where(down, noop + d.max(axis=0), noop))


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities along the last axis."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mean_choice(probs: Sequence[np.ndarray]) -> np.ndarray:
    """The index of the largest mean probability along the last axis, over the members' ``probs``
    (each of the same shape: (..., actions)); ties go to the lower index."""
    if len(probs) < 1:
        raise ValueError("ensemble: no member probabilities")
    p = np.stack([np.asarray(x, dtype=np.float64) for x in probs])
    if p.ndim < 2:
        raise ValueError(f"ensemble: expected (..., actions) probabilities per member, got shape {p.shape[1:]}")
    return p.mean(axis=0).argmax(axis=-1)
