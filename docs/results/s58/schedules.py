"""Session 58 diagnostic: the global-batch schedules (decision, new global batch) of goodput, the default and causal_safe on cifar10, N = 8, no trace, seeds 5 and 6."""
import sys, numpy as np
from dynamix_hvd.replay.runner import make_world, run_one, build_controller, run_controller
w = make_world("cifar10", "none", 8, None, None, None, None, "run")
sim = w.sim
for seed in [5, 6]:
    for name in ["goodput", "ppo", "causal_safe"]:
        r = run_one(sim, name, seed)
        s = r.get("schedule")
        if s is None: print(name, r.get("time_to_target_s")); continue
        # compress schedule
        comp=[]; 
        for i,b in enumerate(s):
            if not comp or comp[-1][1]!=b: comp.append((i,b))
        print(seed, name, round(r["time_to_target_s"] or -1), len(s), comp[:25])
