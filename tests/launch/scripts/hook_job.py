"""Test job for tests/launch/test_hook_jobs.py: the user example's loop (``loss.backward()``,
``optimizer.step()`` on the optimizer Dynamix returns) plus what only the tests need: resume from
a checkpoint, a log of the indices each rank trained, and a rank that SIGKILLs itself.

    mpirun -np 2 python -m mpi4py tests/launch/scripts/hook_job.py --checkpoint ck.pt --checkpoint-every 20 \
        --seen-log run1 --die-at-step 55
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import horovod.torch as hvd
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from mnist1d_horovod import load_mnist1d  # noqa: E402

from dynamix_hvd import Dynamix  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples", type=int, default=2500)
    p.add_argument("--base-batch", type=int, default=8)
    p.add_argument("--controller", default="static")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--allow-resize", action="store_true", help="resume a checkpoint of another world size")
    p.add_argument("--seen-log", default=None, help="append 'step index' lines per rank")
    p.add_argument("--die-at-step", type=int, default=-1, help="rank 1 SIGKILLs itself there")
    p.add_argument("--skip-at-step", type=int, default=-1, help="rank 1 takes that step's batch and skips it")
    p.add_argument("--break-at-step", type=int, default=-1, help="rank 1 leaves its epoch after that step")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds per step (signal tests)")
    args = p.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    x, y, xt, yt = load_mnist1d(args.samples)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), dataset_size=len(x),
                  base_batch=args.base_batch, controller=args.controller, interval_steps=10)
    optimizer = dyn.optimizer
    if args.checkpoint and os.path.exists(args.checkpoint):
        dyn.load(args.checkpoint, allow_resize=args.allow_resize)
    log = open(f"{args.seen_log}.{hvd.rank()}", "a") if args.seen_log else None  # noqa: SIM115
    skipped = False
    for epoch in range(dyn.epoch, args.epochs):
        for idx in dyn.batches(epoch):
            step = dyn.step_count
            if step == args.die_at_step and hvd.rank() == 1:
                os.kill(os.getpid(), 9)
            if step == args.skip_at_step and hvd.rank() == 1 and not skipped:
                skipped = True
                print(f"FAULT-AT {time.time():.3f}", flush=True)
                continue    # (a fault: no optimizer.step() for a batch taken)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            if log:     # (before the step: a stop signal ends the loop inside optimizer.step(), after the update)
                log.write("".join(f"{step} {i}\n" for i in idx.tolist()))
                log.flush()
            optimizer.step()
            dyn.report(loss=loss)
            if args.sleep:
                time.sleep(args.sleep)
            if step == args.break_at_step and hvd.rank() == 1 and not skipped:
                skipped = True
                print(f"FAULT-AT {time.time():.3f}", flush=True)
                break       # (a fault: rank 1 alone leaves its epoch after this step)
            if args.checkpoint and args.checkpoint_every and dyn.step_count % args.checkpoint_every == 0:
                dyn.save(args.checkpoint)
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()
    if hvd.rank() == 0:
        print(f"final test accuracy {acc:.4f} plan {list(dyn.plan.batch_sizes)}", flush=True)
    dyn.close()


if __name__ == "__main__":
    main()
