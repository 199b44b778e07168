"""Session 66: why the live guard fired on goodput in YOLOv3 CoV N = 8 (seeds given): each decision's goodput inputs
around the firing.  PYTHONPATH=. .venv/bin/python docs/results/s66/diag_guard.py benchmarks/heldout_workloads/yolov3 \
    cov:coefficient_variation 8 6,10 [goodput]"""
import sys, math
import numpy as np
from dynamix_hvd.replay.worlds import WorldSpec, build_sim
from dynamix_hvd.replay.runner import run_controller
from dynamix_hvd import decide as D

wl, tr, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
seeds = [int(s) for s in sys.argv[4].split(",")]
orig = D.Decider._propose
LOG = []
def patched(self, state, current, start_step, record):
    g = state.glob
    LOG.append(dict(B=current.global_batch, sps=g.samples_per_s, phi=g.noise_scale, stable=g.noise_scale_stable,
                    base=self.guard.baseline, baseB=self.guard.baseline_B, bad=self.guard.bad, ctl=self.controller.name))
    out = orig(self, state, current, start_step, record)
    LOG[-1]["goodput"] = record.get("goodput"); LOG[-1]["fb"] = record.get("fallback")
    return out
D.Decider._propose = patched
for s in seeds:
    LOG.clear()
    sim = build_sim(WorldSpec(wl, n, tr, s))
    r = run_controller(sim, sys.argv[5] if len(sys.argv) > 5 else "goodput", s, guard=True)
    print(f"seed {s}: t={r['time_to_target_s']} fallback at {r['fallback']} reverts {r['reverts']}")
    if r["fallback"] is not None:
        k = r["fallback"]
        for i in range(max(0, k - 6), min(len(LOG), k + 3)):
            e = LOG[i]
            print(f"  d{i:4d} {e['ctl']:10s} B={e['B']:7.1f} sps={e['sps']:9.2f} phi={e['phi']:10.1f} st={e['stable']} "
                  f"gp={e['goodput']:9.3f} base={e['base']:9.3f} baseB={e['baseB']:7.1f} bad={e['bad']} fb={'Y' if e['fb'] else ''}")
