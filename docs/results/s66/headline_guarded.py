"""Session 66: issue 19's replay headline (24 shipped cells x seeds 5-44) with goodput and the default policy
behind the live guard (session 66's, guard_retries = 1), and alone. The oracles and static do not run behind the
guard, so their medians are session 56's (docs/results/s56/eval_5_40.txt, the same worlds and seeds); the check
that the worlds are the same: goodput alone here against that table's goodput column, cell by cell.

    .venv/bin/python docs/results/s66/headline_guarded.py runs/s66/guard_cache.json
"""
import sys
from collections import defaultdict

import numpy as np

from dynamix_hvd.agent.replay_eval import median_time, summarise

TRACES = {"none": "none", "job_3": "job_3_norm", "CoV": "cov:coefficient_variation"}
POLICY = "ppo#180cd83659cd?refute=2&warmup=16"


def table_s56(path="docs/results/s56/eval_5_40.txt"):
    lines = [ln for ln in open(path) if ln.startswith("| ")]
    head = [h.strip() for h in lines[0].strip("|\n").split("|")]
    out = {}
    for ln in lines[1:]:
        v = [x.strip() for x in ln.strip("|\n").split("|")]
        row = dict(zip(head, v))
        out[(row["workload"], TRACES[row["trace"]], int(row["N"]))] = {
            k: float(row[k]) for k in ("static", "goodput", "hindsight", "causal")}
    return out


def main(cache_path):
    import json
    cache = json.load(open(cache_path))
    per = defaultdict(lambda: defaultdict(dict))
    for k, t in cache.items():
        wl, tr, n, seed, label = k.split("|", 4)
        if 5 <= int(seed) <= 44:
            per[(wl, tr, int(n))][label][int(seed)] = t
    ref = table_s56()
    worst = 0.0
    runs = {"alone": ("goodput", POLICY), "guarded": ("goodput|guard-r1", POLICY + "|guard-r1")}
    for name, (g, p) in runs.items():
        cells = []
        for cell, r in sorted(ref.items()):
            got = per[cell]
            if len(got.get(g, {})) < 40 or len(got.get(p, {})) < 40:
                sys.exit(f"{cell}: {g} or {p} lacks seeds 5-44 in {cache_path}")
            gm, pm = median_time(list(got[g].values())), median_time(list(got[p].values()))
            if name == "alone":
                worst = max(worst, abs(gm / r["goodput"] - 1))
            cells.append({"workload": cell[0], "trace": cell[1], "workers": cell[2],
                          "median": {"goodput": gm, "ppo": pm, "static": r["static"], "hindsight": r["hindsight"],
                                     "causal": r["causal"]}})
        s = summarise(cells, "ppo")
        print(f"{name}: ppo / goodput {s['geomean_vs_goodput']:.3f} over {s['cells']} cells, "
              f"{s['geomean_vs_goodput_in_gap_cells']:.3f} in the {s['cells_gap_ge_1.15']} cells with goodput / "
              f"hindsight >= 1.15, largest cell {s['max_vs_goodput']:.3f}, gap to hindsight closed "
              f"{s['gap_closed_mean']:+.2f}, ppo / static at N = 32 {s['vs_static_at_32']:.3f}; per workload "
              + ", ".join(f"{w} {v:.3f}" for w, v in s["geomean_vs_goodput_per_workload"].items()))
    print(f"goodput alone against session 56's table: largest relative difference of a cell's median {worst:.4f} "
          "(the table rounds to whole seconds)")


if __name__ == "__main__":
    main(sys.argv[1])
