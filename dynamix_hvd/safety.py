"""Guards applied around any controller, on rank 0. Pure logic, no MPI.

- ControllerErrors: an exception inside a controller keeps the current plan (logged); after
  ``max_errors`` in a row the run falls back to the fallback controller.
- GoodputGuard: after a learned controller's decision, if goodput (throughput x statistical
  efficiency) stays more than ``drop`` below the level before that decision for ``patience``
  intervals, fall back (the issue's rule: 10% for 2 intervals). A drop the cluster explains (a
  node or link got slower: ``unexplained_slowdown``) is not the controller's fault: the guard
  takes the new level as its reference instead of counting it.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from dynamix_hvd.plan import water_fill
from dynamix_hvd.records import ClusterState
from dynamix_hvd.stats import GROWTH_MARGIN


def _step_parts(state: ClusterState) -> tuple[list[float], list[float], float] | None:
    """(batch sizes that ran, per-rank compute s, step s) of one interval; None if incomplete."""
    b = [float(w.batch_size) for w in state.workers]
    c = [float(w.compute_s) for w in state.workers]
    steps = [float(w.step_s) for w in state.workers if math.isfinite(w.step_s) and w.step_s > 0]
    if not steps or not all(math.isfinite(x) and x > 0 for x in b + c):
        return None
    return b, c, statistics.median(steps)


def unexplained_slowdown(prev: ClusterState | None, cur: ClusterState) -> float:
    """Measured step time of ``cur`` over the longest step time its batch sizes could take in
    ``prev``'s cluster; at most about 1 when the plan explains the step time, well above 1 when the
    cluster itself got slower (a node slowed, a link degraded). NaN without data.

    A rank's compute time is affine in its batch with a fixed cost >= 0, so relative to the
    previous interval it at most scales with the batch when the batch grows and at most stays when
    it shrinks: ``c_prev * max(1, b / b_prev)`` bounds it whatever the fixed cost. The per-step
    overhead outside compute is the previous interval's. Using the upper bound means a plan change
    (say, PPO halving the batch on an overhead-dominated model) is never mistaken for the cluster.

    Live, the guard without this fell back from PPO in every node_slowdown and link_degrade run:
    the event's drop came one interval after a (small) PPO plan change and was blamed on it."""
    if prev is None or prev.world_size != cur.world_size:
        return math.nan
    p, q = _step_parts(prev), _step_parts(cur)
    if p is None or q is None:
        return math.nan
    (b0, c0, t0), (b1, _, t1) = p, q
    overhead = max(t0 - max(c0), 0.0)
    expected = max(c * max(1.0, b / b_prev) for b, c, b_prev in zip(b1, c0, b0)) + overhead
    return t1 / expected if expected > 0 else math.nan


