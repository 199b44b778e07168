"""Session 76: paired 90% intervals (replay.paired.geomean_interval) of the draws trained in the collective
world against the shipped default, over the 24 cells x test seeds 5-44 of runs/s76/eval_cache.json (collective).

    PYTHONPATH=. .venv/bin/python docs/results/s76/paired.py runs/s76/eval_cache.json
"""
import json
import sys

from dynamix_hvd.agent.replay_eval import episode_key, policy_tag
from dynamix_hvd.replay.paired import geomean_interval

cache = json.load(open(sys.argv[1]))
cells = [(w, t, n) for w in ("bert", "cifar10", "deepspeech2", "ncf")
         for t in ("none", "job_3_norm", "cov:coefficient_variation") for n in (8, 32)]
seeds = range(5, 45)
tag = {"mu0": policy_tag("dynamix_hvd/agent/policies/default.zip"),
       "c0": policy_tag("runs/s76/coll_s0_box.zip"), "c1": policy_tag("runs/s76/coll_s1_box.zip")}


def times(label, w, t, n):
    return [cache[episode_key(w, t, n, s, tag[label], sync_model="collective")] for s in seeds]


for a in ("c0", "c1"):
    lo, hi = geomean_interval([(times(a, *c), times("mu0", *c)) for c in cells])
    print(f"{a} / mu0 (collective world, 24 cells x seeds 5-44): 90% paired interval [{lo:.3f}, {hi:.3f}]")
