"""PPO against an A/A twin of proportional, over several `dynamix bench` outputs (issue 24).

    .venv/bin/python benchmarks/aa_table.py OUT1 OUT2 ... [--twin proportional#twin]

Each OUT is a bench directory run with ``--controllers static,proportional,proportional#twin,ppo``.
The twin is the proportional controller run again under another name: the same code, seed and
cluster, so whatever separates it from proportional is the bench's own noise (host timing, one
sample on another rank, BatchNorm trajectories). Per scenario this prints, for PPO and the twin,
the issue's figure (the largest ratio of the median time to target to the better of static and
proportional over targets 0.80-0.95 of the plateau, 1% apart), the same paired per seed, and
the final accuracy (mean of the last 5 evaluations, median over repeats) against static's. The
twin and proportional are two draws of one controller, so the figure is taken twice with no
difference to find: the twin against static and proportional, and proportional against static
and the twin (the "null" columns: twin / proportional). A criterion the null draws miss is below what
the bench resolves with these repeats.

A second table takes every relabelling of PPO, proportional and the twin within each repeat
(``emulate.relabel``: an exact permutation test of "PPO behaves like proportional"): for the
issue's figure (medians and paired) its ``p`` and the share of relabellings that meet 1.03x (how
often a controller identical to proportional would pass with these runs); and the geometric mean
over repeats and targets of PPO's time over the geometric mean of proportional's and the twin's in
the same repeat, with its ``p``. Over all scenarios, Fisher's method combines the latter ``p``s.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from dynamix_hvd.emulate.relabel import figure_ratios, null_pass_by_repeats, relabel_test
from dynamix_hvd.emulate.targets import targets_table
from dynamix_hvd.runlog import read_evals

GRID = [round(0.80 + 0.01 * k, 2) for k in range(16)]
REPEATS = (3, 5, 10, 20)


def runs_of(out: Path) -> dict[str, list[Path]]:
    runs: dict[str, list[tuple[int, Path]]] = {}
    for d in out.iterdir():
        if d.is_dir() and (d / "evals.jsonl").exists():
            ctl, _, rep = d.name.partition(".r")
            runs.setdefault(ctl, []).append((int(rep) if rep.isdigit() else 0, d))
    return {c: [d for _, d in sorted(v)] for c, v in runs.items()}


def worst(ratios: list[float | None]) -> tuple[float, float]:
    """(largest ratio, its fraction of the plateau)."""
    r = [(x, f) for x, f in zip(ratios, GRID) if x is not None]
    return max(r) if r else (float("nan"), float("nan"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outs", nargs="+", type=Path)
    p.add_argument("--twin", default="proportional#twin")
    a = p.parse_args(argv)
    print("| scenario | repeats | PPO worst (medians) | null worst (medians) | PPO worst (paired) | null worst (paired) "
          "| final acc. static / proportional / twin / PPO |")
    print("|---|---|---|---|---|---|---|")
    tests = []
    for out in a.outs:
        runs = runs_of(out)
        need = {"static", "proportional", a.twin, "ppo"}
        if not need <= set(runs):
            print(f"{out}: missing {sorted(need - set(runs))}", file=sys.stderr)
            return 2
        tab = targets_table({n: [read_evals(d / "evals.jsonl") for d in ds] for n, ds in runs.items()}, GRID)
        ctl = tab["controllers"]
        # (controller, the baselines it is judged against): PPO as the issue says, then the two null draws
        draws = [("ppo", ("static", "proportional")), (a.twin, ("static", "proportional")),
                 ("proportional", ("static", a.twin))]
        per_run = {n: m["runs"] for n, m in ctl.items()}
        med = [worst(figure_ratios(per_run, n, bl)) for n, bl in draws]
        pair = [worst(figure_ratios(per_run, n, bl, paired=True)) for n, bl in draws]
        cells = []
        for col in (med, pair):
            cells.append(f"{col[0][0]:.3f}x at {col[0][1]:.2f}")
            cells.append(" / ".join(f"{r:.3f}x" for r, _ in col[1:]))
        acc = " / ".join(f"{ctl[n]['final_accuracy_mean5']:.3f}" for n in ("static", "proportional", a.twin, "ppo"))
        name = out.name.removeprefix("s25_")
        print(f"| {name} | {len(runs['ppo'])} | " + " | ".join(cells) + f" | {acc} |")
        pool = ("proportional", a.twin)
        tests.append((name, len(runs["ppo"]), *(relabel_test(per_run, "ppo", pool, paired=pd) for pd in (False, True)),
                      null_pass_by_repeats(per_run, "ppo", pool, REPEATS)))
    print("\nPermutation test: PPO, proportional and the twin relabelled within each repeat "
          "(p: share of relabellings at least as bad as observed; null pass: share meeting 1.03x)\n")
    print("| scenario | repeats | relabellings | PPO (medians) | p | null pass | PPO (paired) | p | null pass "
          "| PPO / proportional and twin, geomean of runs | p |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ps = []
    for name, n_rep, med, par, _ in tests:
        ps.append(med["p_mean"])
        print(f"| {name} | {n_rep} | {med['perms']} | {med['observed']:.2f}x | {med['p']:.2f} | {med['null_pass']:.2f} "
              f"| {par['observed']:.2f}x | {par['p']:.2f} | {par['null_pass']:.2f} "
              f"| {math.exp(med['mean_log']):.3f}x | {med['p_mean']:.3f} |")
    print("\nHow often a controller identical to proportional meets 1.03x (medians) with more repeats: bootstrap "
          "over the measured repeats, each relabelled at random (2,000 draws)\n")
    print("| scenario | " + " | ".join(f"{n} repeats" for n in REPEATS) + " |")
    print("|---|" + "---|" * len(REPEATS))
    for name, _, _, _, boot in tests:
        print(f"| {name} | " + " | ".join(f"{boot[n]:.2f}" for n in REPEATS) + " |")
    ok = [p for p in ps if math.isfinite(p) and p > 0]
    if ok:
        stat = -2.0 * sum(math.log(p) for p in ok)
        # chi-square survival function for 2k degrees of freedom, closed form
        sf = math.exp(-stat / 2) * sum((stat / 2) ** i / math.factorial(i) for i in range(len(ok)))
        print(f"\nFisher's method over {len(ok)} scenarios (geomean statistic): chi2 = {stat:.1f} on "
              f"{2 * len(ok)} degrees of freedom, combined p = {sf:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
