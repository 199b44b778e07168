"""Replay the decisions of a `dynamix bench` run through other controllers.

    .venv/bin/python benchmarks/replay_decisions.py runs/slow/ppo [--controllers ppo,goodput] [--first 6]

Every decision record in ``RUN/events.jsonl`` carries the cluster state the controller saw (the
plan in force, one row per rank, the global statistics). This feeds those states, in order, to a
fresh instance of each named controller (bounds: the scenario's per-rank ``max_batch`` from
``RUN/../scenario.toml``, the hook's default global-batch floor) and prints, per decision, the
global batch (and split) the run proposed live and what each controller proposes on the same inputs. For
``goodput`` (and the goodput anchor inside ``ppo``) it also prints the model's preferred global
batch before the switching threshold (``fit B``).

That separates what a policy adds from what its anchor model decides. Example, session 8: in
node_slowdown, PPO's three session-7 runs held B = 81 for their first 100-170 steps. Replayed,
the plain goodput controller proposes the same 81 on those inputs, so the 81 came from the goodput
model, not from PPO's residual. The controllers see the recorded states, not the states their
own plans would have produced, so only the first decision after a difference is comparable.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.controllers import make_controller
from dynamix_hvd.emulate.scenario import load_scenario
from dynamix_hvd.plan import Plan, PlanBounds
from dynamix_hvd.records import ClusterState
from dynamix_hvd.runlog import read_decisions
from dynamix_hvd.safety import MoveLimits, limit_proposal


def states(run: Path) -> list[tuple[int, list[float], ClusterState]]:
    """(step, live proposed split, state) of every decision record in ``run/events.jsonl``."""
    return [(r.step, [float(b) for b in r.proposed], ClusterState(Plan(version=0, batch_sizes=tuple(r.plan)),
                                                                  r.workers, r.glob))
            for r in read_decisions(run / "events.jsonl")]


def fit_b(ctl: Any) -> float:
    model = getattr(ctl, "last_fit", None)
    if model is None and getattr(ctl, "anchor", None) is not None:
        model = getattr(getattr(ctl.anchor, "goodput", None), "last_fit", None)
    return float((model or {}).get("B", math.nan))


def _split(b: Any) -> str:
    return "/".join(f"{x:.0f}" for x in b)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path, help="one controller's directory of a dynamix bench output")
    p.add_argument("--controllers", default="ppo,goodput")
    p.add_argument("--first", type=int, default=6, help="decisions to print (0: all)")
    p.add_argument("--min-batch", type=int, default=1,
                   help="per-rank floor (the hook's bn_min_batch, 16, for a BatchNorm workload)")
    a = p.parse_args(argv)
    sc = load_scenario(a.run.parent / "scenario.toml")
    n = sc.world_size
    floor = DynamixConfig(base_batch=sc.base_batch, min_global_batch=sc.min_global_batch).min_global_batch_for(n)
    bounds = PlanBounds(max_batch=tuple(w.max_batch for w in sc.workers), min_batch=a.min_batch, min_global_batch=floor)
    names = [c for c in a.controllers.split(",") if c]
    ctls = {c: make_controller(c, bounds, sc.base_batch) for c in names}
    cfg = DynamixConfig()
    limits = MoveLimits(max_rank_change=cfg.max_rank_change, max_global_change=cfg.max_global_change)
    recs = states(a.run)
    if not recs:
        raise SystemExit(f"{a.run}/events.jsonl has no decision records")
    print(f"{a.run}: {len(recs)} decisions; global batch proposed live vs replayed (fit B: the model's "
          f"choice before the switching threshold)")
    print(f"{'step':>5} {'live':>6} {'split':>12} " + " ".join(f"{c:>12} {'fit B':>6} {'split':>12}" for c in names))
    for i, (step, live, st) in enumerate(recs):
        cells = []
        for c in names:
            b = ctls[c].decide(st)
            if not ctls[c].exact:        # the live path: the per-decision move limits come next
                b, _ = limit_proposal(st, b, limits, bounds.min_batch)
            cells.append(f"{sum(b):12.1f} {fit_b(ctls[c]):6.1f} {_split(b):>12}")
        if a.first == 0 or i < a.first:
            print(f"{step:5d} {sum(live):6.1f} {_split(live):>12} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
