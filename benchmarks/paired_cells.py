"""Paired comparison of policies from ``dynamix eval-replay --out`` files, cell by cell.

    .venv/bin/python benchmarks/paired_cells.py runs/a.json runs/b.json --pairs net0/full0,nostat1/full1

For each ``A/B`` pair: the geometric mean over cells of A's median time to target over B's (the same
cells and seeds), the cells where A is more than 1% slower / faster, and the extreme cells. The
files' cells are merged by (workload, trace, workers); a name missing from a cell is an error
naming it.
"""
from __future__ import annotations

import argparse
import json
import math
import sys


def merged_cells(paths: list[str]) -> dict[tuple, dict[str, float]]:
    cells: dict[tuple, dict[str, float]] = {}
    for p in paths:
        for c in json.load(open(p))["cells"]:
            cells.setdefault((c["workload"], c["trace"], c["workers"]), {}).update(c["median"])
    return cells


def paired(cells: dict[tuple, dict[str, float]], a: str, b: str) -> dict[str, float]:
    r = []
    for key, m in cells.items():
        for name in (a, b):
            if name not in m:
                raise SystemExit(f"paired_cells: cell {key} has no median for {name!r} (has {sorted(m)})")
        r.append(m[a] / m[b])
    return {"geomean": math.exp(sum(map(math.log, r)) / len(r)), "slower": sum(x > 1.01 for x in r),
            "faster": sum(x < 0.99 for x in r), "max": max(r), "min": min(r), "cells": len(r)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="eval-replay --out JSON files")
    ap.add_argument("--pairs", required=True, help="comma list of A/B (A's time over B's)")
    args = ap.parse_args(argv)
    cells = merged_cells(args.files)
    print(f"A / B per cell, {len(cells)} cells (medians over each cell's seeds)")
    print("| A | B | geomean A/B | cells A slower by > 1% | cells A faster by > 1% | max | min |")
    print("|---|---|---|---|---|---|---|")
    for pair in args.pairs.split(","):
        a, _, b = pair.partition("/")
        s = paired(cells, a, b)
        print(f"| {a} | {b} | {s['geomean']:.3f} | {s['slower']} | {s['faster']} | {s['max']:.3f} | {s['min']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
