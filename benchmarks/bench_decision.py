"""Decision latency: gather (one row per rank) + controller on rank 0 + plan broadcast.

    mpirun --allow-run-as-root --oversubscribe -np 4 .venv/bin/python -m mpi4py \
        benchmarks/bench_decision.py --controllers static,proportional,goodput,ppo

Times ``optimizer.step()`` (where the hook records the step and decides) on steps that take a
decision (interval_steps=1, min_decision_s=0, so every step) and on steps that do not
(interval_steps=10**9), in the same run; the difference is the decision's cost as the training
loop sees it (the gradient allreduce is in both). Prints medians and p90 in milliseconds on rank 0.
"""
from __future__ import annotations

import argparse
import time

import horovod.torch as hvd
import numpy as np
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix


def measure(controller: str, interval: int, steps: int) -> np.ndarray:
    torch.manual_seed(0)
    x, y = torch.randn(100000, 16), torch.randint(0, 4, (100000,))
    model = torch.nn.Linear(16, 4)
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.01), dataset_size=len(x), base_batch=16,
                  controller=controller, interval_steps=interval, min_decision_s=0, collector=True,
                  guard_patience=10**9,  # measure the controller itself, not the fallback
                  decision_lag=0)        # the waiting decision (bench_decision_lag.py: the lagged one)
    times = []
    optimizer = dyn.optimizer
    for idx in dyn.batches(0):
        optimizer.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        t0 = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - t0)
        if len(times) >= steps:
            break
    dyn._pending.clear()
    dyn.close()
    return np.asarray(times[10:]) * 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--controllers", default="static,proportional,goodput,ppo")
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    base = measure("static", 10**9, args.steps)
    if hvd.rank() == 0:
        print(f"ranks: {hvd.size()}")
        print(f"{'controller':<14}{'opt.step() no decision ms (p50/p90)':>34}{'with decision ms (p50/p90)':>36}"
              f"{'decision cost p50 ms':>22}")
    for name in args.controllers.split(","):
        with_decision = measure(name, 1, args.steps)
        if hvd.rank() == 0:
            print(f"{name:<14}{np.median(base):>20.3f} / {np.percentile(base, 90):<12.3f}"
                  f"{np.median(with_decision):>22.3f} / {np.percentile(with_decision, 90):<12.3f}"
                  f"{np.median(with_decision) - np.median(base):>14.3f}")
    if hvd.rank() == 0:
        print("reproduce: mpirun --allow-run-as-root --oversubscribe -np 4 .venv/bin/python -m mpi4py "
              "benchmarks/bench_decision.py")


if __name__ == "__main__":
    main()
