"""Online fine-tuning (``controllers.finetune.FineTuner``) on simulated episodes: the benchmark's
and the tests' stand-in for a live job, driven by the live controller loop (``decide.control_loop``)."""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from dynamix_hvd.agent.reward import sim_reward
from dynamix_hvd.agent.sim import ClusterSim
from dynamix_hvd.controllers import make_controller
from dynamix_hvd.controllers.live_reward import live_reward
from dynamix_hvd.decide import control_loop
from dynamix_hvd.plan import Plan


STALL_EPISODES = 20     # episodes in a row without a transition before finetune_in_sim gives up


def finetune_in_sim(sim_config: Any, scenario: str | None, n_workers: int, *, updates: int, steps: int = 32,
                    lr: float = 1e-4, epochs: int = 4, seed: int = 0, episodes: int | None = None,
                    policy: str | os.PathLike | None = None, oracle_reference: bool = False,
                    support: bool = True, log: Any = None) -> tuple[Any, dict[str, Any]]:
    """Fine-tune one ``PPOController(finetune=True)`` on consecutive simulated episodes (even seeds
    ``2 * (1000 * seed + episode)``; evaluation uses odd ones) until ``updates`` PPO updates ran, or
    for exactly ``episodes`` episodes. Simulated decisions are ~1 ms apart, so the loop waits for a
    launched update to finish before the next decision (live, decisions are seconds apart); the run
    is therefore deterministic. Returns the controller and figures (per-episode online returns of
    the sampled actions, live-minus-simulator reward per decision, update durations, wall time).

    With ``support`` (the controller's default) a policy that records its training support learns
    only from the decisions inside it; if ``STALL_EPISODES`` episodes in a row add no transition
    (every decision outside, e.g. the replay-trained default in this simulator) a ``RuntimeError``
    says so instead of looping forever: ``support=False`` fine-tunes it everywhere."""
    sim = ClusterSim(sim_config)
    ctl: Any = None
    ep, online, est_err, seen = 0, [], [], []
    t0 = time.perf_counter()
    while (ctl is None or ctl.finetuner.n_updates < updates) if episodes is None else ep < episodes:
        sim.reset(2 * (1000 * seed + ep), scenario, n_workers)
        cl = sim.cluster
        bounds = sim.bounds(0.05)
        if ctl is None:
            ctl = make_controller("ppo", bounds, cl.base_batch, policy=policy, finetune=True, finetune_steps=steps,
                                  finetune_lr=lr, finetune_epochs=epochs, seed=seed, support=support,
                                  reference_goodput_fn=(lambda _st: sim.oracle()[1]) if oracle_reference else None)
        else:     # a new cluster of the same size: keep the weights, restart the decision state
            ctl.bounds, ctl.base_batch = bounds, cl.base_batch
            ctl.reset_episode()
        ret = 0.0
        plan, out = Plan.uniform(cl.n, cl.base_batch), None
        for prev, plan, out in control_loop(sim, ctl, bounds, plan):
            # the decision that chose `plan` may have launched an update: it finishes before the next one
            ctl.finetuner.wait()
            r = sim_reward(out, prev.batch_sizes)["reward"]
            ret += r
            est_err.append(live_reward(sim.cluster_state(plan, out), prev.batch_sizes,
                                       ref_global_batch=cl.ref_global_batch, bounds=bounds)["reward"] - r)
        if out is not None:
            ctl.decide(sim.cluster_state(plan, out))   # at the episode's end: only delivers the last reward
        ctl.finetuner.wait()
        online.append(ret)
        ep += 1
        seen.append(ctl.finetuner.n_transitions)
        if episodes is None and len(seen) > STALL_EPISODES and seen[-1] == seen[-1 - STALL_EPISODES]:
            raise RuntimeError(
                f"fine-tuning in the simulator: no transition in the last {STALL_EPISODES} episodes "
                f"({ctl.finetuner.n_updates} of {updates} updates): every decision was outside the training "
                f"support recorded in policy {policy or 'default'}; pass support=False to fine-tune it in this world")
        if log is not None and ep % 10 == 0:
            log(f"  episode {ep:4d}  updates {ctl.finetuner.n_updates:3d}  online return (last 10) "
                f"{np.mean(online[-10:]):6.2f}  {time.perf_counter() - t0:5.1f}s")
    ctl.finetuner.wait()
    return ctl, {"episodes": ep, "online_returns": online, "reward_est_err": est_err,
                 "update_s": list(ctl.finetuner.update_s), "wall_s": time.perf_counter() - t0,
                 "stats": ctl.finetune_info()}
