"""Per-rank speed multipliers: hardware factor x fluctuation replayed from a measured trace.

Hardware (``draw_hardware``, default when ``--speeds`` is not given): per seed, 1-3 GPU
generations; the fastest has factor 1, the others factors log-uniform in [1, 4]; each rank is
on a generation drawn uniformly. A factor multiplies the rank's compute time (4 = 4x slower).
``--speeds 1,1,2,4`` fixes the factors (cycled over the ranks when the list is shorter than N).

Fluctuation (``Fluctuation``), a multiplier on each rank's compute time per training step, replayed
from none, a PAI per-worker file or the CoV table: ``traces/fluctuation.py`` states how (one
loader, normalisation and CoV generator for the replay and the emulated cluster).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dynamix_hvd.traces.fluctuation import COV_STRIDE, Fluctuation, SpeedTrace, load_speed_trace

__all__ = ["COV_STRIDE", "Fluctuation", "SpeedTrace", "load_speed_trace", "draw_hardware", "cycle_speeds"]


def draw_hardware(n: int, rng: np.random.Generator) -> np.ndarray:
    g = int(rng.integers(1, 4))
    gens = np.concatenate([[1.0], np.exp(rng.uniform(0.0, math.log(4.0), g - 1))])
    return gens[rng.integers(0, g, n)]


def cycle_speeds(speeds: Sequence[float], n: int) -> np.ndarray:
    s = np.asarray([float(x) for x in speeds], dtype=float)
    if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"speeds {list(speeds)}: need one or more positive factors")
    return s[np.arange(n) % s.size]
