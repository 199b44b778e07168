"""Why progress is composed over 4 metric levels: finer levels let a hindsight schedule exploit the
epoch-to-epoch noise of the measured curves.

    .venv/bin/python benchmarks/bench_replay_levels.py

For K levels, the hindsight oracle's time to target on a homogeneous 8-rank job (no fluctuation,
seed 0) against the best constant global batch (every multiple of 8 in the bounds, uniform split).
With speeds that never change, a schedule can only beat the best constant batch by switching
batches between segments of the curve where different measured runs happened to be ahead.
"""
from __future__ import annotations

import numpy as np

from dynamix_hvd.replay.oracle import run_hindsight
from dynamix_hvd.replay.progress import build_progress
from dynamix_hvd.replay.runner import make_world
from dynamix_hvd.replay.sim import ReplaySim
from dynamix_hvd.traces import load_pollux, shipped_workload, shipped_workloads


def main() -> int:
    n = 8
    print(f"{'workload':>12} {'K':>3} {'hindsight s':>12} {'best constant B':>16} {'ratio':>6}")
    for w in shipped_workloads():
        base = make_world(w, "none", n, speeds=[1]).sim
        wl = load_pollux(shipped_workload(w))
        for K in (1, 2, 4, 8, 24):
            sim = ReplaySim(build_progress(wl, n_levels=K), base.tp, base.trace, n, speeds=[1])
            h = run_hindsight(sim, 0)["time_to_target_s"]
            best = min((sim.cum(B)[-1] / B * sim.tp.rank_times(np.ones(n), np.full(n, B // n)).max(), B)
                       for B in range(n, sim.bounds().max_global_batch + 1, n))
            print(f"{w:>12} {K:3d} {h:12.0f} {best[0]:10.0f} B={best[1]:<5d} {h / best[0]:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
