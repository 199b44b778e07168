"""The reward of one decision interval (documented formula, configurable weights): the terms,
shared by the simulator's reward (``agent.reward.sim_reward``) and the live one of online
fine-tuning (``controllers.live_reward``).

    r = w_eff   * G / G*                                   efficiency
      - w_idle  * mean_i (max_j c_j - c_i) / T             straggler idle time
      - w_churn * mean_i |b_i - b_i'| / b_i'               plan churn (b' = previous plan)
      - w_instab * ( |log2(B / B')| + max(0, grad_var_trend) )   gradient instability
      - w_gen   * ( max(0, log2(B / (gen_ratio * phi))) + 10 * max(0, val_loss_trend) )   generalisation

with G = B / T * E(B) the goodput (throughput x statistical efficiency E(B) = (phi + B_ref)/(phi + B),
phi = gradient noise scale, B_ref = initial global batch), G* the goodput of the oracle split of
B_ref (true speeds, no noise), c_i the compute time of rank i and T the step time.

In the simulator G* is known exactly. Live, pass the best goodput estimate available (e.g. the
goodput model's optimum) or leave it None to use G alone (then the efficiency term is in samples/s
scaled by ``1 / reference``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class RewardWeights:
    eff: float = 1.0
    idle: float = 0.5
    churn: float = 0.1
    instab: float = 0.1
    gen: float = 0.2
    gen_ratio: float = 2.0   # a global batch up to gen_ratio x the noise scale is not penalised

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Mapping[str, float]) -> "RewardWeights":
        return RewardWeights(**{k: float(v) for k, v in d.items()})


def reward_terms(
    *,
    goodput: float,
    reference_goodput: float,
    compute_s: Sequence[float],
    step_s: float,
    sizes: Sequence[float],
    prev_sizes: Sequence[float],
    noise_scale: float,
    grad_var_trend: float = 0.0,
    val_loss_trend: float = 0.0,
    weights: RewardWeights = RewardWeights(),
) -> dict[str, float]:
    """Each weighted term and their sum under key ``reward``."""
    c = np.asarray(compute_s, dtype=float)
    b = np.asarray(sizes, dtype=float)
    bp = np.asarray(prev_sizes, dtype=float)
    B, Bp = float(b.sum()), float(bp.sum())
    eff = goodput / reference_goodput if reference_goodput > 0 else 0.0
    idle = float(np.mean((c.max() - c) / step_s)) if step_s > 0 and c.size else 0.0
    churn = float(np.mean(np.abs(b - bp) / np.maximum(bp, 1.0))) if bp.size == b.size else 0.0
    instab = abs(math.log2(B / Bp)) if B > 0 and Bp > 0 else 0.0
    instab += max(0.0, grad_var_trend) if math.isfinite(grad_var_trend) else 0.0
    gen = 0.0
    if math.isfinite(noise_scale) and noise_scale > 0 and B > 0:
        gen += max(0.0, math.log2(B / (weights.gen_ratio * noise_scale)))
    if math.isfinite(val_loss_trend):
        gen += 10.0 * max(0.0, val_loss_trend)
    terms = {
        "efficiency": weights.eff * eff,
        "idle": -weights.idle * idle,
        "churn": -weights.churn * churn,
        "instability": -weights.instab * instab,
        "generalisation": -weights.gen * gen,
    }
    terms["reward"] = float(sum(terms.values()))
    return terms
