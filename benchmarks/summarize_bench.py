"""Accuracy targets and plan churn of a `dynamix bench` output directory (issue 24).

    .venv/bin/python benchmarks/summarize_bench.py runs/s9b_hetero4x [--after-s 10]

Prints the time to 80/85/90/95% of the plateau (static's median final accuracy, mean of the last
5 evaluations) per controller, x the better of static and proportional, the final accuracy (mean
of the last 5 evaluations) against static's, and the plan changes per 10 s after the first
``--after-s`` seconds (the issue's rule for a cluster that does not change: at most one).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from dynamix_hvd.emulate.targets import (baseline_times, format_targets, late_plan_changes, paired_ratios,
                                         same_plan_time_ratio, targets_table)
from dynamix_hvd.runlog import read_decisions, read_evals


MIN_SAME_PLAN = 10   # intervals; fewer are the first ones only (start-up)


def smoothed(evals: list, k: int) -> list:
    """The evaluations with each accuracy replaced by the mean of it and the k - 1 before it."""
    if k <= 1:
        return evals
    accs = [float(e.acc) for e in evals]
    return [dataclasses.replace(e, acc=sum(accs[max(0, i - k + 1):i + 1]) / min(i + 1, k))
            for i, e in enumerate(evals)]


def _run_key(name: str) -> tuple[str, int]:
    """(controller, repeat index) of a run directory: ``ppo`` -> ("ppo", 0), ``ppo.r2`` -> ("ppo", 2)."""
    ctl, _, rep = name.partition(".r")
    return ctl, int(rep) if rep.isdigit() else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--after-s", type=float, default=10.0)
    p.add_argument("--fractions", default=None,
                   help="fractions of the plateau (comma-separated; default 0.8,0.85,0.9,0.95), or LO:HI:STEP "
                        "for a grid; with a grid, each controller's largest ratio to the better of static and "
                        "proportional over it is printed too")
    p.add_argument("--smooth", type=int, default=1,
                   help="time to target on the trailing mean of this many evaluations (default 1: single "
                        "evaluations, which swing by several points near the plateau)")
    args = p.parse_args()
    fractions = None
    if args.fractions:
        if ":" in args.fractions:
            lo, hi, st = (float(x) for x in args.fractions.split(":"))
            fractions = [round(lo + k * st, 6) for k in range(int(round((hi - lo) / st)) + 1)]
        else:
            fractions = [float(x) for x in args.fractions.split(",")]
    out = Path(args.out)
    runs: dict[str, list[Path]] = {}
    for d in sorted(out.iterdir(), key=lambda d: _run_key(d.name)):
        if d.is_dir() and (d / "evals.jsonl").exists():
            runs.setdefault(_run_key(d.name)[0], []).append(d)
    evals = {n: [smoothed(read_evals(d / "evals.jsonl"), args.smooth) for d in ds] for n, ds in runs.items()}
    if args.smooth > 1:
        print(f"(accuracy: trailing mean of {args.smooth} evaluations)")
    tab = targets_table(evals, fractions) if fractions else targets_table(evals)
    print(f"{out}")
    print(format_targets(tab))
    if fractions and len(fractions) > 4:
        ctl = tab["controllers"]
        base = baseline_times(tab)
        print("\nlargest ratio to the better of static and proportional over the grid (at fraction)")
        for n, m in ctl.items():
            r = [(t / b, f) for t, b, f in zip(m["time_to_target_s"], base, fractions) if t is not None and b]
            if r:
                worst = max(r)
                print(f"  {n:<13} {worst[0]:.2f}x at {worst[1]:.2f}")
    if "static" in tab["controllers"] or "proportional" in tab["controllers"]:
        print("\npaired: median over repeats of the time / the better of static and proportional in the same "
              "repeat (same seed)")
        for n in tab["controllers"]:
            r = paired_ratios(tab, n)
            if len(r) <= 4:
                print(f"  {n:<13} " + " ".join(f"{x:.2f}x" if x is not None else "-" for x in r))
                continue
            reached = [(x, f) for x, f in zip(r, tab["fractions"]) if x is not None]
            print(f"  {n:<13}" + (" largest {:.2f}x at {:.2f}".format(*max(reached)) if reached else ""))
    ref = "proportional"
    if ref in runs:
        print(f"\nhost speed: training-clock time over the intervals where the run and {ref} of the same repeat ran the "
              "same plan, / the same intervals of that run (per repeat; intervals in brackets): timing noise between runs")
        base = {_run_key(d.name)[1]: read_evals(d / "evals.jsonl") for d in runs[ref]}
        for n, ds in runs.items():
            if n == ref:
                continue
            cells = []
            for d in ds:
                other = base.get(_run_key(d.name)[1])
                r, k = same_plan_time_ratio(read_evals(d / "evals.jsonl"), other) if other else (float("nan"), 0)
                cells.append(f"{r:.3f} ({k})" if k >= MIN_SAME_PLAN else "-")
            print(f"  {n:<13} " + "  ".join(cells))
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
