"""One replay cell (workload x speed trace x N) over seeds 5-14 for a few controllers, without the
baselines and oracles ``dynamix eval-replay`` runs for every cell (ImageNet's static runs take most of
an hour per cell on this machine). Prints each controller's median time over goodput's and saves the
per-seed times.

    python benchmarks/heldout_cell.py benchmarks/heldout_workloads/imagenet job_3_norm 8 \\
        --controllers "goodput,ppo:dynamix_hvd/agent/policies/default.zip?refute=0,ppo" --out runs/s40/inet_job3_8.json
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dynamix_hvd.replay.runner import make_world, run_controller


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload")
    ap.add_argument("trace")
    ap.add_argument("workers", type=int)
    ap.add_argument("--controllers", default="goodput,ppo")
    ap.add_argument("--seeds", default="5-14", help="first-last")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.seeds.split("-"))
    w = make_world(args.workload, args.trace, args.workers)
    names = args.controllers.split(",")
    if "goodput" not in names:
        names = ["goodput"] + names
    out, t0 = {}, time.time()
    for name in names:
        out[name] = [run_controller(w.sim, name, s)["time_to_target_s"] for s in range(lo, hi + 1)]
        print(f"{args.trace} N={args.workers} {name}: {time.time() - t0:.0f}s", flush=True)
    g = float(np.median(out["goodput"]))
    print({k: round(float(np.median(v)) / g, 4) for k, v in out.items()})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
