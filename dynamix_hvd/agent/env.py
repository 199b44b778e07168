"""gymnasium Env around the cluster simulator (passes stable-baselines3's env checker).

Observation: Box(n_max, 1 + F). Column 0 is the valid-worker mask; columns 1.. are the features
of ``dynamix_hvd.state`` (local + global per worker row); rows beyond the episode's N are zero.
Action: MultiDiscrete([n_levels] * n_max + [n_global_scales]); the entries of padded rows are
ignored (the policy pins them to "no change"), the last entry picks the global-batch scale.
One env step = one decision interval of K training steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from dynamix_hvd.controllers.policy.actions import ActionConfig, global_action_feature, make_anchor, proposal_from_action
from dynamix_hvd.controllers.policy.net import OBS_LIMIT
from dynamix_hvd.agent.reward import RewardWeights, sim_reward
from dynamix_hvd.agent.sim import ClusterSim, SimConfig
from dynamix_hvd.plan import Plan, next_plan
from dynamix_hvd.state import N_FEATURES, ObsConfig, observation_from_arrays, pad_rows



@dataclass(frozen=True)
class EnvConfig:
    sim: SimConfig = field(default_factory=SimConfig)
    obs: ObsConfig = field(default_factory=ObsConfig)
    action: ActionConfig = field(default_factory=ActionConfig)
    reward: RewardWeights = field(default_factory=RewardWeights)
    n_max: int = 64
    deadband: float = 0.05

    def __post_init__(self) -> None:
        if self.sim.n_workers[1] > self.n_max:
            raise ValueError(f"sim.n_workers={self.sim.n_workers} exceeds n_max={self.n_max}")
        if self.obs.n_action_levels != self.action.n_levels:
            object.__setattr__(self, "obs", self.obs.with_levels(self.action.n_levels))

    def to_dict(self) -> dict[str, Any]:
        return {"sim": self.sim.to_dict(), "obs": self.obs.to_dict(), "action": self.action.to_dict(),
                "reward": self.reward.to_dict(), "n_max": self.n_max, "deadband": self.deadband}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "EnvConfig":
        return EnvConfig(SimConfig.from_dict(d.get("sim", {})), ObsConfig.from_dict(d.get("obs", {})),
                         ActionConfig.from_dict(d.get("action", {})), RewardWeights.from_dict(d.get("reward", {})),
                         int(d.get("n_max", 64)), float(d.get("deadband", 0.05)))


class DynamixEnv(gym.Env):
    """Per-worker batch-size adjustment on a randomised simulated cluster."""

    metadata = {"render_modes": []}

    def __init__(self, config: EnvConfig = EnvConfig(), scenario: str | None = None,
                 n_workers: int | None = None) -> None:
        super().__init__()
        self.cfg = config
        self.fixed_scenario = scenario
        self.fixed_n = n_workers
        self.sim = ClusterSim(config.sim)
        f = N_FEATURES + 1
        self.observation_space = gym.spaces.Box(-OBS_LIMIT, OBS_LIMIT, shape=(config.n_max, f), dtype=np.float32)
        nvec = [config.action.n_levels] * config.n_max + [len(config.action.global_scales)]
        self.action_space = gym.spaces.MultiDiscrete(nvec)
        self.plan: Plan | None = None

    # ------------------------------------------------------------------ helpers
    def _obs(self, out: dict[str, Any]) -> np.ndarray:
        o = observation_from_arrays(
            out["raw"], noise_scale=out["noise_scale"], loss_trend=out["loss_trend"],
            grad_var_trend=out["grad_var_trend"], val_loss_trend=out["val_loss_trend"],
            progress=out["progress"], ref_global_batch=out["ref_global_batch"],
            last_action=self.last_levels, last_global_action=self.last_global, config=self.cfg.obs)
        return np.clip(pad_rows(o, self.cfg.n_max), -OBS_LIMIT, OBS_LIMIT)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        sim_seed = 2 * int(self.np_random.integers(2**30 - 1))  # even: eval uses odd seeds (held out)
        sim_seed = int(options.get("sim_seed", sim_seed))
        self.sim.reset(sim_seed, options.get("scenario", self.fixed_scenario), options.get("n_workers", self.fixed_n))
        cl = self.sim.cluster
        assert cl is not None
        self.n = cl.n
        self.bounds = self.sim.bounds(self.cfg.deadband)
        self.plan = Plan.uniform(self.n, cl.base_batch)
        self.target_B = float(self.plan.global_batch)
        self.last_levels = np.zeros(self.n)
        self.last_global = 0.0
        self.anchor = make_anchor(self.cfg.action, self.bounds, cl.base_batch)
        out = self.sim.step(self.plan.batch_sizes)
        self._observe_anchor(out)
        return self._obs(out), {"scenario": cl.scenario, "n_workers": self.n}

    def _observe_anchor(self, out: dict[str, Any], applied_scale: float = 1.0) -> None:
        # what the PPO controller's anchor sees live: the records of the interval just run
        if self.anchor is not None:
            self.anchor.observe(self.sim.cluster_state(self.plan, out), applied_scale)

    def step(self, action: np.ndarray):
        assert self.plan is not None, "call reset() first"
        a = np.asarray(action).reshape(-1)
        k = self.cfg.action.k
        levels = a[: self.n].astype(np.float64) - k
        gidx = int(a[-1])
        prev = self.plan.batch_sizes
        proposed, self.target_B = proposal_from_action(prev, levels, gidx, self.target_B, self.cfg.action, self.bounds,
                                                       self.anchor)
        self.plan = next_plan(self.plan, proposed, self.bounds, start_step=self.sim.t)
        out = self.sim.step(self.plan.batch_sizes)
        self._observe_anchor(out, self.cfg.action.scale(gidx))
        terms = sim_reward(out, prev, self.cfg.reward)
        self.last_levels = levels
        self.last_global = global_action_feature(gidx, self.cfg.action)
        obs = self._obs(out)
        info = {k2: v for k2, v in terms.items()}
        info["goodput_ratio"] = out["goodput"] / out["oracle_goodput"]
        return obs, float(terms["reward"]), False, bool(self.sim.done), info


def make_env(config: EnvConfig, seed: int = 0, **kw: Any):
    """A thunk for SB3 vector envs."""
    def _thunk() -> DynamixEnv:
        env = DynamixEnv(config, **kw)
        env.reset(seed=seed)
        return env
    return _thunk
