"""How far the measurements can be trusted: the per-rank uncertainty of a predicted compute time
and whether the measured speeds justify moving away from the current split (issue 26: identical
ranks were split 1:3 on timing noise). Pure; used by the proportional and goodput controllers and
the PPO anchor, beside the compute model (model.py) whose fits they judge."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dynamix_hvd.controllers.model import ComputeModel
    from dynamix_hvd.records import ClusterState

MIN_COMPUTE_S = 0.005          # mean compute per step below which timings are too noisy to re-split on
Z_MIN = 3.0                     # standard errors a speed difference must exceed
MIN_EXCESS = 0.10               # and the fraction it must exceed to be worth a plan change (churn)
MIN_LASTING_GAIN = 0.04         # a smaller re-split gain is taken once it has lasted ...
LASTING_DECISIONS = 3           # ... this many decisions in a row (LastingGain)
PRIOR_INTERVAL_SCATTER = 0.15   # relative interval-to-interval scatter assumed until a rank has 2+ intervals
MIN_REL_UNCERTAINTY = 0.01


@dataclass(frozen=True)
class SplitEvidence:
    """Whether the measured per-rank speeds justify moving away from the current split.

    ``z``: the slowest rank's predicted excess time over the others' mean, in standard errors;
    ``excess``: that excess as a fraction; ``reason``: one line for the decision log."""

    act: bool
    z: float
    excess: float
    slowest: int
    reason: str


def rel_uncertainty(model: "ComputeModel", state: "ClusterState") -> np.ndarray:
    """Per rank: relative standard error of its predicted compute time at its current size.

    The larger of (a) the interval's own per-step scatter (``WorkerStats.compute_se_s``) and
    (b) the scatter of the rank's interval means around its fit, divided by sqrt(intervals).
    Until a rank has two intervals in its history (b) is not measured and a prior of
    ``PRIOR_INTERVAL_SCATTER`` stands in for it, unless the rank's own detector saw it change
    (``changed``: step-by-step evidence, react.py). Scheduling noise is correlated within an
    interval, so (a) alone underestimates it: on the quickstart's identical ranks the first
    interval's means differed by 10-40% with small per-step errors."""
    n = state.world_size
    se = np.array([w.compute_se_s for w in state.workers], dtype=float)
    c = np.array([w.compute_s for w in state.workers], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        within = np.where(np.isfinite(se) & (c > 0), se / np.where(c > 0, c, 1.0), 0.0)
    scatter = np.full(n, np.nan)
    got = model.fit_scatter()[:n]
    scatter[:got.size] = got
    changed = np.array([bool(w.changed) for w in state.workers])
    across = np.where(np.isfinite(scatter), scatter, np.where(changed, 0.0, PRIOR_INTERVAL_SCATTER))
    return np.maximum(np.maximum(within, across), MIN_REL_UNCERTAINTY)


def split_evidence(pred: np.ndarray, rel_se: np.ndarray, min_compute_s: float, z_min: float,
                   min_excess: float = MIN_EXCESS) -> SplitEvidence:
    """Act on a speed difference only when the steps are long enough to time (mean predicted
    compute >= ``min_compute_s``) and the slowest rank's predicted excess over the others is
    more than ``z_min`` standard errors and more than ``min_excess`` (live, emulated devices time
    so precisely that 5-8% differences were significant and re-split every few intervals for
    nothing: 20 -> 19 samples)."""
    pred = np.asarray(pred, dtype=float)
    n = pred.size
    if n < 2 or not np.isfinite(pred).all():
        return SplitEvidence(False, math.nan, math.nan, -1, "keep split: fewer than two timed ranks")
    mean = float(pred.mean())
    if mean < min_compute_s:
        return SplitEvidence(False, math.nan, math.nan, -1,
                             f"keep split: steps too short to time ({1e3 * mean:.2f} ms < {1e3 * min_compute_s:.1f} ms)")
    s = int(np.argmax(pred))
    others = np.delete(np.arange(n), s)
    ref = float(pred[others].mean())
    excess = float(pred[s] / ref - 1.0) if ref > 0 else math.inf
    se = math.sqrt(float(rel_se[s]) ** 2 + float(np.mean(np.asarray(rel_se)[others] ** 2)) / len(others))
    z = excess / se if se > 0 else math.inf
    # the slowest of n ranks is picked after the fact: the largest of n noisy excesses is about
    # sqrt(2 ln n) standard errors out by chance alone, so that much is added to the threshold
    z_min = z_min + math.sqrt(2.0 * math.log(n))
    if z < z_min:
        return SplitEvidence(False, z, excess, s, f"keep split: rank {s} {100 * excess:+.0f}% is within the timing "
                                                  f"noise ({z:.1f} < {z_min:.1f} standard errors)")
    if excess < min_excess:
        return SplitEvidence(False, z, excess, s, f"keep split: rank {s} {100 * excess:+.0f}% is below the "
                                                  f"{100 * min_excess:.0f}% worth a plan change")
    return SplitEvidence(True, z, excess, s, f"rank {s} {100 * excess:+.0f}% slower than the others' mean "
                                             f"({z:.1f} standard errors)")


def resplit_gain(alpha: np.ndarray, beta: np.ndarray, current: np.ndarray, new: np.ndarray) -> float:
    """How much a new split of the same global batch shortens the slowest rank's predicted compute
    time: (slowest now) / (slowest after) - 1. A split whose gain is below ``MIN_EXCESS`` is not
    worth a plan change: when the slowest rank sits at its floor (a BatchNorm minimum, a memory
    cap) the imbalance stays significant whatever the split, and re-splitting the others moved
    a few samples at every decision for nothing (live, hetero6_bn: 36 -> 38 -> 36 samples)."""
    before = float(np.max(alpha + beta * np.asarray(current, dtype=float)))
    after = float(np.max(alpha + beta * np.asarray(new, dtype=float)))
    return before / after - 1.0 if after > 0 else 0.0


class LastingGain:
    """Whether a re-split is worth a plan change, given how long its gain has been predicted.

    A gain of at least ``full`` (``MIN_EXCESS``) is taken at once. A gain between ``floor`` and
    ``full`` is taken once it has been predicted at ``need`` decisions in a row: a lasting 4-9%
    imbalance costs 4-9% of every step for the rest of the run, while one plan change costs a
    few steps (held out, heldout_transient5: after the slowed rank recovered, proportional kept
    the slow-time split [36, 36, 36, 16, 36] for the last 30 s, "re-splitting gains 9% < 10%" at
    every decision). The caller calls ``reset`` when the evidence does not justify a re-split, so
    the streak counts consecutive decisions with a significant imbalance. One instance per
    controller; the streak is its only state."""

    def __init__(self, full: float = MIN_EXCESS, floor: float = MIN_LASTING_GAIN, need: int = LASTING_DECISIONS) -> None:
        if not 0 <= floor <= full:
            raise ValueError(f"LastingGain floor={floor}, full={full}: need 0 <= floor <= full")
        if need < 1:
            raise ValueError(f"LastingGain need={need}: must be >= 1")
        self.full, self.floor, self.need = float(full), float(floor), int(need)
        self.streak = 0

    def admit(self, gain: float) -> bool:
        """Count this decision's predicted gain; True when the re-split should be taken now."""
        if not gain >= self.floor:          # also NaN
            self.streak = 0
            return False
        if gain >= self.full:
            self.streak = 0
            return True
        self.streak += 1
        if self.streak >= self.need:
            self.streak = 0
            return True
        return False

    def reset(self) -> None:
        self.streak = 0

    def describe(self, gain: float) -> str:
        """The decision-log reason for a re-split that was not taken."""
        if gain < self.floor:
            return f"re-splitting gains {gain:.0%} < {self.floor:.0%}"
        return (f"re-splitting gains {gain:.0%} < {self.full:.0%}, lasting {self.streak}/{self.need} "
                f"decisions (a gain over {self.floor:.0%} is taken once it lasts {self.need})")
