"""Issue 19's headline for policies in an eval-replay cache (seeds 5-44), against session 56's 40-seed table.

The hindsight oracle's and static's medians (and so the room cells, goodput / hindsight >= 1.15) come from
docs/results/s56/eval_5_40.txt, the same deterministic worlds; goodput's and the policies' medians from the cache
(goodput's printed against that table's as a check). The statistics are eval-replay's own
(``agent.replay_eval.summarise``). Usage: headline.py [--guarded] CACHE LABEL=CONTROLLER ... (--guarded: the
episodes of goodput and the policies behind the live guard, eval-replay's ``|guard-r1`` entries; session 74)"""
import json
import sys

from dynamix_hvd.agent.replay_eval import median_time, summarise

TABLE = "docs/results/s56/eval_5_40.txt"
TRACES = {"none": "none", "job_3": "job_3_norm", "CoV": "cov:coefficient_variation"}
SEEDS = range(5, 45)


def table_cells() -> list[dict]:
    rows = [[x.strip() for x in r.split("|")[1:-1]] for r in open(TABLE)
            if r.startswith("| ") and not r.startswith("| workload")]
    return [{"workload": r[0], "trace": TRACES[r[1]], "workers": int(r[2]),
             "median": {"static": float(r[3]), "goodput": float(r[5]), "hindsight": float(r[9])}} for r in rows]


def main() -> None:
    args = sys.argv[1:]
    guarded = args[0] == "--guarded"
    args = args[1:] if guarded else args
    cache = json.load(open(args[0]))
    if guarded:      # the guarded episodes under the controllers' plain labels
        cache = {k[:-len("|guard-r1")]: v for k, v in cache.items() if k.endswith("|guard-r1")}
    labels = dict(a.split("=", 1) for a in args[1:])
    cells = table_cells()
    worst = 0.0
    for c in cells:
        key = f"{c['workload']}|{c['trace']}|{c['workers']}|{{}}|{{}}"
        g = median_time([cache[key.format(s, "goodput")] for s in SEEDS])
        worst = max(worst, abs(g / c["median"]["goodput"] - 1))
        c["median"]["goodput"] = g
        for lab, ctl in labels.items():
            c["median"][lab] = median_time([cache[key.format(s, ctl)] for s in SEEDS])
    print(f"goodput's medians against {TABLE}: largest relative difference {worst:.4f} (rounded to seconds there)")
    for lab in labels:
        s = summarise(cells, lab)
        print(f"{lab}: {s['cells']} cells x seeds 5-44, geomean / goodput {s['geomean_vs_goodput']:.4f}, in the "
              f"{s['cells_gap_ge_1.15']} cells with goodput / hindsight >= 1.15 {s['geomean_vs_goodput_in_gap_cells']:.3f}, "
              f"largest cell {s['max_vs_goodput']:.3f}, gap to hindsight closed {s['gap_closed_mean']:+.2f}, "
              f"/ static at N = 32 {s['vs_static_at_32']:.3f}; per workload "
              + ", ".join(f"{w} {v:.3f}" for w, v in s["geomean_vs_goodput_per_workload"].items()))


if __name__ == "__main__":
    main()
