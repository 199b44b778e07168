"""Session 76: the shipped default's held-out figures in the collective-sync world, read from the episode cache
that docs/results/s76/heldout_collective.sh fills: per workload the geometric mean over its six cells of
median(policy) / median(goodput), the largest cell, and each cell's 90% paired interval above 1.03 or not.

    PYTHONPATH=. .venv/bin/python docs/results/s76/heldout.py runs/s76/eval_cache.json
"""
import json
import math
import sys

from dynamix_hvd.agent.replay_eval import episode_key, median_time, policy_tag
from dynamix_hvd.replay.paired import ratio_interval

cache = json.load(open(sys.argv[1]))
TRACES, NS = ("none", "job_3_norm", "cov:coefficient_variation"), (8, 32)
rows = [(f"left out: {w}", w, policy_tag(f"runs/s74/loo_{w}_mu0_box.zip"), range(5, 25))
        for w in ("bert", "cifar10", "deepspeech2", "ncf")]
mu0 = policy_tag("dynamix_hvd/agent/policies/default.zip")
rows += [("YOLOv3", "benchmarks/heldout_workloads/yolov3", mu0, range(5, 25)),
         ("ImageNet", "benchmarks/heldout_workloads/imagenet", mu0, range(5, 10))]
for label, wl, tag, seeds in rows:
    if episode_key(wl, "none", 8, seeds[0], tag, sync_model="collective") not in cache:
        print(f"{label:22s} not run yet")
        continue
    ratios, above = [], 0
    for t in TRACES:
        for n in NS:
            a = [cache[episode_key(wl, t, n, s, tag, sync_model="collective")] for s in seeds]
            g = [cache[episode_key(wl, t, n, s, "goodput", sync_model="collective")] for s in seeds]
            ratios.append(median_time(a) / median_time(g))
            above += ratio_interval(a, g)[0] > 1.03
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"{label:22s} seeds {seeds.start}-{seeds.stop - 1}: {gm:.3f}x goodput, largest cell {max(ratios):.3f}, "
          f"cells whose 90% interval is above 1.03: {above}")
