"""Session 58 diagnostic: goodput on cifar10, N = 8, no speed trace, seed 5; the fit at decisions 33-37, where the
global batch dips 864 -> 576 -> 864 as the oldest points of the 16-decision overlap history age out."""
import sys, numpy as np
from dynamix_hvd.replay.runner import make_world, build_controller
from dynamix_hvd.decide import decide_plan
from dynamix_hvd.safety import MoveLimits
from dynamix_hvd.plan import Plan
w = make_world("cifar10", "none", 8, None, None, None, None, "run")
sim = w.sim; seed=5
sim.reset(seed)
ctl = build_controller("goodput", sim, seed)
plan = Plan.uniform(sim.n, sim.base_batch); bounds=sim.bounds(); lim=MoveLimits()
out = sim.step(plan.batch_sizes)
from dynamix_hvd.controllers.affine import identified
for i in range(1, 40):
    st = sim.cluster_state(plan, out)
    new, *rest = decide_plan(ctl, st, bounds, sim.t, lim)
    if i in (33,34,35,36,37):
        a,b = ctl.model.fit()
        obs = ctl.model.obs[0]
        print(i, plan.global_batch, "->", new.global_batch, "alpha0 %.4f beta0 %.6f ident %s" % (a[0], b[0], identified([o[0] for o in obs])), "overlap", ctl.last_fit["overlap"], "sizes", sorted(set(round(o[0]) for o in obs)), "syncB", sorted(set(round(x[2]) for x in ctl.sync_history)))
    plan = new
    out = sim.step(plan.batch_sizes)
