"""Session 77: the validation cache's per-workload geometric means (median per cell over seeds 1000-1009, over
goodput's), for every policy in it: where a draw gains or loses in distribution.

    .venv/bin/python docs/results/s77/validation_per_workload.py runs/s77/select_cache.json
"""
import collections
import json
import math
import statistics as st
import sys

d = json.load(open(sys.argv[1]))


def t(v):
    return v["time_to_target_s"] if isinstance(v, dict) else v


for tag in sorted({k.split("|", 4)[4] for k in d if k.split("|", 4)[4].startswith("ppo")}):
    cells = collections.defaultdict(lambda: ([], []))
    for k, v in d.items():
        wl, tr, n, s, who = k.split("|", 4)
        if who == "goodput":
            cells[(wl, tr, n)][0].append(t(v))
        if who == tag:
            cells[(wl, tr, n)][1].append(t(v))
    per = collections.defaultdict(list)
    for (wl, tr, n), (g, p) in cells.items():
        if p:
            per[wl].append(math.log(st.median(p) / st.median(g)))
    print(tag, {w: round(math.exp(sum(v) / len(v)), 3) for w, v in sorted(per.items())})
