"""From a policy action to proposed per-rank batch sizes (used by the env and the PPO controller).

Action = one level per worker in -k..+k (``n_levels = 2k + 1``) and one global-batch scale index.
One level moves a worker by ``step_frac`` x the current mean per-worker batch. The per-worker
moves change the *split*; the global scale changes the *total*: after the moves the proposal is
rescaled to sum to the (scaled) target global batch. Bounds, quantisation and the deadband are
applied afterwards by ``plan.next_plan`` as for every controller.

What a level moves *from* is the anchor (``ActionConfig.anchor``):

* ``"current"``: the plan in force (the first shipped policy). Reaching a balanced split then takes
  many +-1/8 moves, and every decision is a chance to drift away from it again (measured live:
  balance efficiency 0.85 against 0.95 for the model-based controllers, 20-250 plan changes).
* ``"balanced"``: the split of the target global batch that equalises every rank's *fitted*
  compute time (``BalancedAnchor``: the ``ComputeModel`` the proportional and goodput controllers
  use). The zero action is then "balanced at the chosen global batch"; the levels are the policy's
  corrections to the model (a residual policy), e.g. moving a rank whose latest interval shows a
  slowdown before the model has confirmed it, or leaving headroom on a rank behind a slow link.
* ``"goodput"``: as ``"balanced"``, and the global scale multiplies the global batch the goodput
  model (``GoodputController``) would pick now instead of the policy's running target. The zero
  action is then the model-based plan; the policy learns when and how far to depart from it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from dynamix_hvd.controllers.evidence import (MIN_COMPUTE_S, Z_MIN, LastingGain, SplitEvidence, rel_uncertainty,
                                              resplit_gain, split_evidence)
from dynamix_hvd.controllers.model import ComputeModel
from dynamix_hvd.controllers.split import integer_split
from dynamix_hvd.plan import PlanBounds
from dynamix_hvd.records import ClusterState

ANCHORS = ("current", "balanced", "goodput")
ANCHOR_HISTORY = 16      # intervals the anchor's compute model keeps; the PPO controller's default warm-up


ACTION_FLAGS = ("pass_hold", "pass_only", "pass_head")   # ActionConfig's flags, recorded only when set


@dataclass(frozen=True)
class ActionConfig:
    n_levels: int = 5                                   # per-worker levels -2..+2
    step_frac: float = 0.125                            # one level = 1/8 of the mean per-worker batch
    global_scales: tuple[float, ...] = (0.8, 1.0, 1.25)  # global-batch multipliers; (1.0,) disables
    anchor: str = "goodput"                             # what the action moves from (see module doc)
    # a global departure (scale != 1) is not held by the safety layer's hold on an unstable noise-scale
    # estimate (safety.MoveLimits.hold_global_without_gns; the 1.5x-per-decision limit still applies):
    # the policy, trained with the same rule, judges the unstable estimate itself (docs/policy.md, session 48).
    # With it, a second 1.0 in ``global_scales`` is the *pass* action: goodput's own global batch with the hold
    # passed (``pass_global``; the no-op is the first 1.0, goodput's plan held as goodput holds it; session 50)
    pass_hold: bool = False
    # with a pass action: only the pass passes the hold, the fixed scales stay held by it (a fixed multiple
    # of goodput's batch grown on an unstable estimate was the pass-hold policies' held-out tail; session 52)
    pass_only: bool = False
    # with a pass action: the pass is decided by a binary head of its own (``RowNet.pass_pi``), in place of the
    # no-op the global head picks, so the pass and the fixed scales are fitted apart (session 78)
    pass_head: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "global_scales", tuple(float(s) for s in self.global_scales))
        if self.anchor not in ANCHORS:
            raise ValueError(f"anchor={self.anchor!r}: choose one of {ANCHORS}")
        if self.n_levels < 1 or self.n_levels % 2 == 0:
            raise ValueError(f"n_levels={self.n_levels}: must be odd and >= 1 (levels -k..k)")
        if not 0 < self.step_frac <= 1:
            raise ValueError(f"step_frac={self.step_frac}: must be in (0, 1]")
        if 1.0 not in self.global_scales or any(s <= 0 for s in self.global_scales):
            raise ValueError(f"global_scales={self.global_scales}: must be > 0 and contain 1.0")
        twice = sorted({s for s in self.global_scales if self.global_scales.count(s) > 1})
        if twice and (twice != [1.0] or self.global_scales.count(1.0) > 2 or not self.pass_hold):
            raise ValueError(f"global_scales={self.global_scales}: a scale appears twice ({twice}); only 1.0 may, "
                             f"once more, as the pass action of a policy with pass_hold")
        if twice and self.anchor != "goodput":
            raise ValueError(f"global_scales={self.global_scales} with anchor={self.anchor!r}: the pass action (a second "
                             f"1.0) is goodput's own batch, so it needs anchor='goodput'")
        if self.pass_only and not twice:
            raise ValueError(f"pass_only=True with global_scales={self.global_scales}: only the pass action passes the "
                             f"hold, so it needs one (a second 1.0, with pass_hold)")
        if self.pass_head and not twice:
            raise ValueError(f"pass_head=True with global_scales={self.global_scales}: the head decides the pass action, "
                             f"so it needs one (a second 1.0, with pass_hold)")

    @property
    def k(self) -> int:
        return self.n_levels // 2

    @property
    def noop_global(self) -> int:
        return self.global_scales.index(1.0)

    @property
    def pass_global(self) -> int | None:
        """The index of the pass action (the second 1.0 of a ``pass_hold`` policy), or None."""
        ones = [i for i, s in enumerate(self.global_scales) if s == 1.0]
        return ones[1] if len(ones) > 1 else None

    def passes_hold(self, global_index: int) -> bool:
        """Whether global action ``global_index`` passes the safety layer's hold on an unstable noise-scale
        estimate: with ``pass_hold`` every departure (a global action other than the no-op), with
        ``pass_only`` too the pass action alone."""
        if not self.pass_hold or int(global_index) == self.noop_global:
            return False
        return not self.pass_only or int(global_index) == self.pass_global

    def scale(self, global_index: int) -> float:
        """The global-batch multiplier of action index ``global_index`` (clipped to the range)."""
        return self.global_scales[int(np.clip(global_index, 0, len(self.global_scales) - 1))]

    def to_dict(self) -> dict:
        d = {"n_levels": self.n_levels, "step_frac": self.step_frac, "global_scales": list(self.global_scales),
             "anchor": self.anchor}
        # (policies saved before a flag: no key)
        return {**d, **{k: True for k in ACTION_FLAGS if getattr(self, k)}}

    @staticmethod
    def from_dict(d: Mapping) -> "ActionConfig":
        # policies saved before the anchor existed moved from the current plan
        flags = {k: d.get(k, False) for k in ACTION_FLAGS}
        for k, v in flags.items():
            if not isinstance(v, bool):
                raise ValueError(f"action config: {k}={v!r} (expected true or false)")
        return ActionConfig(int(d.get("n_levels", 5)), float(d.get("step_frac", 0.125)),
                            tuple(d.get("global_scales", (0.8, 1.0, 1.25))), str(d.get("anchor", "current")),
                            **flags)


def global_action_feature(index: int, config: ActionConfig) -> float:
    """The observation feature of the last global-scale action: -1 .. 1, 0 = keep the global batch."""
    span = max(1, len(config.global_scales) - 1)
    return (index - config.noop_global) / span


class BalancedAnchor:
    """The split of a global batch that equalises every rank's fitted compute time.

    Fed one interval at a time (the ``ClusterState``: sizes in force and measured per-rank
    compute times), it keeps a ``ComputeModel`` (affine fit per rank, change detection) exactly
    like the proportional and goodput controllers. Until every rank has a finite fit it returns
    the current sizes rescaled to the target."""

    def __init__(self, history: int = ANCHOR_HISTORY) -> None:
        self.model = ComputeModel(history=history)
        self.lasting = LastingGain()
        self.evidence: SplitEvidence | None = None   # do the measurements justify a re-split?
        self.reason: str | None = None

    def observe(self, state: ClusterState, applied_scale: float | None = None) -> None:
        """Feed the interval's records to the split model (``applied_scale``: see GoodputAnchor)."""
        self.model.add_state(state)
        alpha, beta = self.model.fit()
        b = np.asarray(state.plan.batch_sizes, dtype=np.float64)
        if alpha.size == b.size and np.isfinite(alpha).all() and np.isfinite(beta).all():
            self.evidence = split_evidence(alpha + beta * b, rel_uncertainty(self.model, state), MIN_COMPUTE_S, Z_MIN,
                                           min_excess=self.lasting.floor)
            self.reason = self.evidence.reason

    def global_batch(self, running_target: float, passed: bool = False) -> float:
        """The global batch the global scale multiplies: here the policy's running target."""
        return running_target

    def split(self, sizes: Sequence[float], target: float, bounds: PlanBounds) -> np.ndarray:
        b = np.asarray(sizes, dtype=np.float64)
        alpha, beta = self.model.fit()
        if alpha.size != b.size or not (np.isfinite(alpha).all() and np.isfinite(beta).all()) or \
                (self.evidence is not None and not self.evidence.act):
            self.lasting.reset()
            return b * (target / b.sum())
        new = integer_split(alpha, beta, int(round(float(target))), bounds)
        if abs(target - b.sum()) >= 0.5:
            self.lasting.reset()
        elif not self.lasting.admit(resplit_gain(alpha, beta, b, new)):
            return b            # the same global batch and a re-split not (yet) worth a plan change
        return new

    def update_bounds(self, bounds: PlanBounds) -> None:
        """Bounds are passed to ``split``; nothing is kept."""

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "lasting": self.lasting.streak}

    def load_state_dict(self, state: Mapping) -> None:
        self.model.load_state_dict(dict(state.get("model", {})))
        self.lasting.streak = int(state.get("lasting", 0))


