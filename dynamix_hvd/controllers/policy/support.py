"""The region of observations a policy was trained on, and the test that an observation is in it (pure).

A policy network answers every input, including inputs unlike any it was trained on, and there
its answer is an extrapolation nobody measured. Trained on bert, cifar10 and deepspeech2, the
imitation policy met ncf's observations and halved the batch at 106 of 118 decisions: 1.65x
goodput's time (issue 19, session 34). Each of ncf's features on its own lay inside the range
the policy had seen; their combination did not (a global batch 8x the initial one while still 2-4x
below the noise scale: in training a batch that large had outgrown its noise scale). So the
support has two parts:

* a box: [lo, hi] of every observation column (all rows) over the training observations;
* the decisions seen: the global columns that vary in training (one vector per decision, each
  column divided by its training range), up to ``MAX_POINTS`` of them, and a radius: the
  ``RADIUS_QUANTILE`` quantile of each such vector's distance to its nearest other one. A
  decision whose global vector is further than the radius from every one seen is outside.

A support may hold the box alone (``dynamix policy-support --box-only``; the shipped default's since
session 53: its fixed global scales stay held where the noise-scale estimate is unstable, and the
nearest-neighbour test was what held its passes on ncf, 0.965x goodput there against 0.910x without it).

``outside`` names what leaves it; ``PPOController`` takes the no-op (goodput's plan) for an
observation outside its policy's support. Stored in the policy's ``dynamix_config["support"]``
(``to_dict``; plain numbers, no code).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

MAX_POINTS = 2000          # decisions kept for the nearest-neighbour test (a random subset beyond)
RADIUS_QUANTILE = 0.99     # of the kept decisions' nearest-neighbour distances: the radius


@dataclass(frozen=True)
class Support:
    columns: tuple[str, ...]
    lo: np.ndarray                       # (F,) per column
    hi: np.ndarray
    near_columns: tuple[int, ...] = ()   # the global columns of the nearest-neighbour test
    scale: np.ndarray = field(default_factory=lambda: np.zeros(0))          # (D,) their training ranges
    points: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))    # (M, D) decisions seen / scale
    radius: float = math.inf
    rows: int = 0

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.lo, dtype=float), np.asarray(self.hi, dtype=float)
        if lo.shape != (len(self.columns),) or hi.shape != lo.shape:
            raise ValueError(f"support: {len(self.columns)} columns but lo / hi of shapes {lo.shape} / {hi.shape}")
        if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo <= hi).all()):
            raise ValueError("support: lo and hi must be finite with lo <= hi in every column")
        near = tuple(int(j) for j in self.near_columns)
        if any(not 0 <= j < len(self.columns) for j in near):
            raise ValueError(f"support: near_columns {near} outside 0..{len(self.columns) - 1}")
        scale = np.asarray(self.scale, dtype=float).reshape(-1)
        points = np.asarray(self.points, dtype=float).reshape(-1, len(near)) if near else np.zeros((0, 0))
        if near and (scale.shape != (len(near),) or not (scale > 0).all() or points.shape[0] < 2
                     or not np.isfinite(points).all()):
            raise ValueError("support: near_columns need a positive scale each and >= 2 finite points")
        if not (self.radius > 0):
            raise ValueError(f"support: radius {self.radius!r} must be > 0")
        for k, v in (("lo", lo), ("hi", hi), ("near_columns", near), ("scale", scale), ("points", points)):
            object.__setattr__(self, k, v)

    def outside(self, obs: np.ndarray) -> list[tuple[str, float, float, float]]:
        """What of ``obs`` (rows x columns) leaves the support: per column outside its box,
        (name, the value furthest out, lo, hi); and, when the decision's global vector (row 0) is
        further than the radius from every decision seen, ("global features", distance, 0, radius)."""
        x = np.asarray(obs, dtype=float)
        if x.ndim != 2 or x.shape[1] != len(self.columns):
            raise ValueError(f"support: observation of shape {x.shape}, expected (rows, {len(self.columns)})")
        below, above = x.min(axis=0), x.max(axis=0)
        out = []
        for j in np.flatnonzero((below < self.lo) | (above > self.hi)):
            v = below[j] if self.lo[j] - below[j] >= above[j] - self.hi[j] else above[j]
            out.append((self.columns[j], float(v), float(self.lo[j]), float(self.hi[j])))
        if self.near_columns and x.shape[0]:
            d = self.distance(x[0, list(self.near_columns)])
            if d > self.radius:
                out.append(("global features", d, 0.0, self.radius))
        return out

    def distance(self, g: np.ndarray) -> float:
        """Distance (in training ranges) of a global vector to the nearest decision seen."""
        diff = self.points - np.asarray(g, dtype=float)[None, :] / self.scale
        return float(np.sqrt(np.min(np.einsum("ij,ij->i", diff, diff))))

    def to_dict(self) -> dict[str, Any]:
        return {"columns": list(self.columns), "lo": self.lo.tolist(), "hi": self.hi.tolist(),
                "near_columns": list(self.near_columns), "scale": self.scale.tolist(),
                "points": np.round(self.points, 4).tolist(), "radius": self.radius, "rows": self.rows}

    @staticmethod
    def from_dict(d: Mapping[str, Any], where: str = "support") -> "Support":
        try:
            return Support(tuple(str(c) for c in d["columns"]), np.asarray(d["lo"], dtype=float),
                           np.asarray(d["hi"], dtype=float), tuple(int(j) for j in d.get("near_columns", ())),
                           np.asarray(d.get("scale", ()), dtype=float), np.asarray(d.get("points", ()), dtype=float),
                           float(d.get("radius", math.inf)), int(d.get("rows", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: not a support ({type(exc).__name__}: {exc})") from exc


def fit(observations: Sequence[np.ndarray], columns: Sequence[str], global_columns: Sequence[int] = (),
        seed: int = 0, max_points: int = MAX_POINTS, radius_quantile: float = RADIUS_QUANTILE) -> Support:
    """The support of the observations (one rows x columns array per decision): the box over all
    rows, and the nearest-neighbour test over those of ``global_columns`` that vary."""
    obs = [np.asarray(o, dtype=float).reshape(-1, len(columns)) for o in observations]
    obs = [o for o in obs if o.shape[0] and np.isfinite(o).all()]
    if not obs:
        raise ValueError("support: no observations to fit")
    x = np.concatenate(obs)
    lo, hi = x.min(axis=0), x.max(axis=0)
    g = np.array([o[0] for o in obs])
    near = [int(j) for j in global_columns if hi[j] > lo[j]]
    if not near or len(obs) < 3:
        return Support(tuple(columns), lo, hi, rows=x.shape[0])
    scale = hi[near] - lo[near]
    pts = g[:, near] / scale
    pts = np.unique(np.round(pts, 4), axis=0)
    if pts.shape[0] > max_points:
        pts = pts[np.random.default_rng(seed).choice(pts.shape[0], max_points, replace=False)]
    if pts.shape[0] < 3:
        return Support(tuple(columns), lo, hi, rows=x.shape[0])
    sq = np.einsum("ij,ij->i", pts, pts)
    d2 = sq[:, None] + sq[None, :] - 2.0 * pts @ pts.T
    np.fill_diagonal(d2, np.inf)
    nn = np.sqrt(np.maximum(d2.min(axis=1), 0.0))
    radius = max(float(np.quantile(nn, radius_quantile)), 1e-3)
    return Support(tuple(columns), lo, hi, tuple(near), scale, pts, radius, x.shape[0])
