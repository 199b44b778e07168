"""Test job for tests/launch/test_ddp.py, run under torchrun: the DDP loop of
examples/mnist1d_ddp.py (``loss.backward()`` and ``optimizer.step()`` on the user's own DDP model
and optimizer) plus what only the tests need.

    torchrun --standalone --nproc-per-node 4 tests/launch/scripts/ddp_job.py --mode grad --accumulation 2
    torchrun ... ddp_job.py --mode train --checkpoint ck.pt --checkpoint-every 20 --seen-log run1 --die-at-step 55

--mode grad   scripted uneven plans; before every optimizer.step() the reduced gradient is compared
              with one big batch's gradient over the union of the step's samples (all ranks'
              indices, recomputed on a single-process copy of the model); prints the worst difference
--mode train  MNIST-1D-like training; optional checkpoint/resume, per-rank log of the trained
              indices, a rank that SIGKILLs or SIGSTOPs itself or raises at a step
--mode oom    uniform plan (the hook averages, flags included); the last rank reports out of
              memory after DDP's forward at step 3; prints every rank's cap afterwards
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "mpi"))
from _models import ScriptedController, make_data, make_model, uneven_script  # noqa: E402

from dynamix_hvd.ddp import Dynamix  # noqa: E402
from dynamix_hvd.plan import PlanBounds  # noqa: E402


def grad_mode(args: argparse.Namespace) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = make_data()
    model = make_model()
    ref_model = copy.deepcopy(model)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    bounds = PlanBounds(max_batch=(64,) * world, deadband=0.0)
    ctl = ScriptedController(bounds, 7, uneven_script(world)) if rank == 0 else None
    dyn = Dynamix(ddp, opt, dataset_size=len(x), base_batch=7, interval_steps=3, min_decision_s=0, deadband=0.0,
                  max_batch=64, accumulation=args.accumulation, seed=11, controller=ctl, collector=False)
    worst, steps, plans, micro = 0.0, 0, set(), 0
    k = args.accumulation
    for epoch in range(2):
        it = dyn.batches(epoch)
        for idx in it:
            sl = dyn.current_slice
            union = torch.as_tensor(dyn.step_indices(sl))
            ref_model.load_state_dict(model.state_dict())
            ref_model.zero_grad()
            F.cross_entropy(ref_model(x[union]), y[union]).backward()
            opt.zero_grad()
            sizes = [len(idx)]
            F.cross_entropy(ddp(x[idx]), y[idx]).backward()
            for _ in range(k - 1):
                idx = next(it)
                sizes.append(len(idx))
                F.cross_entropy(ddp(x[idx]), y[idx]).backward()
            micro += len(set(sizes)) > 1
            for p, r in zip(model.parameters(), ref_model.parameters()):
                worst = max(worst, float((p.grad - r.grad).abs().max()))
            opt.step()
            plans.add(sl.sizes)
            steps += 1
    t = torch.tensor([worst, float(steps)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"GRAD worst {float(t[0]):.3e} steps {steps} plans {len(plans)} unequal_micro {micro}", flush=True)
    dyn.close()


def oom_mode(args: argparse.Namespace) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = make_data()
    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dyn = Dynamix(model, opt, dataset_size=len(x), base_batch=args.base_batch, interval_steps=50, min_decision_s=0,
                  max_batch=64, collector=False)
    ooms = 0
    for idx in dyn.batches(0):
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        if dyn.step_count == 3 and rank == world - 1 and not ooms:
            ooms += 1
            dyn.report(oom=True)     # after DDP's forward: the hook joins the reduction with a zero backward
        else:
            loss.backward()
        opt.step()
        if dyn.step_count >= 6:
            break
    dyn._pending.clear()   # noqa: SLF001 - the epoch's iterator is abandoned on purpose
    if rank == 0:
        print(f"OOM max_batch {list(dyn.bounds.max_batch)} plan {list(dyn.plan.batch_sizes)}", flush=True)
    dyn.close()


def train_mode(args: argparse.Namespace) -> None:
    rank = dist.get_rank()
    x, y = make_data(n=args.samples, d=40, classes=10)
    model = DDP(make_model(d=40, classes=10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dyn = Dynamix(model, opt, dataset_size=len(x), base_batch=args.base_batch, controller=args.controller,
                  interval_steps=10, min_decision_s=0, collector=False, accumulation=args.accumulation,
                  resume=args.checkpoint if args.checkpoint and args.resume else None)
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # one log per rank and attempt: SEEN.<rank> on the first, SEEN.r<restart>.<rank> after torchrun restarts
    name = f"{args.seen_log}.{rank}" if restarts == 0 else f"{args.seen_log}.r{restarts}.{rank}"
    log = open(name, "a") if args.seen_log else None  # noqa: SIM115
    skipped = False
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127) if args.grad_scaler else None   # overflows first
    left_out = 0
    k = args.accumulation
    for epoch in range(dyn.epoch, args.epochs):
        for n, idx in enumerate(dyn.batches(epoch)):
            step, j = dyn.step_count, n % k       # (an epoch's steps each have k micro-batches)
            fault = step == args.die_at_step and args.die_rank in (rank, -1) and restarts == 0 and not skipped
            if fault and args.die_mode == "skip-backward":   # micro-batch 0 without backward; the step all the same
                skipped = True
                print(f"FAULT-AT {time.time():.3f}", flush=True)
                continue
            if fault and args.die_mode == "skip":       # the batch taken, then the next one: no backward, no step
                skipped = True
                print(f"FAULT-AT {time.time():.3f}", flush=True)
                continue
            if fault and args.die_mode in ("raise", "sigkill", "sigstop"):
                print(f"FAULT-AT {time.time():.3f}", flush=True)
                if args.die_mode == "raise":
                    raise RuntimeError("injected failure in the training loop")
                os.kill(os.getpid(), 19 if args.die_mode == "sigstop" else 9)
            loss = F.cross_entropy(model(x[idx]), y[idx], reduction="sum" if scaler else "mean")
            if j == 0:
                opt.zero_grad()
            (scaler.scale(loss) if scaler else loss).backward()
            if log:     # (before the step: a stop signal ends the loop inside opt.step(), after the update)
                log.write("".join(f"{epoch} {step} {i}\n" for i in idx.tolist()))
                log.flush()
            if j < k - 1:
                continue
            if fault and args.die_mode == "skip-update":    # after the reduction (GradScaler on an overflow)
                skipped = True
                print(f"FAULT-AT {time.time():.3f}", flush=True)
                continue
            if scaler:      # leaves out the update when the reduced gradients overflowed (every rank alike)
                scale = scaler.get_scale()
                scaler.step(opt)
                scaler.update()
                left_out += scaler.get_scale() < scale
            else:
                opt.step()
            dyn.report(loss=loss)
            if args.checkpoint and args.checkpoint_every and dyn.step_count % args.checkpoint_every == 0:
                dyn.save(args.checkpoint)
            if args.sleep:
                time.sleep(args.sleep)
    if rank == 0:
        print(f"FINISHED steps {dyn.step_count} left out {left_out} plan {list(dyn.plan.batch_sizes)} restarts {restarts} imported "
              f"horovod={'horovod' in sys.modules} mpi4py={'mpi4py' in sys.modules}", flush=True)
    dyn.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("grad", "train", "oom"), required=True)
    p.add_argument("--accumulation", type=int, default=1)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--base-batch", type=int, default=8)
    p.add_argument("--controller", default="static")
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="resume from --checkpoint when it exists")
    p.add_argument("--seen-log", default=None, help="append 'epoch step index' lines per rank")
    p.add_argument("--die-at-step", type=int, default=-1, help="on the first attempt only (no torchrun restart yet)")
    p.add_argument("--die-rank", type=int, default=1, help="-1: every rank (skip-update)")
    p.add_argument("--die-mode", choices=("sigkill", "sigstop", "raise", "skip", "skip-update", "skip-backward"), default="sigkill")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds per step (fault timing tests)")
    p.add_argument("--grad-scaler", action="store_true", help="torch.amp.GradScaler, started where it overflows")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    {"grad": grad_mode, "train": train_mode, "oom": oom_mode}[args.mode](args)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