class GoodputAnchor(BalancedAnchor):
    """``BalancedAnchor`` whose global batch is the goodput model's current choice."""

    def __init__(self, bounds: PlanBounds, base_batch: int, history: int = ANCHOR_HISTORY) -> None:
        from dynamix_hvd.controllers.goodput import GoodputController
        self.goodput = GoodputController(bounds, base_batch, history=history)
        self.model = self.goodput.model          # one fit, shared with the split
        self.lasting = LastingGain()
        self.B: float | None = None
        self.choice: np.ndarray | None = None      # the model's split at B (observe)
        self.evidence: SplitEvidence | None = None
        self.reason: str | None = None

    def observe(self, state: ClusterState, applied_scale: float | None = None) -> None:
        """The model's choice from this state. Its incumbent (the batch a switch must beat by
        ``switch_gain``) is the global batch in force divided by the scale the policy applied at
        the previous decision (``applied_scale``): after the no-op it is the plan in force, as for
        the goodput controller itself, so a policy that always picks the no-op *is* that
        controller (before session 28 it was the anchor's own previous choice, which the safety
        layer's hold could leave far from the plan: bert N=8 1.07x goodput); a policy that scales
        by 0.8 at every decision still moves 0.8x from the model's choice instead of compounding
        (0.8^k). Without ``applied_scale``, the anchor's own previous choice."""
        inc = self.B
        if applied_scale is not None and applied_scale > 0:
            inc = float(sum(state.plan.batch_sizes)) / float(applied_scale)
        self.choice, self.B = self.goodput.choose(state, incumbent=inc)   # choose() also feeds the model
        self.evidence, self.reason = self.goodput.last_evidence, self.goodput.last_reason

    def global_batch(self, running_target: float, passed: bool = False) -> float:
        """The model's choice; ``passed`` (the pass action): its choice with the noise-scale estimate
        counted as stable (``GoodputController.unheld_choice``), where it has one."""
        if passed:
            B = self.goodput.unheld_choice()
            if B is not None and math.isfinite(B) and B > 0:
                return B
        return self.B if self.B is not None and math.isfinite(self.B) and self.B > 0 else running_target

    def split(self, sizes: Sequence[float], target: float, bounds: PlanBounds) -> np.ndarray:
        """At the model's own global batch (the no-op scale), the model's own split, rounding
        included; at another, the balanced split of that batch."""
        if self.choice is not None and self.B is not None and abs(float(target) - self.B) < 1e-6 \
                and len(self.choice) == len(sizes) and abs(float(np.sum(self.choice)) - self.B) < 0.5:
            return np.asarray(self.choice, dtype=np.float64)
        return super().split(sizes, target, bounds)

    def update_bounds(self, bounds: PlanBounds) -> None:
        self.goodput.update_bounds(bounds)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "B": self.B, "lasting": self.lasting.streak,
                "goodput_lasting": self.goodput.lasting.streak}

    def load_state_dict(self, state: Mapping) -> None:
        self.model.load_state_dict(dict(state.get("model", {})))
        self.B = state.get("B")
        self.lasting.streak = int(state.get("lasting", 0))
        self.goodput.lasting.streak = int(state.get("goodput_lasting", 0))


