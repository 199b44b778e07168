"""Run any controller (static, oracle, ..., ppo) through one simulated episode.

This is the controller loop of the live hook (``decide.control_loop``: ClusterState ->
controller.decide -> plan.next_plan -> one interval) on simulated records, plus the reward. No
per-decision move limits: the policy was trained without them. The env uses the same simulator,
action mapping and reward, so a PPO controller here sees what the policy saw in training.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dynamix_hvd.agent.reward import RewardWeights, sim_reward
from dynamix_hvd.agent.sim import ClusterSim, SimConfig
from dynamix_hvd.controllers import make_controller
from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.decide import control_loop
from dynamix_hvd.plan import Plan


@dataclass
class EpisodeResult:
    controller: str
    scenario: str
    n_workers: int
    ret: float
    mean_goodput_ratio: float
    terms: dict[str, float] = field(default_factory=dict)
    decisions: int = 0
    plan_changes: int = 0


ControllerFactory = Callable[[ClusterSim], Controller]


def factory(name: str, **kwargs: Any) -> ControllerFactory:
    """A factory building controller ``name`` for the sim's current cluster (oracle gets the truth)."""
    def build(sim: ClusterSim) -> Controller:
        cl = sim.cluster
        assert cl is not None
        kw = dict(kwargs)
        if name == "oracle":
            kw.setdefault("speed_fn", sim.true_speeds)
        return make_controller(name, sim.bounds(kw.pop("deadband", 0.05)), cl.base_batch, **kw)
    return build


def run_episode(sim: ClusterSim, build: ControllerFactory, seed: int, scenario: str | None = None,
                n_workers: int | None = None, weights: RewardWeights = RewardWeights(),
                name: str = "", deadband: float = 0.05) -> EpisodeResult:
    sim.reset(seed, scenario, n_workers)
    cl = sim.cluster
    assert cl is not None
    bounds = sim.bounds(deadband)
    ctl = build(sim)
    ret, ratios, changes = 0.0, [], 0
    sums: dict[str, float] = {}
    for prev, plan, out in control_loop(sim, ctl, bounds, Plan.uniform(cl.n, cl.base_batch)):
        changes += int(plan is not prev)
        terms = sim_reward(out, prev.batch_sizes, weights)
        ret += terms["reward"]
        for k, v in terms.items():
            sums[k] = sums.get(k, 0.0) + v
        ratios.append(out["goodput"] / out["oracle_goodput"])
    return EpisodeResult(name or getattr(ctl, "name", "?"), cl.scenario, cl.n, ret, float(np.mean(ratios)),
                         sums, len(ratios), changes)


def evaluate_controller(build: ControllerFactory, seeds: list[int], config: SimConfig,
                        scenario: str | None = None, n_workers: int | None = None,
                        weights: RewardWeights = RewardWeights(), name: str = "") -> list[EpisodeResult]:
    sim = ClusterSim(config)
    return [run_episode(sim, build, s, scenario, n_workers, weights, name) for s in seeds]
