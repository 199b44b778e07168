"""Issue 19's headline for policies in an eval-replay cache (seeds 5-44), against session 56's 40-seed table.

The hindsight oracle's medians (and the room cells, goodput / hindsight >= 1.15) come from
docs/results/s56/eval_5_40.txt, the same deterministic worlds; goodput's medians are recomputed from the cache
and printed against that table's as a check. Usage: headline.py CACHE LABEL=CONTROLLER ..."""
import json, statistics, sys
from math import exp, log

TABLE = "docs/results/s56/eval_5_40.txt"
TR = {"none": "none", "job_3": "job_3_norm", "CoV": "cov:coefficient_variation"}


def main() -> None:
    cache = json.load(open(sys.argv[1]))
    labels = dict(a.split("=", 1) for a in sys.argv[2:])
    rows = [r.split("|")[1:-1] for r in open(TABLE) if r.startswith("| ") and not r.startswith("| workload")]
    cells = []
    for r in rows:
        r = [x.strip() for x in r]
        tr = next(v for k, v in TR.items() if r[1].startswith(k))
        cells.append((r[0], tr, int(r[2]), float(r[5]), float(r[9])))

    def med(w, tr, n, ctl):
        t = [cache[f"{w}|{tr}|{n}|{s}|{ctl}"] for s in range(5, 45)]
        if any(x is None for x in t):
            raise SystemExit(f"{w} {tr} {n} {ctl}: an episode did not reach the target")
        return statistics.median(t)

    worst = max(abs(med(w, tr, n, "goodput") / g - 1) for w, tr, n, g, _ in cells)
    print(f"goodput's medians against {TABLE}: largest relative difference {worst:.4f} (rounded to seconds there)")
    for lab, ctl in labels.items():
        r, room, gap, per = [], [], [], {}
        for w, tr, n, _, h in cells:
            g, p = med(w, tr, n, "goodput"), med(w, tr, n, ctl)
            r.append(p / g)
            per.setdefault(w, []).append(log(p / g))
            if g / h >= 1.15:
                room.append(p / g)
            gap.append((g - p) / (g - h))
        gm = lambda xs: exp(sum(log(x) for x in xs) / len(xs))
        print(f"{lab}: 24 cells x seeds 5-44, geomean / goodput {gm(r):.4f}, in the {len(room)} cells with goodput / "
              f"hindsight >= 1.15 {gm(room):.3f}, largest cell {max(r):.3f}, gap to hindsight closed "
              f"{sum(gap) / len(gap):+.2f}; per workload " + ", ".join(f"{w} {exp(sum(v) / len(v)):.3f}" for w, v in per.items()))


if __name__ == "__main__":
    main()