def make_anchor(config: ActionConfig, bounds: PlanBounds, base_batch: int) -> BalancedAnchor | None:
    """The anchor an ``ActionConfig`` needs (None for ``"current"``)."""
    if config.anchor == "balanced":
        return BalancedAnchor()
    if config.anchor == "goodput":
        return GoodputAnchor(bounds, base_batch)
    return None


def global_batch_limits(bounds: PlanBounds) -> tuple[float, float]:
    n = len(bounds.max_batch)
    lo = max(bounds.min_global_batch, bounds.min_batch * n, 1)
    hi = float(sum(bounds.max_batch))
    if bounds.max_global_batch is not None:
        hi = min(hi, bounds.max_global_batch)
    return float(lo), float(hi)


def proposal_from_action(
    sizes: Sequence[int],
    levels: np.ndarray,
    global_index: int,
    target_global: float,
    config: ActionConfig,
    bounds: PlanBounds,
    anchor: BalancedAnchor | None = None,
) -> tuple[np.ndarray, float]:
    """Proposed sizes (floats) and the new target global batch.

    ``levels`` are signed (-k..k), one per worker. With an anchored config (``"balanced"``,
    ``"goodput"``) the scale multiplies ``anchor.global_batch(target_global)`` and the levels
    move the ``anchor``'s balanced split of the new target instead of ``sizes``."""
    b = np.asarray(sizes, dtype=np.float64)
    lv = np.clip(np.asarray(levels, dtype=np.float64).reshape(-1)[: b.size], -config.k, config.k)
    if lv.size != b.size:
        raise ValueError(f"{lv.size} action levels for {b.size} workers")
    scale = config.scale(global_index)
    lo, hi = global_batch_limits(bounds)
    if config.anchor != "current" and anchor is None:
        raise ValueError(f"ActionConfig.anchor={config.anchor!r} needs an anchor (make_anchor)")
    passed = config.pass_global is not None and int(global_index) == config.pass_global
    base = anchor.global_batch(target_global, passed) if anchor is not None else target_global
    target = float(np.clip(base * scale, lo, hi))
    if anchor is not None:
        b = anchor.split(b, target, bounds)
    step = max(1.0, config.step_frac * b.mean())
    caps = np.asarray(bounds.max_batch, dtype=np.float64)
    prop = np.clip(b + lv * step, max(bounds.min_batch, 1), caps)
    prop = prop * (target / prop.sum())
    return prop, target
