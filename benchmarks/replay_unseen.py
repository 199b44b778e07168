"""The shipped policy on workloads it has not seen: perturbed replay worlds on held-out seeds.

The evaluation of issue 19 runs `dynamix replay` on workloads and speed traces that are not in
this repository. The closest stand-in here: the replay world's own perturbations
(``replay.worlds.draw_perturbation``: samples per level, how much larger batches pay early and
late, the true noise scale and its estimator noise, compute and sync times, the memory cap) of
the shipped workloads, drawn from seeds the training never used (training draws from seeds >=
1,000,000; here ``[seed, 77]`` for seeds 0..K-1), each with a speed-trace family and N. Every
controller runs the same world and seed. Prints, per world and over all, PPO / goodput and the
causal oracle / goodput (how much room there was).

    .venv/bin/python benchmarks/replay_unseen.py --worlds 48 --controllers goodput,ppo,causal4 [--policy PATH]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def world(i: int):
    from dynamix_hvd.replay.worlds import SHIPPED_WORKLOADS, WorldSpec, draw_perturbation
    rng = np.random.default_rng([i, 77])
    wl = SHIPPED_WORKLOADS[i % len(SHIPPED_WORKLOADS)]
    n = (4, 8, 16, 32)[int(rng.integers(4))]
    trace = ("none", "job_3_norm", "synthetic")[int(rng.integers(3))]
    return WorldSpec(wl, n, trace, 10_000 + i, draw_perturbation(rng))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worlds", type=int, default=48)
    p.add_argument("--controllers", default="goodput,ppo,causal4")
    p.add_argument("--policy", default=None, help="policy file for ppo (default: the shipped one)")
    a = p.parse_args(argv)
    from dynamix_hvd.replay.runner import run_one
    from dynamix_hvd.replay.worlds import build_sim
    ctls = a.controllers.split(",")
    t0 = time.time()
    ratios: dict[str, list[float]] = {c: [] for c in ctls if c != "goodput"}
    for i in range(a.worlds):
        spec = world(i)
        times = {}
        for c in ctls:
            sim = build_sim(spec)
            name = f"ppo:{a.policy}" if c == "ppo" and a.policy else c
            t = run_one(sim, name, spec.seed)["time_to_target_s"]
            times[c] = math.inf if t is None else float(t)
        g = times["goodput"]
        line = " ".join(f"{c} {times[c] / g:.3f}" for c in ctls if c != "goodput")
        print(f"{i:3d} {spec.workload:11s} N={spec.n:2d} {spec.trace:10s} warp=({spec.pert.batch_warp[0]:+.2f},"
              f"{spec.pert.batch_warp[1]:+.2f}) goodput {g:8.0f} s | {line}", flush=True)
        for c in ratios:
            ratios[c].append(times[c] / g)
    print()
    for c, r in ratios.items():
        v = np.array(r)
        fin = v[np.isfinite(v)]
        print(f"{c}/goodput over {v.size} worlds: geomean {math.exp(np.mean(np.log(fin))):.3f}, "
              f"max {v.max():.3f}, worlds > 1.03: {int((v > 1.03).sum())}, < 0.97: {int((v < 0.97).sum())}, "
              f"missed: {int((~np.isfinite(v)).sum())}")
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
