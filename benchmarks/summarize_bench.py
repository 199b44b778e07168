"""Accuracy targets and plan churn of a `dynamix bench` output directory (issue 24).

    .venv/bin/python benchmarks/summarize_bench.py runs/s9b_hetero4x [--after-s 10]

Prints the time to 80/85/90/95% of the plateau (static's median final accuracy, mean of the last
5 evaluations) per controller, x the better of static and proportional, the final accuracy (mean
of the last 5 evaluations) against static's, and the plan changes per 10 s after the first
``--after-s`` seconds (the issue's rule for a cluster that does not change: at most one).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynamix_hvd.emulate.targets import format_targets, late_plan_changes, targets_table
from dynamix_hvd.runlog import read_decisions, read_evals


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--after-s", type=float, default=10.0)
    args = p.parse_args()
    out = Path(args.out)
    runs: dict[str, list[Path]] = {}
    for d in sorted(out.iterdir()):
        if d.is_dir() and (d / "evals.jsonl").exists():
            runs.setdefault(d.name.split(".r")[0], []).append(d)
    tab = targets_table({n: [read_evals(d / "evals.jsonl") for d in ds] for n, ds in runs.items()})
    print(f"{out}")
    print(format_targets(tab))
    print(f"\nplan changes per 10 s after the first {args.after_s:.0f} s (per run)")
    for n, ds in runs.items():
        rates = []
        for d in ds:
            k, span = late_plan_changes(read_decisions(d / "events.jsonl"), args.after_s)
            rates.append(10.0 * k / span if span > 0 else 0.0)
        print(f"  {n:<13} " + "  ".join(f"{r:.2f}" for r in rates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
