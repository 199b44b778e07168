"""The ddp engine's costs under torchrun: per-step overhead against plain DDP, and decision latency.

    torchrun --standalone --nproc-per-node 4 benchmarks/bench_ddp.py overhead --width 1024 --rounds 4
    torchrun --standalone --nproc-per-node 4 benchmarks/bench_ddp.py decision --controllers static,goodput,ppo

overhead  the same MLP (128 -> width -> width -> 10), random data, per-rank batch 32, SGD, in
          rounds A B B A (A = plain DDP over this rank's slice of a shared permutation; B = the
          same loop with ``Dynamix`` and its defaults, iterating ``dyn.batches``), each block a
          fresh model, ``--warmup`` steps, then ``--steps`` timed steps. The ratio of a round is
          B's steps/s over A's (two blocks each, so a linear drift cancels); prints the median
          ratio over the rounds, its range, and plain's step time.
decision  ``optimizer.step()`` timed on steps that take a decision (interval_steps=1,
          min_decision_s=0) and on steps that do not (interval 10**9), same processes; the
          difference of the medians is the decision's cost as the loop sees it (gather rows,
          controller on rank 0, plan broadcast). Prints medians and p90 in ms on rank 0.
Timing-sensitive: run under the CPU lock (flock /tmp/dynamix-cpu.lock torchrun ...).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from dynamix_hvd.ddp import Dynamix

N_DATA = 200_000


def make(width: int) -> tuple[DDP, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(128, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                              torch.nn.ReLU(), torch.nn.Linear(width, 10))
    model = DDP(net)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def block(hook: bool, width: int, x: torch.Tensor, y: torch.Tensor, warmup: int, steps: int) -> float:
    """Steps/s of one block (timed after the warm-up)."""
    model, opt = make(width)
    if hook:
        dyn = Dynamix(model, opt, dataset_size=len(x), base_batch=32)
        batches = dyn.batches(0)
    else:
        g = torch.Generator().manual_seed(0)
        batches = iter(torch.randperm(len(x), generator=g)[dist.get_rank()::dist.get_world_size()].split(32))
    t0 = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            dist.barrier()
            t0 = time.perf_counter()
        idx = next(batches)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    rate = steps / (time.perf_counter() - t0)
    if hook:
        batches.close()
        dyn.close()
    return rate


def overhead(args: argparse.Namespace) -> None:
    x, y = torch.randn(N_DATA, 128), torch.randint(0, 10, (N_DATA,))
    ratios, plain = [], []
    for _ in range(args.rounds):
        a1 = block(False, args.width, x, y, args.warmup, args.steps)
        b1 = block(True, args.width, x, y, args.warmup, args.steps)
        b2 = block(True, args.width, x, y, args.warmup, args.steps)
        a2 = block(False, args.width, x, y, args.warmup, args.steps)
        ratios.append((b1 + b2) / (a1 + a2))
        plain.append((a1 + a2) / 2)
    if dist.get_rank() == 0:
        print(f"ranks {dist.get_world_size()} width {args.width}: hook/plain steps/s median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}, {args.rounds} ABBA rounds of {args.steps} steps); "
              f"plain {statistics.median(plain):.0f} steps/s = {1e3 / statistics.median(plain):.1f} ms/step", flush=True)


def step_times(controller: str, interval: int, steps: int) -> np.ndarray:
    x, y = torch.randn(N_DATA, 16), torch.randint(0, 4, (N_DATA,))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dyn = Dynamix(model, opt, dataset_size=len(x), base_batch=16, controller=controller, interval_steps=interval,
                  min_decision_s=0, guard_patience=10**9,
                  decision_lag=0)   # the waiting decision (benchmarks/bench_decision_lag.py: the lagged one)
    times = []
    it = dyn.batches(0)
    for idx in it:
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
        if len(times) >= steps:
            break
    it.close()
    dyn.close()
    return 1e3 * np.asarray(times[10:])


def decision(args: argparse.Namespace) -> None:
    if dist.get_rank() == 0:
        print(f"ranks: {dist.get_world_size()}")
    for name in args.controllers.split(","):
        with_d = step_times(name, 1, args.steps)
        without = step_times(name, 10**9, args.steps)
        if dist.get_rank() == 0:
            print(f"{name:<13} step() with a decision median {np.median(with_d):.2f} ms (p90 {np.percentile(with_d, 90):.2f}),"
                  f" without {np.median(without):.2f} ms: decision latency {np.median(with_d) - np.median(without):.2f} ms",
                  flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("overhead", "decision"))
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--controllers", default="static,goodput,ppo")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    (overhead if args.what == "overhead" else decision)(args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
