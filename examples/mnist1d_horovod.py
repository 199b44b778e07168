"""A plain Horovod PyTorch training script on MNIST-1D with the dynamix hook added.

The lines marked  # dynamix  are the whole change from the usual Horovod script:
  - build Dynamix instead of hvd.DistributedOptimizer (it wraps the optimizer with op=Sum),
  - iterate dyn.batches(epoch) instead of a DistributedSampler-backed loader,
  - dyn.backward(loss) instead of loss.backward(), and dyn.step(loss) after optimizer.step().

Run:
  horovodrun -np 2 python examples/mnist1d_horovod.py
  mpirun -np 4 --allow-run-as-root --oversubscribe python -m mpi4py examples/mnist1d_horovod.py
Options: --controller static|proportional|goodput|ppo, --epochs, --samples, --run-dir,
--checkpoint PATH (resume from it if it exists, write it every --checkpoint-every steps).
"""
from __future__ import annotations

import argparse
import os
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix  # dynamix


def load_mnist1d(samples: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """MNIST-1D generated locally (no download), same data on every rank."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.seed = samples, seed
    d = make_dataset(args)
    f = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return f(d["x"]), torch.as_tensor(d["y"]), f(d["x_test"]), torch.as_tensor(d["y_test"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--base-batch", type=int, default=32)
    p.add_argument("--controller", default="static")
    p.add_argument("--run-dir", default=None)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--progress", action="store_true", help="progress bar on rank 0")
    p.add_argument("--allow-resize", action="store_true", help="resume a checkpoint of another world size")
    p.add_argument("--seen-log", default=None, help="append 'step index' lines per rank (tests)")
    p.add_argument("--die-at-step", type=int, default=-1, help="rank 1 SIGKILLs itself there (tests)")
    args = p.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    x, y, xt, yt = load_mnist1d(args.samples)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dyn = Dynamix(model, optimizer, dataset_size=len(x), base_batch=args.base_batch,  # dynamix
                  controller=args.controller, run_dir=args.run_dir, interval_steps=10,
                  progress=args.progress)
    if args.checkpoint and os.path.exists(args.checkpoint):
        dyn.load(args.checkpoint, allow_resize=args.allow_resize)
    log = open(f"{args.seen_log}.{hvd.rank()}", "a") if args.seen_log else None  # noqa: SIM115
    t0 = time.perf_counter()
    for epoch in range(dyn.epoch, args.epochs):
        for idx in dyn.batches(epoch):  # dynamix
            step = dyn.step_count
            if step == args.die_at_step and hvd.rank() == 1:
                os.kill(os.getpid(), 9)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            dyn.optimizer.zero_grad()
            dyn.backward(loss)  # dynamix
            dyn.optimizer.step()
            dyn.step(loss)  # dynamix
            if log:
                log.write("".join(f"{step} {i}\n" for i in idx.tolist()))
                log.flush()
            if args.checkpoint and args.checkpoint_every and dyn.step_count % args.checkpoint_every == 0:
                dyn.save(args.checkpoint)
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        if hvd.rank() == 0:
            print(f"epoch {epoch}: plan {list(dyn.plan.batch_sizes)} test accuracy {acc:.4f} "
                  f"({time.perf_counter() - t0:.1f}s)", flush=True)
    if hvd.rank() == 0:
        print(f"final test accuracy {acc:.4f}", flush=True)
    dyn.close()


if __name__ == "__main__":
    main()
