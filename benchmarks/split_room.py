"""How close a controller that splits on *measured* timings can get to perfect measurement of the
past, on a live scenario replayed with its captured workload (issue 20; session 32).

For each scenario: goodput, ``causal_blind`` (the true speeds of the interval just ended, no noise,
no lag, free re-splits; its first interval runs the static plan) and the proportional controller
with its stability rules (issue 26) relaxed: ``threshold`` 0 (re-split for any predicted gain; the
lasting-gain floor follows it to 0), ``z_min`` 0 (no significance test) and a shorter fit history.
Prints each / goodput, median and geomean of the paired seeds.

    PYTHONPATH=. .venv/bin/python benchmarks/split_room.py --scenarios trace_job3,trace_cov,grad_mb_link \\
        --workload-dir docs/results/s32 --seeds 10
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from dynamix_hvd.controllers.proportional import ProportionalController
from dynamix_hvd.replay import runner
from dynamix_hvd.replay.oracle import run_causal

VARIANTS = [  # (threshold, z_min, history): the shipped rule first
    (0.1, 3.0, 16), (0.0, 0.0, 16), (0.0, 0.0, 4), (0.0, 0.0, 2), (0.0, 0.0, 1), (0.1, 3.0, 4)]


def _times(sim, make, seeds) -> np.ndarray:
    real = runner.build_controller
    runner.build_controller = lambda name, s, seed: make(s) if name == "_variant" else real(name, s, seed)
    try:
        return np.array([runner.run_controller(sim, "_variant", s)["time_to_target_s"] for s in seeds], dtype=float)
    finally:
        runner.build_controller = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="trace_job3,trace_cov,grad_mb_link")
    ap.add_argument("--workload-dir", default="docs/results/s32", help="holds cap_<scenario> (dynamix capture-trace)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--target", type=float, default=0.8)
    a = ap.parse_args()
    t0 = time.time()
    seeds = range(a.seeds)
    for sc in a.scenarios.split(","):
        sim = runner.make_scenario_world(f"{a.workload_dir}/cap_{sc}", sc, a.target).sim
        g = np.array([runner.run_controller(sim, "goodput", s)["time_to_target_s"] for s in seeds], dtype=float)
        cb = np.array([run_causal(sim, s, blind=True)["time_to_target_s"] for s in seeds], dtype=float)

        def show(label: str, t: np.ndarray) -> None:
            r = t / g
            print(f"  {label:<44s} / goodput: median {np.median(r):.3f}  geomean {math.exp(np.log(r).mean()):.3f}")

        print(f"{sc}: goodput median {np.median(g):.1f} s, {a.seeds} seeds")
        show("causal_blind (perfect measurement of the past)", cb)
        for th, z, h in VARIANTS:
            t = _times(sim, lambda s, th=th, z=z, h=h: ProportionalController(s.bounds(), s.base_batch, threshold=th,
                                                                              z_min=z, history=h), seeds)
            show(f"proportional threshold {th} z_min {z} history {h}", t)
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
