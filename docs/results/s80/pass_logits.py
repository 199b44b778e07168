"""Session 80: what a pass-head draw's head says on one workload's decisions. For each policy file, replay
episodes (controller alone, as eval-replay --guard off runs it) and record at every decision the network is asked (inside its box, after the warm-up) the global head's
argmax and the pass head's logit; prints, per file, the decisions where the global head chose the
no-op, how many of those the pass head turned into the pass (logit > 0), and the logits' quartiles there.
    .venv/bin/python docs/results/s80/pass_logits.py ncf 5 ZIP [ZIP ...]     # workload, seeds 5..5+S-1"""
import sys
import numpy as np
from dynamix_hvd.controllers.policy.net import RowNet
from dynamix_hvd.replay.runner import make_world, run_controller, build_controller

wl, n_seeds, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rec: list[tuple[int, float, int]] = []
orig = RowNet.actor_heads_numpy


def heads(self, obs):
    row, glob, p = orig(self, obs)
    if self.pass_indices is not None and p is not None:
        rec.append((int(glob.argmax()) == self.pass_indices[0], p, int(glob.argmax())))
    return row, glob, p


RowNet.actor_heads_numpy = heads
for f in files:
    rec.clear()
    times, n_dec = [], 0
    for tr in ("none", "job_3_norm", "cov:coefficient_variation"):
        for n in (8, 32):
            w = make_world(wl, tr, n)
            for seed in range(5, 5 + n_seeds):
                w.sim.reset(seed)
                name = "ppo:" + f
                r = run_controller(w.sim, name, seed, controller=build_controller(name, w.sim, seed))
                times.append(r["time_to_target_s"])
                n_dec += len(r["schedule"])
    noop = np.array([p for is_noop, p, _ in rec if is_noop])
    counts = np.bincount([g for *_, g in rec], minlength=8).tolist()
    print(f"{f}: {wl}, 6 cells x seeds 5-{4 + n_seeds}: {n_dec} decisions, the network asked at {len(rec)}, global head's no-op at {len(noop)}, "
          f"passed {int((noop > 0).sum())}; pass logit at the no-op: quartiles "
          f"{np.round(np.percentile(noop, [25, 50, 75]), 2).tolist() if len(noop) else '-'}; median time {np.median(times):.1f} s; the global head's choices by index {counts}")
