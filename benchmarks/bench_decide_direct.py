"""One decision timed alone: ``Dynamix._decide`` (gather the rows -> rank 0 decides -> broadcast
the plan -> apply it), called directly between short stretches of training, on every rank.

    mpirun --allow-run-as-root --oversubscribe -np 4 .venv/bin/python -m mpi4py \
        benchmarks/bench_decide_direct.py --controllers static,proportional,goodput,ppo

Unlike ``bench_decision.py`` (the difference of ``optimizer.step()`` with and without a
decision), nothing else is in the timed call, so two versions of the hook whose step paths
differ (before and after the issue-21 split) compare like for like: run it with
``PYTHONPATH=<other checkout>`` for the other version. Prints, on rank 0, the p50 / p90 over the
ranks' slowest time of each decision, in milliseconds.
"""
from __future__ import annotations

import argparse
import time
import warnings

import horovod.torch as hvd
import numpy as np
import torch
import torch.nn.functional as F

import dynamix_hvd
from dynamix_hvd import Dynamix
from dynamix_hvd.config import DynamixConfig


def measure(controller: str, decisions: int, between: int) -> np.ndarray:
    torch.manual_seed(0)
    x, y = torch.randn(200000, 16), torch.randint(0, 4, (200000,))
    model = torch.nn.Linear(16, 4)
    kw = {"base_batch": 16, "controller": controller, "interval_steps": 10**9, "min_decision_s": 0,
          "collector": True, "guard_patience": 10**9,
          "decision_lag": 0}   # the whole decision in the timed call (bench_decision_lag.py: the lagged one)
    known = DynamixConfig.__dataclass_fields__    # (the older hook has no min_decision_s)
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.01), dataset_size=len(x),
                  **{k: v for k, v in kw.items() if k in known})
    new_api = hasattr(dyn, "report")
    opt = dyn.optimizer
    times: list[float] = []
    trained = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for idx in dyn.batches(0):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            if new_api:
                loss.backward()
                opt.step()
                dyn.report(loss=loss)
            else:
                dyn.backward(loss)
                opt.step()
                dyn.step(loss)
            trained += 1
            if trained % between == 0:
                t0 = time.perf_counter()
                dyn._decide(dyn.step_count - 1)      # noqa: SLF001 - the call being timed
                times.append(time.perf_counter() - t0)
                if len(times) >= decisions:
                    break
    dyn._pending.clear()                              # noqa: SLF001
    dyn.close()
    worst = hvd.allreduce(torch.tensor(times, dtype=torch.float64), op=hvd.Max, name=f"decide.{controller}")
    return worst.numpy()[5:] * 1e3                   # (the first decisions warm caches up)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--controllers", default="static,proportional,goodput,ppo")
    p.add_argument("--decisions", type=int, default=120)
    p.add_argument("--between", type=int, default=3, help="steps trained between two timed decisions")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    if hvd.rank() == 0:
        print(f"ranks: {hvd.size()}  code: {dynamix_hvd.__file__}")
        print(f"{'controller':<14}{'_decide ms p50':>16}{'p90':>8}")
    for name in args.controllers.split(","):
        ms = measure(name, args.decisions, args.between)
        if hvd.rank() == 0:
            print(f"{name:<14}{np.median(ms):>16.3f}{np.percentile(ms, 90):>8.3f}", flush=True)


if __name__ == "__main__":
    main()
