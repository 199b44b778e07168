"""Where live observations leave a policy's training support (issue 19: the replay world against the
emulated cluster).

    .venv/bin/python benchmarks/live_support_gap.py RUN [RUN ...] [--policy PATH]

Each RUN is a `dynamix bench` run directory of a learned policy (``OUT/ppo...``). Its decision records
hold the cluster state the controller saw; this feeds them, in order, to a fresh ``PPOController``
with the policy (default: the shipped one; bounds from the run's scenario) and, for every decision,
tests the observation against the policy's recorded support (``controllers.policy.support``). It
prints how many decisions are outside and why (the first feature named, as the live log does), and
for the decisions whose global vector is further than the radius from every training decision, how
the squared distance to the nearest one splits over the global columns, with each column's live
median beside its training range. That says which of the replay world's features the live job does
not resemble. For a support that records the box alone (``policy-support --box-only``, the default's
since session 53) the table lists the global columns with their box as the training range.
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from dynamix_hvd.controllers.ppo import PPOController
from dynamix_hvd.emulate.scenario import load_scenario
from dynamix_hvd.plan import Plan, PlanBounds
from dynamix_hvd.records import ClusterState
from dynamix_hvd.runlog import read_decisions


def gap(run: Path, policy: str | None) -> dict:
    sc = load_scenario(run.parent / "scenario.toml")
    ctl = PPOController(PlanBounds(max_batch=[w.max_batch for w in sc.workers]), sc.base_batch, policy=policy)
    sup = ctl.supports[0]
    if sup is None:
        raise SystemExit(f"{policy or 'the default policy'}: no training support recorded")
    from dynamix_hvd.agent.support_fit import global_columns
    near = list(sup.near_columns) or [j for j in global_columns() if j < len(sup.columns)]
    names = [sup.columns[j] for j in near]
    reasons: Counter[str] = Counter()
    shares, live = [], []
    n = 0
    for r in read_decisions(run / "events.jsonl"):
        state = ClusterState(Plan(version=0, batch_sizes=tuple(r.plan)), r.workers, r.glob)
        obs = ctl.observe(state)
        ctl.decide(state)                     # the controller's own memory (last levels) moves as live
        n += 1
        g = obs[0, near]
        live.append(g)
        out = sup.outside(obs)
        if not out:
            continue
        reasons[out[0][0] if out[0][0] == "global features" else "box: " + out[0][0]] += 1
        if any(name == "global features" for name, *_ in out):
            diff = sup.points - g[None, :] / sup.scale
            k = int(np.argmin(np.einsum("ij,ij->i", diff, diff)))
            d2 = diff[k] ** 2
            shares.append(d2 / d2.sum())
    if sup.near_columns:
        pts = sup.points * sup.scale
        lo, hi, med = pts.min(axis=0), pts.max(axis=0), np.median(pts, axis=0)
    else:                                   # the box alone: its range, no recorded decisions
        lo, hi, med = sup.lo[near], sup.hi[near], np.full(len(near), np.nan)
    return {"run": str(run), "decisions": n, "outside": sum(reasons.values()), "reasons": reasons,
            "names": names, "share": np.mean(shares, axis=0) if shares else None, "nn_outside": len(shares),
            "live_median": np.median(np.array(live), axis=0), "train_lo": lo, "train_hi": hi, "train_median": med}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--policy", default=None, help="policy file (default: the shipped one)")
    args = p.parse_args(argv)
    total: Counter[str] = Counter()
    for run in args.runs:
        g = gap(run, args.policy)
        total.update(g["reasons"])
        print(f"{g['run']}: {g['outside']} of {g['decisions']} decisions outside the support "
              f"({', '.join(f'{k} {v}' for k, v in g['reasons'].most_common())})")
        print(f"  {'global column':<22} {'share of d^2':>12} {'live median':>12} {'train median':>12} {'train range':>20}")
        for j, name in enumerate(g["names"]):
            share = f"{g['share'][j]:.2f}" if g["share"] is not None else "-"
            tmed = "-" if np.isnan(g["train_median"][j]) else f"{g['train_median'][j]:.3f}"
            print(f"  {name:<22} {share:>12} {g['live_median'][j]:>12.3f} {tmed:>12} "
                  f"{'[' + format(g['train_lo'][j], '.3f') + ', ' + format(g['train_hi'][j], '.3f') + ']':>20}")
    print(f"all runs: {', '.join(f'{k} {v}' for k, v in total.most_common())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
