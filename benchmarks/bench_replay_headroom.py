"""Headroom table: goodput / hindsight and static / hindsight time to target in the replay simulator.

    # one piece per workload (each under the CPU lock, so others can interleave), then the table
    for w in bert cifar10 deepspeech2 ncf; do
      flock /tmp/dynamix-cpu.lock .venv/bin/python benchmarks/bench_replay_headroom.py --workloads $w \\
          --out docs/replay_headroom/$w.json
    done
    .venv/bin/python benchmarks/bench_replay_headroom.py --table docs/replay_headroom/*.json \\
        --md docs/replay_headroom.md

Cells: workloads x speed traces {none, job_2_norm, job_3_norm, cov:coefficient_variation} x N in
{4, 8, 16, 32, 64}; per cell ``--seeds`` seeds (hardware factors drawn per seed; the same world
for the three runs of a seed). A ratio is the median over seeds of the per-seed ratio
time(controller) / time(hindsight) (paired); a controller that does not reach the target within the
budget counts as infinitely slow. goodput's proposals are applied directly unless ``--limits``
(the live hook's per-decision move limits, ``dynamix replay``'s default). A second table holds static / split-only, the oracle held at the
static plan's global batch B0 (it only chooses the split): how much of the headroom is balance alone.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from dynamix_hvd.replay.oracle import _episode
from dynamix_hvd.replay.runner import make_world, run_one

TRACES = ("none", "job_2_norm", "job_3_norm", "cov:coefficient_variation")
LABEL = {"none": "none", "job_2_norm": "job 2", "job_3_norm": "job 3", "cov:coefficient_variation": "CoV"}


def _t(x: float | None) -> float:
    return math.inf if x is None else float(x)


def cell(workload: str, trace: str, n: int, seeds: int, limits: bool = False) -> dict:
    sim = make_world(workload, trace, n).sim
    res: dict[str, list[float]] = {c: [] for c in ("static", "goodput", "hindsight")}
    res["split_only"] = []      # the oracle held at the static global batch B0: only the split is chosen
    B0 = np.array([sim.B0])
    cum0 = sim.pm.cum_for(B0.astype(float))
    for s in range(seeds):
        for c in ("static", "goodput", "hindsight"):
            res[c].append(_t(run_one(sim, c, s, limits=limits)["time_to_target_s"]))
        res["split_only"].append(_episode(sim, s, B0, cum0, 1, 200_000)[0])
    h = np.array(res["hindsight"])
    out = {"workload": workload, "trace": trace, "workers": n, "seeds": seeds, "base_batch": sim.base_batch,
           "move_limits": limits,
           "interval_steps": sim.interval_steps,
           "times": {c: [None if not math.isfinite(x) else round(x, 3) for x in v] for c, v in res.items()}}
    with np.errstate(invalid="ignore", divide="ignore"):
        for c in ("static", "goodput"):
            out[f"{c}_over_hindsight"] = float(np.median(np.array(res[c]) / h))
        out["static_over_split_only"] = float(np.median(np.array(res["static"]) / np.array(res["split_only"])))
    return out


def table(rows: list[dict], fmt=None) -> str:
    fmt = fmt or (lambda r: f"{r['goodput_over_hindsight']:.2f} / {r['static_over_hindsight']:.2f}")
    ns = sorted({r["workers"] for r in rows})
    lines = ["| workload | speed trace | " + " | ".join(f"N={n}" for n in ns) + " |",
             "|---|---|" + "---|" * len(ns)]
    key = {(r["workload"], r["trace"], r["workers"]): r for r in rows}
    for w in sorted({r["workload"] for r in rows}):
        for tr in TRACES:
            if not any((w, tr, n) in key for n in ns):
                continue
            cells = []
            for n in ns:
                r = key.get((w, tr, n))
                cells.append("-" if r is None else fmt(r))
            lines.append(f"| {w} | {LABEL.get(tr, tr)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default="bert,cifar10,deepspeech2,ncf")
    p.add_argument("--traces", default=",".join(TRACES))
    p.add_argument("--workers", default="4,8,16,32,64")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--limits", action="store_true", help="apply the live per-decision move limits to goodput "
                   "(dynamix replay's default; the table in docs/replay.md was measured without them)")
    p.add_argument("--out", default=None, help="JSON with one entry per cell")
    p.add_argument("--table", nargs="*", default=None, help="only merge these JSON files into the table")
    p.add_argument("--md", default=None, help="write the markdown table here")
    a = p.parse_args()
    if a.table is not None:
        rows = [r for f in a.table for r in json.loads(Path(f).read_text())["cells"]]
    else:
        rows = []
        t0 = time.perf_counter()
        for w in a.workloads.split(","):
            for tr in a.traces.split(","):
                for n in (int(x) for x in a.workers.split(",")):
                    r = cell(w, tr, n, a.seeds, a.limits)
                    rows.append(r)
                    print(f"{w:>12} {tr:>26} N={n:3d}: goodput/hindsight {r['goodput_over_hindsight']:.2f}, "
                          f"static/hindsight {r['static_over_hindsight']:.2f} ({time.perf_counter() - t0:.0f} s)",
                          flush=True)
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps({"cells": rows, "wall_s": round(time.perf_counter() - t0, 1)}, indent=1))
    md = "goodput / hindsight and static / hindsight (median over seeds of the per-seed ratio)\n\n" + table(rows)
    if all("static_over_split_only" in r for r in rows):
        md += ("\n\nstatic / (oracle held at the static global batch B0: best split only)\n\n"
               + table(rows, lambda r: f"{r['static_over_split_only']:.2f}"))
    print(md)
    if a.md:
        Path(a.md).write_text(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
