"""Soak: N decisions (one per step) with the native collector and PMPI timing running;
prints RSS after warm-up and at the end, and the growth in percent (target < 5%).

    mpirun --allow-run-as-root --oversubscribe -np 2 \
        -x LD_PRELOAD=$(.venv/bin/python -m dynamix_hvd.launch --print-preload) \
        .venv/bin/python -m mpi4py benchmarks/soak_decisions.py --decisions 1000
"""
from __future__ import annotations

import argparse
import os
import tempfile

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--decisions", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--controller", default="proportional")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n = 64 * hvd.size() * (args.decisions + args.warmup + 10)
    x, y = torch.randn(n, 16), torch.randint(0, 4, (n,))
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    run_dir = tempfile.mkdtemp(prefix="dynamix-soak-") if hvd.rank() == 0 else None
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.01), dataset_size=n, base_batch=16,
                  controller=args.controller, interval_steps=1, collector=True, run_dir=run_dir,
                  max_batch=64, decision_lag=0)     # a decision after every step
    rss0 = None
    decisions = 0
    for idx in dyn.batches(0):
        dyn.optimizer.zero_grad()
        dyn.backward(F.cross_entropy(model(x[idx]), y[idx]))
        dyn.optimizer.step()
        dyn.step(0.0)
        decisions += 1
        if decisions == args.warmup:
            rss0 = rss_bytes()
        if decisions >= args.warmup + args.decisions:
            break
    rss1 = rss_bytes()
    dyn._pending.clear()
    collector_on = dyn.collector is not None and dyn.collector.running
    dyn.close()
    rows = hvd.allgather_object((hvd.rank(), rss0, rss1, collector_on), name="soak_rss")
    if hvd.rank() == 0:
        print(f"decisions after warm-up: {args.decisions} (controller {args.controller}, run_dir {run_dir})")
        worst = 0.0
        for rank, a, b, on in rows:
            growth = 100.0 * (b - a) / a
            worst = max(worst, growth)
            print(f"rank {rank}: collector running={on} RSS {a / 2**20:.1f} MiB -> {b / 2**20:.1f} MiB "
                  f"({growth:+.2f}%)")
        print(f"worst RSS growth {worst:+.2f}% (target < 5%)")


if __name__ == "__main__":
    main()
