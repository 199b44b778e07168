"""A curriculum over replay worlds: a growing pool of randomised worlds, each with goodput's and
the hindsight oracle's time to target, sampled where goodput is far from the oracle.

``WorldPool.sample`` draws a new world (``replay.worlds.WorldDraw``) with probability ``p_new``
(always until the pool holds ``min_size``) and runs goodput and the hindsight oracle on it (same
seed: same world); otherwise it re-uses a pooled world with probability proportional to
``clip(log(T_goodput / T_hindsight), w_min, w_max)``: episodes concentrate where goodput has the
most to gain, without dropping the worlds where it is already near the oracle (``w_min``).
Goodput's time is also the reward's reference (``agent/replay_env.py``). One pool can be shared
by every env of a (single-process) vector env.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
import numpy as np

from dynamix_hvd.replay.worlds import WorldDraw, WorldSpec, build_sim


@dataclass
class PoolEntry:
    spec: WorldSpec
    goodput_s: float          # goodput's time to target (or to the budget when it misses)
    goodput_decisions: int
    hindsight_s: float
    visits: int = 0

    @property
    def gap(self) -> float:
        return math.log(self.goodput_s / self.hindsight_s) if self.hindsight_s > 0 else 0.0


def reference_times(spec: WorldSpec, hindsight: bool = True) -> PoolEntry:
    """Goodput (through the live decision path) and the hindsight oracle on one world."""
    from dynamix_hvd.replay.runner import run_controller
    from dynamix_hvd.replay.oracle import run_hindsight
    sim = build_sim(spec)
    g = run_controller(sim, "goodput", spec.seed)
    tg = g["time_to_target_s"] if g["time_to_target_s"] is not None else sim.time
    th = tg
    if hindsight:
        h = run_hindsight(sim, spec.seed)
        th = h["time_to_target_s"] if h["time_to_target_s"] is not None else tg
    return PoolEntry(spec, float(tg), int(g["decisions"]), float(min(th, tg)))


class WorldPool:
    def __init__(self, draw: WorldDraw = WorldDraw(), seed: int = 0, p_new: float = 0.3, min_size: int = 16,
                 w_min: float = 0.05, w_max: float = 0.7, curriculum: bool = True) -> None:
        self.draw = draw
        self.rng = np.random.default_rng([seed, 4242])
        self.p_new, self.min_size = p_new, min_size
        self.w_min, self.w_max, self.curriculum = w_min, w_max, curriculum
        self.entries: list[PoolEntry] = []

    def new_entry(self) -> PoolEntry:
        spec = self.draw.draw(self.rng)
        e = reference_times(spec, hindsight=self.curriculum)
        self.entries.append(e)
        return e

    def weights(self) -> np.ndarray:
        if not self.curriculum:
            return np.ones(len(self.entries))
        return np.clip([e.gap for e in self.entries], self.w_min, self.w_max)

    def sample(self) -> PoolEntry:
        if len(self.entries) < self.min_size or self.rng.random() < self.p_new:
            e = self.new_entry()
        else:
            w = self.weights()
            e = self.entries[int(self.rng.choice(len(self.entries), p=w / w.sum()))]
        e.visits += 1
        return e

    def summary(self) -> dict:
        g = np.array([e.gap for e in self.entries]) if self.entries else np.zeros(0)
        return {"worlds": len(self.entries), "episodes": int(sum(e.visits for e in self.entries)),
                "median_goodput_over_hindsight": float(np.exp(np.median(g))) if g.size else None}
