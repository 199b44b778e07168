"""The simulator's reward of one decision interval: the terms of ``dynamix_hvd.reward`` (formula and
weights documented there) on a ``ClusterSim.step`` output, with the oracle goodput as G*."""
from __future__ import annotations

from typing import Mapping, Sequence

from dynamix_hvd.reward import RewardWeights, reward_terms

__all__ = ["RewardWeights", "reward_terms", "sim_reward"]


def sim_reward(out: Mapping, prev_sizes: Sequence[float], weights: RewardWeights = RewardWeights()) -> dict[str, float]:
    """Reward terms of one simulator interval (``ClusterSim.step`` output)."""
    raw = out["raw"]
    return reward_terms(
        goodput=out["goodput"], reference_goodput=out["oracle_goodput"], compute_s=raw[:, 2],
        step_s=out["step_s"], sizes=raw[:, 0], prev_sizes=prev_sizes, noise_scale=out["noise_scale"],
        grad_var_trend=out["grad_var_trend"], val_loss_trend=out["val_loss_trend"], weights=weights,
    )
