"""What a decision costs the training loop, with every rank waiting for rank 0's controller
(``decision_lag`` 0), with the controller in rank 0's decide thread while the ranks train on
(1), and with the rows (2) and the plan (>= 3) also travelling during steps (dynamix_hvd/inflight.py).

    mpirun --allow-run-as-root --oversubscribe -np 4 .venv/bin/python -m mpi4py \\
        benchmarks/bench_decision_lag.py --controllers static,goodput,ppo --lags 0,1,2,3 [--sleep-ms 10]
    .venv/bin/torchrun --standalone --nproc-per-node 4 benchmarks/bench_decision_lag.py --engine ddp ...

A job trains the same small model with a decision every ``--every`` steps (``min_decision_s`` 0) and,
in the same run, with no decision at all (``interval_steps`` 10**9); the variants are run in rounds
A B ... B A (each round a fresh hook) so a drift of the machine's load falls on all of them. The
cost of one decision is (the slowest rank's mean step time with decisions - without) x ``--every``, per round; the
table gives the median over rounds (and the range). ``--sleep-ms``: a sleep in every step beside
the compute, the CPU idle as on a GPU node where the step's time is the device's (the place where
a thread's decision can overlap the step; on a CPU-only node it shares the cores with the step).
Prints on rank 0.
"""
from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


class Engine:
    """The Horovod engine (under mpirun) or the DDP engine (under torchrun, gloo)."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "horovod":
            import horovod.torch as hvd

            hvd.init()
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
        else:
            import torch.distributed as dist

            dist.init_process_group("gloo")
            self.dist = dist
            self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def hook(self, model: torch.nn.Module, n: int, **kw: Any) -> tuple[Any, torch.nn.Module]:
        """(the hook, the module to call) for a fresh model."""
        if self.name == "horovod":
            from dynamix_hvd import Dynamix

            return Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.01), dataset_size=n, **kw), model
        from torch.nn.parallel import DistributedDataParallel as DDP

        from dynamix_hvd.ddp import Dynamix as DDPDynamix

        ddp = DDP(model)
        return DDPDynamix(ddp, torch.optim.SGD(ddp.parameters(), lr=0.01), dataset_size=n, **kw), ddp

    def max(self, value: float, name: str) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        if self.name == "horovod":
            return float(self.hvd.allreduce(t, op=self.hvd.Max, name=name))
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t[0])


def step_time(eng: Engine, controller: str, lag: int | None, steps: int, every: int, sleep_s: float) -> float:
    """The job's mean wall time per step (the slowest rank's: a rank that runs ahead between two
    synchronising steps and then waits loses nothing); lag None = no decisions."""
    torch.manual_seed(0)
    x, y = torch.randn(50000, 64), torch.randint(0, 4, (50000,))
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    dyn, model = eng.hook(model, len(x), base_batch=16,
                          controller=controller, interval_steps=every if lag is not None else 10**9, min_decision_s=0,
                          first_decision_steps=2, decision_lag=lag or 0, collector=True, guard_patience=10**9)
    opt = dyn.optimizer
    times: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        for epoch in range(100):
            for idx in dyn.batches(epoch):
                loss = F.cross_entropy(model(x[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                if sleep_s:
                    time.sleep(sleep_s)
                opt.step()
                dyn.report(loss=loss)
                t1 = time.perf_counter()
                times.append(t1 - t0)
                t0 = t1
                if len(times) >= steps:
                    break
            if len(times) >= steps:
                break
    dyn.close()
    return eng.max(float(np.mean(times[20:])), f"lag.{controller}.{lag}")   # (warm-up: caches, the first decisions)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--controllers", default="static,goodput,ppo")
    p.add_argument("--lags", default="0,1")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=5, help="steps between decisions")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--engine", choices=("horovod", "ddp"), default="horovod", help="ddp: under torchrun")
    args = p.parse_args()
    eng = Engine(args.engine)
    torch.set_num_threads(1)
    lags = [int(v) for v in args.lags.split(",")]
    if eng.rank == 0:
        print(f"engine: {eng.name}, ranks: {eng.size}, a decision every {args.every} steps, {args.steps} steps per job, "
              f"{args.rounds} rounds, sleep {args.sleep_ms} ms per step")
        print(f"{'controller':<10}{'lag':>5}{'mean step ms, no decision':>27}{'with':>8}"
              f"{'decision cost ms: median':>27}{'range':>18}")
    for name in args.controllers.split(","):
        costs: dict[int, list[float]] = {lag: [] for lag in lags}
        base_ms: list[float] = []
        step_ms: dict[int, list[float]] = {lag: [] for lag in lags}
        for r in range(args.rounds):
            order: list[int | None] = [None, *lags]
            order = order if r % 2 == 0 else order[::-1]
            mean_s = {v: step_time(eng, name, v, args.steps, args.every, args.sleep_ms / 1e3) for v in order}
            base_ms.append(1e3 * mean_s[None])
            for lag in lags:
                step_ms[lag].append(1e3 * mean_s[lag])
                costs[lag].append(1e3 * (mean_s[lag] - mean_s[None]) * args.every)
        if eng.rank == 0:
            for lag in lags:
                c = costs[lag]
                print(f"{name:<10}{lag:>5}{np.median(base_ms):>27.3f}{np.median(step_ms[lag]):>8.3f}"
                      f"{np.median(c):>27.3f}{f'[{min(c):.2f}, {max(c):.2f}]':>18}", flush=True)


if __name__ == "__main__":
    main()
