"""Compare policy zips (e.g. several training seeds of each ablation) on the same held-out episodes.

    .venv/bin/python benchmarks/bench_policy_seeds.py --seeds 200 \
        full=dynamix_hvd/agent/policies/default.zip full=/tmp/full_s1.zip \
        no_network=dynamix_hvd/agent/policies/ablations/no_network.zip no_network=/tmp/no_network_s1.zip

Each ``label=path`` is one trained policy; policies sharing a label are training seeds of one
variant. Prints every policy's mean held-out return (200 odd seeds x 4 scenario types, paired with
the proportional controller) and, per variant, the mean over its training seeds and the spread
between them, so an ablation's effect can be compared with run-to-run variation.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
import torch

from dynamix_hvd.agent.rollout import evaluate_controller, factory
from dynamix_hvd.agent.sim import SCENARIOS, SimConfig


def returns(build, seeds: list[int]) -> np.ndarray:
    cfg = SimConfig()
    return np.array([r.ret for sc in SCENARIOS for r in evaluate_controller(build, seeds, cfg, scenario=sc)])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("policies", nargs="+", help="label=path.zip")
    args = p.parse_args()
    torch.set_num_threads(1)
    seeds = [2 * i + 1 for i in range(args.seeds)]
    prop = returns(factory("proportional"), seeds)
    by_label: dict[str, list[float]] = defaultdict(list)
    print("| variant | policy | mean return | s.e. | diff vs proportional (paired) |")
    print("|---|---|---:|---:|---:|")
    for item in args.policies:
        label, path = item.split("=", 1)
        r = returns(factory("ppo", policy=path), seeds)
        d = r - prop
        by_label[label].append(float(r.mean()))
        print(f"| {label} | {path} | {r.mean():.2f} | {r.std(ddof=1) / np.sqrt(r.size):.2f} | "
              f"{d.mean():+.2f} +- {d.std(ddof=1) / np.sqrt(d.size):.2f} |", flush=True)
    print("\n| variant | training seeds | mean of seeds | min | max |")
    print("|---|---:|---:|---:|---:|")
    for label, ms in by_label.items():
        print(f"| {label} | {len(ms)} | {np.mean(ms):.2f} | {min(ms):.2f} | {max(ms):.2f} |")
    print(f"(proportional: {prop.mean():.2f}; {len(seeds)} seeds x {len(SCENARIOS)} scenarios)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
