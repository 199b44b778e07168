"""Session 67: is an ablation measurably worse over its training draws? Each argument is one training
seed's paired geometric mean of ablated / full over the shipped cells (``compare_eval_caches.py``'s
"overall B/A"); the unit is the training draw, so the interval is a t-interval of the mean log ratio
over the draws (the eval seeds' noise is inside each draw's figure). Prints the mean ratio, its 90%
interval and how many draws are individually above 1.

    .venv/bin/python docs/results/s67/pooled.py 1.004 1.025 0.997 R3 R4 R5 R6
"""
from __future__ import annotations

import math
import sys

import numpy as np
from scipy import stats


def pooled(ratios: list[float], level: float = 0.90) -> tuple[float, float, float]:
    x = np.log(np.asarray(ratios, dtype=float))
    if x.size < 2:
        raise ValueError(f"pooled: need >= 2 training draws, got {x.size}")
    m, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))
    t = float(stats.t.ppf((1 + level) / 2, x.size - 1))
    return math.exp(m), math.exp(m - t * se), math.exp(m + t * se)


def main(argv: list[str]) -> int:
    r = [float(a) for a in argv]
    m, lo, hi = pooled(r)
    print(f"{len(r)} training draws: ablated / full {', '.join(f'{x:.3f}' for x in r)}")
    print(f"geometric mean {m:.4f}, 90% t-interval over the draws [{lo:.4f}, {hi:.4f}]: "
          f"{'measurably worse' if lo > 1 else 'not measurably worse' if hi > 1 else 'measurably better'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
