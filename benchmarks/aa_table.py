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
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynamix_hvd.emulate.targets import baseline_times, paired_ratios, targets_table
from dynamix_hvd.runlog import read_evals

GRID = [round(0.80 + 0.01 * k, 2) for k in range(16)]


def runs_of(out: Path) -> dict[str, list[Path]]:
    runs: dict[str, list[tuple[int, Path]]] = {}
    for d in out.iterdir():
        if d.is_dir() and (d / "evals.jsonl").exists():
            ctl, _, rep = d.name.partition(".r")
            runs.setdefault(ctl, []).append((int(rep) if rep.isdigit() else 0, d))
    return {c: [d for _, d in sorted(v)] for c, v in runs.items()}


def worst(xs: list[float | None], base: list[float | None] | None = None) -> tuple[float, float]:
    """(largest ratio, its fraction): ``xs`` are ratios, or times divided by ``base``."""
    r = [(x / b if base is not None else x, f) for x, b, f in
         zip(xs, base if base is not None else xs, GRID) if x is not None and (base is None or b)]
    return max(r) if r else (float("nan"), float("nan"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outs", nargs="+", type=Path)
    p.add_argument("--twin", default="proportional#twin")
    a = p.parse_args(argv)
    print("| scenario | repeats | PPO worst (medians) | null worst (medians) | PPO worst (paired) | null worst (paired) "
          "| final acc. static / proportional / twin / PPO |")
    print("|---|---|---|---|---|---|---|")
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
        med = [worst(ctl[n]["time_to_target_s"], baseline_times(tab, bl)) for n, bl in draws]
        pair = [worst(paired_ratios(tab, n, bl)) for n, bl in draws]
        cells = []
        for col in (med, pair):
            cells.append(f"{col[0][0]:.2f}x at {col[0][1]:.2f}")
            cells.append(" / ".join(f"{r:.2f}x" for r, _ in col[1:]))
        acc = " / ".join(f"{ctl[n]['final_accuracy_mean5']:.3f}" for n in ("static", "proportional", a.twin, "ppo"))
        name = out.name.removeprefix("s25_")
        print(f"| {name} | {len(runs['ppo'])} | " + " | ".join(cells) + f" | {acc} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
