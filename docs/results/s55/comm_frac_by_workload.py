"""Session 55: mean_comm_frac (the observation column) at the quartiles of goodput's decisions, seed 5, no trace.

    PYTHONPATH=. .venv/bin/python docs/results/s55/comm_frac_by_workload.py

Prints: workload N decisions, then value@global batch at the 0, 25, 50, 75% decision."""
import numpy as np
from dynamix_hvd.replay.runner import make_world, build_controller, run_controller
from dynamix_hvd.state import build_observation, FEATURE_NAMES
j = FEATURE_NAMES.index("mean_comm_frac")
for wl in ["bert", "cifar10", "deepspeech2", "ncf", "benchmarks/heldout_workloads/yolov3"]:
    for n in (8, 32):
        w = make_world(wl, "none", n); sim = w.sim
        ctl = build_controller("goodput", sim, 5)
        vals = []
        orig = ctl.decide
        def dec(state, orig=orig):
            vals.append((build_observation(state)[0, j], state.plan.global_batch)); return orig(state)
        ctl.decide = dec
        run_controller(sim, "goodput", 5, controller=ctl)
        v = np.array(vals)
        q = [v[int(len(v)*f)] for f in (0, .25, .5, .75)] if len(v) else []
        print(wl.split('/')[-1], n, len(v), " ".join(f"{a:.2f}@{b:.0f}" for a, b in q))
