"""Learning-rate rules for a changing global batch B (relative to the base global batch B0).

- none:     factor 1
- linear:   B / B0                          (Goyal et al. 2017)
- sqrt:     sqrt(B / B0)                    (Krizhevsky 2014; Hoffer et al. 2017)
- adascale: gain r = (S/B0 + G2) / (S/B + G2) from the noise-scale estimates
            (Johnson et al. 2020, AdaScale SGD); 1 until estimates exist.
The factor multiplies whatever LR the user's own scheduler sets: the hook divides out the
previous factor and multiplies the new one, so schedulers that scale the current LR compose.
"""
from __future__ import annotations

import math

RULES = ("none", "linear", "sqrt", "adascale")

# How far above B0 the global batch may grow under each rule (DynamixConfig.max_global_batch_for).
# Without an LR rule a k-times larger batch takes the same step size k times less often: progress
# per sample falls by up to k, which the goodput model's E(B) (it assumes a rule that keeps the
# per-sample progress, as AdaScale does) cannot see; live it cost 1.3 points of final accuracy
# (issue 24) and 4x fewer updates on the quickstart (issue 26). sqrt and linear scaling are
# known to hold over a bounded range only (Goyal et al. 2017: up to ~8k for ResNet-50 from 256,
# i.e. 32x with warm-up; we stay well inside); AdaScale adapts its gain to the measured noise.
MAX_GROWTH: dict[str, float | None] = {"none": 1.0, "sqrt": 4.0, "linear": 8.0, "adascale": None}


def lr_factor(rule: str, global_batch: int, base_global_batch: int, s: float = float("nan"),
              g2: float = float("nan")) -> float:
    if rule not in RULES:
        raise ValueError(f"lr_rule={rule!r}: choose one of {RULES}")
    if base_global_batch <= 0 or global_batch <= 0:
        raise ValueError(f"global batch {global_batch} and base {base_global_batch} must be >= 1")
    ratio = global_batch / base_global_batch
    if rule == "none":
        return 1.0
    if rule == "linear":
        return ratio
    if rule == "sqrt":
        return math.sqrt(ratio)
    if not (math.isfinite(s) and math.isfinite(g2)) or s <= 0 or g2 <= 0:
        return 1.0
    return (s / base_global_batch + g2) / (s / global_batch + g2)


class LRScaler:
    """Applies lr_factor to an optimizer's param groups, composing with user schedulers."""

    def __init__(self, rule: str) -> None:
        if rule not in RULES:
            raise ValueError(f"lr_rule={rule!r}: choose one of {RULES}")
        self.rule = rule
        self.factor = 1.0

    def apply(self, optimizer, factor: float) -> None:  # noqa: ANN001 - any torch optimizer
        if not math.isfinite(factor) or factor <= 0:
            return
        change = factor / self.factor
        if change != 1.0:
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * change
        self.factor = factor
