"""Would a support that also sees the feature groups a policy does not (network, system) keep it
from departing on workloads unlike its training ones? (session 51; an experiment, not the product)

A policy trained with ``--disable system,network`` sees neither the step-time economics
(``mean_comm_frac``) nor the stragglers (``imbalance``), so its recorded support (the nearest-neighbour
test over the global columns that vary, ``controllers.policy.support``) cannot tell ncf's curves on
ncf's cheap steps from ncf's curves on cifar10's steps, where passing the noise-scale hold costs
(session 50's held-out tail). This fits the support of the *unmasked* observations the policy acts on
in its training worlds (drawn as ``dynamix policy-support`` draws them: 24 + 24 large, seed 0) and
counts, per cell (seeds 5-9, the policy run with its own support and guard, no warm-up), the policy's
departures and how many of them the wider support would have refused.

    python benchmarks/support_sees_network.py POLICY_sup.zip WORKLOAD:TRACE:N [...]
"""
from __future__ import annotations

import argparse

import numpy as np

from dynamix_hvd.agent.support_fit import global_columns, training_world_specs
from dynamix_hvd.controllers.policy.io import load_policy
from dynamix_hvd.controllers.policy.support import fit
from dynamix_hvd.controllers.ppo import PPOController
from dynamix_hvd.replay.runner import run_controller
from dynamix_hvd.replay.worlds import WorldSpec, build_sim
from dynamix_hvd.state import FEATURE_NAMES, ObsConfig, build_observation


def rollout(policy: str, sim, seed: int, guarded: bool) -> tuple[list[tuple[np.ndarray, bool, bool]], int]:
    """(unmasked observation, outside the recorded support, departed) per decision of ``policy`` on ``sim``."""
    ctl = PPOController(sim.bounds(), sim.base_batch, policy=policy, support=guarded, refute=2 if guarded else 0,
                        warmup=0)
    rec, cur = [], {}
    observe, act = ctl.observe, ctl.act

    def observe_full(state):
        cur["full"] = build_observation(state, ref_global_batch=ctl.base_batch * state.world_size,
                                        last_global_action=ctl.last_global, config=ObsConfig())
        return observe(state)

    def recording_act(o):
        levels, g = act(o)
        rec.append((cur["full"], bool(ctl.last_outside), g != ctl.action_config.noop_global))
        return levels, g
    ctl.observe, ctl.act = observe_full, recording_act       # type: ignore[method-assign]
    run_controller(sim, "ppo", seed, 2000, controller=ctl)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy")
    ap.add_argument("cells", nargs="+", help="WORKLOAD:TRACE:N")
    ap.add_argument("--seeds", type=int, default=5)
    a = ap.parse_args()
    _, cfg = load_policy(a.policy)
    train = []
    for spec in training_world_specs(cfg, 24, 24, seed=0):     # as ``dynamix policy-support`` draws them
        train += [full for full, _, _ in rollout(a.policy, build_sim(spec), spec.seed, False)]
    G = list(global_columns())
    wide = fit(train, FEATURE_NAMES, G)
    print(f"wider support: {len(train)} decisions, nearest-neighbour columns "
          f"{[FEATURE_NAMES[j] for j in wide.near_columns]}, radius {wide.radius:.3f}")
    print("| cell | decisions | outside the recorded support | departures | departures outside the wider support |")
    print("|---|---|---|---|---|")
    for cell in a.cells:
        wl, rest = cell.split(":", 1)
        trace, n = rest.rsplit(":", 1)
        dec = out_old = dep = dep_wide = 0
        for s in range(5, 5 + a.seeds):
            for full, outside, departed in rollout(a.policy, build_sim(WorldSpec(wl, int(n), trace, s)), s, True):
                g = full[0, wide.near_columns]
                box = bool(((full[:, G].min(0) < wide.lo[G]) | (full[:, G].max(0) > wide.hi[G])).any())
                dec, out_old, dep = dec + 1, out_old + outside, dep + departed
                dep_wide += departed and (box or wide.distance(g) > wide.radius)
        print(f"| {cell} | {dec} | {out_old} | {dep} | {dep_wide} |", flush=True)


if __name__ == "__main__":
    main()
