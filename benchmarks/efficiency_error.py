"""Where the noise-scale efficiency model is wrong against the measured curves, per workload and
metric level, and whether anything the run can observe predicts it (issue 19; session 32).

For each pair of neighbouring measured global batches (B, B2) and each level k of the replay's
progress model (``replay/progress.py``): the measured efficiency ratio E(B2) / E(B) = samples from
level k to k + 1 at B over those at B2, the model's (phi + B) / (phi + B2) with phi the traces'
noise scale at level k + 1/2 and batch B, their log ratio (> 0: the model is pessimistic about
the larger batch), and two observables a controller has: log(phi / B) and the growth of log phi
over the level. Prints the rows, the mean and median error per workload, and the correlation of
the error with each observable over all rows and within each workload.

    PYTHONPATH=. .venv/bin/python benchmarks/efficiency_error.py \\
        --workloads bert,cifar10,deepspeech2,ncf,benchmarks/heldout_workloads/yolov3,benchmarks/heldout_workloads/imagenet
"""
from __future__ import annotations

import argparse
import math
from collections import defaultdict

import numpy as np

from dynamix_hvd.replay.progress import build_progress
from dynamix_hvd.replay.runner import resolve_workload
from dynamix_hvd.traces import load_pollux
from dynamix_hvd.traces.pollux import PolluxWorkload


def rows_for(name: str, wl: PolluxWorkload) -> list[tuple]:
    pm = build_progress(wl)
    out = []
    for B, B2 in zip(pm.batches[:-1], pm.batches[1:]):
        c = pm.cum_for([B, B2])
        for k in range(pm.n_levels):
            s1, s2 = c[0, k + 1] - c[0, k], c[1, k + 1] - c[1, k]
            if not (np.isfinite(s1) and np.isfinite(s2)) or s1 <= 0 or s2 <= 0:
                continue
            phi = pm.noise_scale(k + 0.5, B)
            true, model = s1 / s2, (phi + B) / (phi + B2)
            growth = math.log(pm.noise_scale(k + 1, B) / pm.noise_scale(k, B))
            out.append((name, int(B), int(B2), k, true, model, math.log(true / model), math.log(phi / B), growth))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="bert,cifar10,deepspeech2,ncf")
    a = ap.parse_args()
    rows = [r for w in a.workloads.split(",") for r in rows_for(w.rstrip("/").split("/")[-1], load_pollux(resolve_workload(w)))]
    print(f"{'workload':12s} {'B':>6s} {'B2':>6s} k  E(B2)/E(B) measured  model  log(meas/model)  log(phi/B)  dlog(phi)")
    for r in rows:
        print(f"{r[0]:12s} {r[1]:6d} {r[2]:6d} {r[3]}  {r[4]:19.3f}  {r[5]:5.3f}  {r[6]:15.3f}  {r[7]:10.2f}  {r[8]:9.2f}")
    err = np.array([r[6] for r in rows])
    obs = {"log(phi/B)": np.array([r[7] for r in rows]), "dlog(phi)": np.array([r[8] for r in rows])}
    by = defaultdict(list)
    for i, r in enumerate(rows):
        by[r[0]].append(i)
    print("\nper workload: mean / median log(measured / model) (> 0: the model is pessimistic about the larger batch); "
          "correlation of the error with each observable within the workload")
    for name, idx in by.items():
        cors = "  ".join(f"corr with {k} {np.corrcoef(v[idx], err[idx])[0, 1]:+.2f}" for k, v in obs.items())
        print(f"  {name:12s} {err[idx].mean():+.3f} / {np.median(err[idx]):+.3f}  ({len(idx)} rows)  {cors}")
    print("all rows: " + "  ".join(f"corr with {k} {np.corrcoef(v, err)[0, 1]:+.2f}" for k, v in obs.items()))


if __name__ == "__main__":
    main()