@dataclass
class GoodputGuard:
    """Falls back from the PPO controller when goodput stays ``drop`` below its reference level
    for ``patience`` intervals *after a PPO plan change*.

    The reference is the level measured under the plan in force. A drop while that same plan is
    still in force (no decision moved anything since the reference was measured) is not the
    controller's doing, whatever its cause (a co-tenant burst, the noise scale growing, a cluster
    event too small for ``slowdown``): its level becomes the new reference and nothing is counted.
    Live, a node_slowdown PPO run under a plan unchanged for 12 intervals fell back after a
    two-interval throughput dip (14% and 13% below the reference, ``cluster_slowdown`` 1.07-1.08)."""

    drop: float = 0.10
    patience: int = 2
    baseline: float = float("nan")
    bad: int = 0
    history: deque = field(default_factory=lambda: deque(maxlen=64))   # recent levels (bounded)

    external: int = 0            # drops not blamed on the controller (cluster or unchanged plan)
    baseline_B: float = float("nan")   # the global batch the reference level was measured at
    suspect: bool = False        # a plan change is in force that the reference was not measured under

    def observe(self, goodput: float, plan_changed_last_time: bool, slowdown: float = math.nan,
                global_batch: float = math.nan) -> bool:
        """Feed one interval's goodput; True when the guard fires (fall back now).

        ``slowdown``: ``unexplained_slowdown`` of this interval. Above ``1 + drop`` the cluster
        got slower by itself: the level it leaves is the new reference, nothing is counted."""
        if not math.isfinite(goodput) or goodput <= 0:
            return False
        self.history.append(goodput)
        if plan_changed_last_time:
            self.suspect = True
        if not math.isfinite(self.baseline):
            self.baseline, self.baseline_B, self.suspect = goodput, global_batch, False
            return False
        if math.isfinite(slowdown) and slowdown > 1.0 + self.drop:
            self.baseline, self.bad, self.baseline_B, self.suspect = goodput, 0, global_batch, False
            self.external += 1
            return False
        if goodput < (1.0 - self.drop) * self.baseline:
            if self.suspect:
                self.bad += 1
            else:
                # the plan the reference was measured under is still in force: not the controller's
                self.baseline, self.bad, self.baseline_B = goodput, 0, global_batch
                self.external += 1
        else:
            self.bad = 0
            if not plan_changed_last_time:
                # steady state under an unchanged plan: the new reference level
                self.baseline = 0.5 * self.baseline + 0.5 * goodput
                self.baseline_B = global_batch
                self.suspect = False
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


@dataclass(frozen=True)
class MoveLimits:
    """What one decision may change, whatever the controller proposes (``limit_proposal``).

    ``max_rank_change``: each rank's size stays within [b/(1+x), b(1+x)] of its current size,
    except a rank flagged ``changed`` (its own step-by-step detector measured a new speed) or one
    that has to make room for such a rank; ``max_global_change``: the same for the global batch;
    ``hold_global_without_gns``: the global batch stays unless the noise-scale estimate is stable,
    or grows no further than ``glob.noise_scale_room`` (an unstable estimate whose pessimistic
    value is still >= ``stats.GROWTH_MARGIN`` (3) x the batch, ``stats.growth_room``).
    Live (issue 24) PPO moved one rank 41 -> 330 -> 10 -> 90 within 5 s and grew B from 144 to
    575; each of those moves is bounded here."""

    max_rank_change: float = 1.0
    max_global_change: float = 0.5
    hold_global_without_gns: bool = True

    def without_hold(self) -> "MoveLimits":
        """The same limits with the hold on an unstable noise-scale estimate lifted (what a decision of a
        policy trained with ``ActionConfig.pass_hold`` runs behind, ``decide.decide_plan``)."""
        return replace(self, hold_global_without_gns=False)

    def reverting(self, B_cur: float, B_back: float) -> "MoveLimits":
        """The limits of the goodput guard's revert from ``B_cur`` to ``B_back``, the global batch its
        reference level was measured at (``decide.decide_plan``): reached in this one decision, held
        neither by the global move limit nor by the hold on an unstable noise-scale estimate (a batch
        the job has run at that level is no untried move); each rank may move by the revert's ratio on
        top of its usual limit. Live (session 65) a revert from 256 to 128 was cut to 171 by the
        global limit, and the fallback controller, which keeps the global batch it is given, ran the
        rest of the job at 171."""
        if not (math.isfinite(B_cur) and math.isfinite(B_back) and B_cur > 0 and B_back > 0):
            return self
        r = max(B_back / B_cur, B_cur / B_back)
        return replace(self, hold_global_without_gns=False, max_global_change=max(self.max_global_change, r - 1.0),
                       max_rank_change=max(self.max_rank_change, r * (1.0 + self.max_rank_change) - 1.0))


