"""One controller's replay times in two ``dynamix eval-replay`` caches (e.g. before and after a
change to it): per cell (workload x trace x N) the median time to target over the seeds both hold,
the ratio B / A, and the geometric mean of the ratios per workload and overall (a miss counts as
infinitely slow, as in eval-replay), with the paired bootstrap interval of B / A
(``replay.paired.ratio_interval``: a seed's world is the same for both controllers when the two caches come from
the same cells), the cells whose interval lies above 1.03, and the paired bootstrap interval of the
overall geometric mean (``replay.paired.geomean_interval``: is an ablation measurably slower?).

    .venv/bin/python benchmarks/compare_eval_caches.py runs/s29/eval_cache.json runs/s31/eval_cache.json \\
        --controller goodput [--controller-b ppo#HASH]
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from dynamix_hvd.agent.replay_eval import seed_range
from dynamix_hvd.replay.paired import NOT_ABOVE, geomean_interval, ratio_interval


def _cells(cache: dict, label: str) -> dict[tuple[str, str, str], dict[int, float]]:
    out: dict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)
    for k, v in cache.items():
        wl, tr, n, seed, lb = k.split("|", 4)
        if lb == label:
            out[(wl, tr, n)][int(seed)] = math.inf if v is None else float(v)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cache_a")
    p.add_argument("cache_b")
    p.add_argument("--controller", default="goodput", help="label in cache A (and B unless --controller-b)")
    p.add_argument("--controller-b", default=None)
    p.add_argument("--by-workers", action="store_true", help="also the geometric means per world size")
    p.add_argument("--seeds", default=None, metavar="LO-HI", type=seed_range,
                   help="only these seeds (e.g. 5-14; default: every seed both caches hold for a cell)")
    a = p.parse_args(argv)
    keep = set(a.seeds) if a.seeds is not None else None
    A = _cells(json.loads(Path(a.cache_a).read_text()), a.controller)
    B = _cells(json.loads(Path(a.cache_b).read_text()), a.controller_b or a.controller)
    per_wl: dict[str, list[float]] = defaultdict(list)
    per_n: dict[tuple[int, bool], list[float]] = defaultdict(list)
    above = 0
    pairs = []
    for cell in sorted(set(A) & set(B)):
        seeds = sorted(set(A[cell]) & set(B[cell]) & (keep if keep is not None else set(A[cell])))
        if not seeds:
            continue
        ma = float(np.median([A[cell][s] for s in seeds]))
        mb = float(np.median([B[cell][s] for s in seeds]))
        r = mb / ma if math.isfinite(ma) and ma > 0 else math.nan
        pairs.append(([B[cell][s] for s in seeds], [A[cell][s] for s in seeds]))
        lo, hi = ratio_interval(*pairs[-1])
        above += lo > NOT_ABOVE
        per_wl[cell[0]].append(r)
        per_n[(int(cell[2]), cell[1] != "none")].append(r)
        print(f"{cell[0]:12s} {cell[1]:26s} N={cell[2]:>3s} seeds {len(seeds):2d}  A {ma:9.0f} s  B {mb:9.0f} s  "
              f"B/A {r:.3f} [{lo:.2f}, {hi:.2f}]")
    allr = [r for v in per_wl.values() for r in v]
    if not allr:
        print("no cell in both caches")
        return 1
    print("\ngeomean B/A per workload: " + "  ".join(f"{w} {math.exp(np.mean(np.log(v))):.3f}" for w, v in per_wl.items()))
    if a.by_workers:
        print("geomean B/A per world size (homogeneous: trace none; heterogeneous: the others):")
        for n in sorted({k[0] for k in per_n}):
            parts = [f"{name} {math.exp(np.mean(np.log(v))):.3f} (max {max(v):.3f}, {len(v)} cells)"
                     for name, v in (("homogeneous", per_n.get((n, False))), ("heterogeneous", per_n.get((n, True)))) if v]
            print(f"  N={n:3d}  " + "  ".join(parts))
    print(f"overall {math.exp(np.mean(np.log(allr))):.3f} over {len(allr)} cells; max cell {max(allr):.3f}, min {min(allr):.3f}; "
          f"{above} cells whose 90% interval is above {NOT_ABOVE}")
    glo, ghi = geomean_interval(pairs)
    print(f"overall B/A 90% paired bootstrap interval [{glo:.3f}, {ghi:.3f}] (each cell's seeds resampled as pairs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
