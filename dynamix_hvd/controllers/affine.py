"""Affine fits of a rank's compute time per step, ``t(b) = alpha + beta * b`` (pure): weighted
least squares over (b, t) observations, the through-origin fit while no fixed cost is identified,
a prior scaled to new observations after a change, and the precision weight of one observation.
The compute model (model.py) keeps the histories they fit."""
from __future__ import annotations

import math
from typing import Sequence


WEIGHT_FLOOR = 0.02      # relative error below which observations count alike (interval-to-interval scatter)


def precision_weight(rel_se: float) -> float:
    """Weight of one interval's mean compute time, in (0, 1]: FLOOR^2 / (rel_se^2 + FLOOR^2)
    (``WEIGHT_FLOOR``), the inverse variance scaled so that a precise interval, or one of unknown
    (NaN) error, weighs 1."""
    r = float(rel_se) if math.isfinite(rel_se) and rel_se > 0 else 0.0
    f2 = WEIGHT_FLOOR * WEIGHT_FLOOR
    return f2 / (r * r + f2)


def _points(b: Sequence[float], t: Sequence[float],
            w: Sequence[float] | None = None) -> list[tuple[float, float, float]]:
    """The usable (b, t, weight) triples: b and t finite and positive (weight 1 without ``w``)."""
    ws = [1.0] * len(b) if w is None else w
    return [(float(x), float(y), float(v)) for x, y, v in zip(b, t, ws)
            if math.isfinite(x) and math.isfinite(y) and x > 0 and y > 0 and math.isfinite(v) and v > 0]


def fit_affine(b: Sequence[float], t: Sequence[float], w: Sequence[float] | None = None) -> tuple[float, float]:
    """(alpha, beta) of t = alpha + beta * b, with alpha >= 0 and beta > 0, weighted least squares
    (weights ``w``, default equal).

    With fewer than two distinct sizes (or a fit with a negative slope) the fixed cost is not
    identifiable and ``alpha = 0`` (time proportional to the batch: beta is the weighted mean of
    t / b). Plain Python over the (<= ``history``) points: numpy's per-call overhead dominated the
    simulator's training loop, which fits every rank at every decision."""
    pts = _points(b, t, w)
    if not pts:
        return math.nan, math.nan
    bs = [p[0] for p in pts]
    sw = sum(p[2] for p in pts)
    if identified(bs):
        # weighted least squares in closed form (np.polyfit(b, t, 1, w=sqrt(w)))
        bm = sum(v * x for x, _, v in pts) / sw
        tm = sum(v * y for _, y, v in pts) / sw
        sxx = sum(v * (x - bm) ** 2 for x, _, v in pts)
        beta = sum(v * (x - bm) * (y - tm) for x, y, v in pts) / sxx
        alpha = tm - beta * bm
        if beta > 0 and alpha >= 0:
            return alpha, beta
        if beta > 0:
            return 0.0, sum(v * x * y for x, y, v in pts) / sum(v * x * x for x, _, v in pts)
    return 0.0, sum(v * y / x for x, y, v in pts) / sw


def fit_scaled(prior: tuple[float, float], b: Sequence[float], t: Sequence[float],
               w: Sequence[float] | None = None) -> tuple[float, float]:
    """(s * alpha0, s * beta0): the prior fit scaled by the (weighted) least-squares factor s to the points."""
    a0, b0 = prior
    pts = _points(b, t, w)
    if not pts:
        return math.nan, math.nan
    p = [a0 + b0 * x for x, _, _ in pts]
    scale = sum(v * pi * y for pi, (_, y, v) in zip(p, pts)) / sum(v * pi * pi for pi, (_, _, v) in zip(p, pts))
    return scale * a0, scale * b0


IDENTIFY_SPREAD = 0.25


def identified(b: Sequence[float]) -> bool:
    """True when the sizes are spread enough (> ``IDENTIFY_SPREAD`` = 25% of their mean) to fit
    a fixed cost.

    A narrower spread makes the slope noise: live (node_slowdown), a rank seen at 19 and 20
    samples with 1 ms of timing scatter was fitted at 22 ms + 0.22 ms/sample (truly about 3 ms +
    1 ms/sample), so every larger global batch gave it 2-3x the others' share for one interval
    (5-6 times per run), and the bad fit outlived a restart as the prior. The threshold was 5%."""
    b = [float(x) for x in b]
    return len(b) >= 2 and (max(b) - min(b)) > IDENTIFY_SPREAD * (sum(b) / len(b))