def global_range(B_cur: float, stable: bool, room: float, limits: MoveLimits) -> tuple[float, float]:
    """The global batches one decision may reach from ``B_cur`` (pure; the one statement of the
    safety layer's global rules, used by ``limit_proposal`` and by the replay's ``causal_safe``
    oracle): within a factor ``1 + max_global_change`` either way; with ``hold_global_without_gns``
    and an unstable noise-scale estimate, only growth and only up to ``room``
    (``stats.growth_room``; no move at all when ``B_cur`` is already at or above it)."""
    g = limits.max_global_change
    lo, hi = B_cur / (1.0 + g), B_cur * (1.0 + g)
    if limits.hold_global_without_gns and not stable:
        lo = B_cur
        hi = min(hi, room) if B_cur < room else B_cur
    return lo, hi


def _global_note(B_cur: float, B: float, B_new: float, rel_err: float, stable: bool, room: float,
                 limits: MoveLimits) -> str:
    """Which of ``global_range``'s rules bound a proposal of ``B`` (clipped to ``B_new``)."""
    held = limits.hold_global_without_gns and not stable
    if held and B_new == B_cur:
        return (f"global batch held at {B_cur:.0f} (proposed {B:.0f}): noise-scale estimate not stable "
                f"(rel. err {rel_err:.2f})")
    if held and B_new == room:
        return (f"global batch growth {B_cur:.0f} -> {B:.0f} limited to {room:.0f}: noise-scale estimate not "
                f"stable (rel. err {rel_err:.2f}), its lower bound {GROWTH_MARGIN:g}x that")
    return f"global batch move {B_cur:.0f} -> {B:.0f} limited to a factor {1 + limits.max_global_change:g} per decision"


def limit_proposal(state: ClusterState, proposed: Sequence[float], limits: MoveLimits,
                   min_batch: int = 1) -> tuple[list[float], list[str]]:
    """The proposal with the per-decision limits applied, and one note per limit that bound.

    Pure; called on rank 0 for every controller (but the bench's exact oracle) before
    ``plan.next_plan`` applies bounds, quantum and deadband."""
    cur = np.asarray(state.plan.batch_sizes, dtype=float)
    prop = np.asarray([float(x) for x in proposed], dtype=float)
    if prop.shape != cur.shape or not np.isfinite(prop).all() or prop.sum() <= 0:
        return [float(x) for x in proposed], []      # next_plan reports what is wrong with it
    notes: list[str] = []
    B_cur, B = float(cur.sum()), float(prop.sum())
    stable, room = bool(state.glob.noise_scale_stable), float(state.glob.noise_scale_room)
    lo_B, hi_B = global_range(B_cur, stable, room, limits)
    if not stable and abs(B - B_cur) <= 0.5:
        lo_B, hi_B = min(lo_B, B), max(hi_B, B)   # a rounding-sized drift is not a move to hold
    if not lo_B <= B <= hi_B:
        B_new = float(np.clip(B, lo_B, hi_B))
        notes.append(_global_note(B_cur, B, B_new, state.glob.noise_scale_rel_err, stable, room, limits))
        B = B_new
    x = limits.max_rank_change
    changed = np.array([bool(w.changed) for w in state.workers]) if len(state.workers) == cur.size else \
        np.zeros(cur.size, dtype=bool)
    floor = float(max(min_batch, 1))
    lo = np.where(changed, floor, np.maximum(cur / (1.0 + x), floor))
    hi = np.where(changed, np.inf, np.maximum(cur * (1.0 + x), floor))
    if changed.any() and not (lo.sum() <= B <= hi.sum()):
        # a changed rank's move needs room: the others may move further this time
        lo, hi = np.full(cur.size, floor), np.full(cur.size, np.inf)
    target = prop * (B / prop.sum())
    B = float(np.clip(B, lo.sum(), hi.sum()))
    out = water_fill(np.maximum(target, 1e-9), lo, hi, B)
    if np.any(np.abs(out - target) > 0.5):
        notes.append(f"per-rank moves limited to a factor {1 + x:g} per decision")
    return [float(v) for v in out], notes
