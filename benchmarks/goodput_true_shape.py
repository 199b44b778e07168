"""Goodput with the true shape of the compute curve: how much of its time on a replay cell comes
from its compute model counting time as proportional to the batch until a rank has run sizes 25%
apart (``affine.identified``).

Each rank's unidentified fit becomes the replay's true shape (fixed cost and slope of a line through
the workload's compute time at h = 1 over the local batches 1..cap) scaled to the rank's points
(``affine.fit_scaled``), in place of ``alpha = 0``. Prints goodput's median time with and without,
and the shipped policy's with the true shape, over the seeds given (session 47: YOLOv3, CoV, N = 8,
seeds 5-24, 7,634 s -> 8,144 s, 1.067x: the missing fixed cost is not what slows goodput there).

    python benchmarks/goodput_true_shape.py benchmarks/heldout_workloads/yolov3 cov:coefficient_variation 8 5 24
"""
from __future__ import annotations

import argparse

import numpy as np

import dynamix_hvd.controllers.model as model
from dynamix_hvd.controllers.affine import fit_affine, fit_scaled, identified, precision_weight
from dynamix_hvd.replay.runner import make_world, run_controller


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload")
    ap.add_argument("trace")
    ap.add_argument("workers", type=int)
    ap.add_argument("first_seed", type=int)
    ap.add_argument("last_seed", type=int)
    a = ap.parse_args()
    w = make_world(a.workload, a.trace, a.workers)
    tp = w.sim.tp
    grid = np.arange(1, int(max(w.sim.bounds().max_batch)) + 1)
    compute = tp.rank_times(np.ones(grid.size), grid) - tp.sync_at(grid)
    slope, fixed = np.polyfit(grid, compute, 1)
    shape = (max(float(fixed), 0.0), float(slope))
    print(f"true compute shape: {shape[0]:.4f} s + {shape[1]:.5f} s/sample (fixed / slope {shape[0] / shape[1]:.1f} samples)")
    seeds = range(a.first_seed, a.last_seed + 1)
    base = [run_controller(w.sim, "goodput", s)["time_to_target_s"] for s in seeds]

    def rank_fit(self, i):           # ComputeModel._compute_rank_fit with the true shape as the prior
        k = int(self._n[i])
        bs, ts = self._b[i, :k].tolist(), self._t[i, :k].tolist()
        ws = [precision_weight(r) for r in self._r[i, :k].tolist()]
        return fit_affine(bs, ts, ws) if identified(bs) else fit_scaled(shape, bs, ts, ws)

    model.ComputeModel._compute_rank_fit = rank_fit
    model.BATCH_FIT_MIN = 10 ** 9     # every rank through rank_fit
    shaped = [run_controller(w.sim, "goodput", s)["time_to_target_s"] for s in seeds]
    ppo = [run_controller(w.sim, "ppo", s)["time_to_target_s"] for s in seeds]
    g, gs, p = (float(np.median([np.inf if x is None else x for x in v])) for v in (base, shaped, ppo))
    print(f"{a.trace} N={a.workers} seeds {a.first_seed}-{a.last_seed}: goodput {g:.0f} s, with the true shape {gs:.0f} s "
          f"({gs / g:.3f}x); ppo with it {p:.0f} s ({p / gs:.3f}x goodput with it)")


if __name__ == "__main__":
    main()
