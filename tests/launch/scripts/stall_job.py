"""Test job for the stall / partition / lost-rank tests (tests/launch/test_partition.py,
tests/launch/test_faults.py): the user loop on a tiny model, with one injected fault on one rank
at one step, a log of the indices each rank trained, and checkpoint / resume.

    mpirun -np 4 python tests/launch/scripts/stall_job.py --fault sigstop --fault-rank 2 --fault-step 20

Faults: ``sigstop`` (the rank freezes), ``sigkill`` (the rank dies), ``partition`` (the rank's
link ``veth0`` goes down in its network namespace, for ``--down-s`` seconds or for good),
``busy`` (the rank is alive but spends ``--down-s`` seconds outside the training step).
``--then-busy-step N --then-busy-s S``: later, rank 0 also spends S seconds outside the training step
at step N (after a short partition: the watchdog must still hear every rank, or it ends the job).
Prints ``FAULT-AT <unix time>`` when the fault happens and ``RESUMED-AT <step>`` after a resume.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix


def inject(fault: str, down_s: float) -> None:
    print(f"FAULT-AT {time.time():.3f} {fault}", flush=True)
    if fault == "sigstop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "busy":
        time.sleep(down_s)
    elif fault == "partition":
        cmd = "ip link set veth0 down" + (f"; sleep {down_s}; ip link set veth0 up" if down_s > 0 else "")
        subprocess.Popen(["sh", "-c", cmd], start_new_session=True)   # noqa: S603,S607


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fault", choices=["none", "sigstop", "sigkill", "partition", "busy"], default="none")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=20)
    p.add_argument("--down-s", type=float, default=0.0, help="partition: seconds down (0: for good); busy: seconds")
    p.add_argument("--then-busy-step", type=int, default=-1, help="rank 0 busy at this step too (-1: no)")
    p.add_argument("--then-busy-s", type=float, default=0.0)
    p.add_argument("--samples", type=int, default=3200)
    p.add_argument("--base-batch", type=int, default=8)
    p.add_argument("--step-sleep", type=float, default=0.02)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--allow-resize", action="store_true")
    p.add_argument("--seen-log", default=None, help="appends 'step index' lines, one file per rank")
    args = p.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(args.samples, 8, generator=g), torch.randint(0, 3, (args.samples,), generator=g)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x),
                  base_batch=args.base_batch, interval_steps=5, collector=False)
    optimizer = dyn.optimizer
    if args.checkpoint and os.path.exists(args.checkpoint):
        dyn.load(args.checkpoint, allow_resize=args.allow_resize)
        print(f"RESUMED-AT {dyn.step_count} world {hvd.size()}", flush=True)
    log = open(f"{args.seen_log}.{hvd.rank()}", "a") if args.seen_log else None  # noqa: SIM115
    t_last, gap, gap_before_busy = time.time(), 0.0, 0.0
    for idx in dyn.batches(0):
        step = dyn.step_count
        if args.fault != "none" and step == args.fault_step and hvd.rank() == args.fault_rank:
            inject(args.fault, args.down_s)
        if step == args.then_busy_step:
            gap_before_busy = gap
            if hvd.rank() == 0:
                print(f"BUSY-AT {time.time():.3f}", flush=True)
                time.sleep(args.then_busy_s)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if log:
            log.write("".join(f"{step} {i}\n" for i in idx.tolist()))
            log.flush()
        if args.checkpoint and args.checkpoint_every and dyn.step_count % args.checkpoint_every == 0:
            dyn.save(args.checkpoint)
        now = time.time()
        gap, t_last = max(gap, now - t_last), now
        time.sleep(args.step_sleep)
    print(f"FINISHED rank {hvd.rank()} steps {dyn.step_count} longest step gap {gap:.2f} s"
          + (f", before step {args.then_busy_step} {gap_before_busy:.2f} s" if args.then_busy_step >= 0 else ""),
          flush=True)
    dyn.close()


if __name__ == "__main__":
    main()
