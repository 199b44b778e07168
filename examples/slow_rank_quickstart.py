"""The quickstart on a cluster that is really uneven: one rank is SLOWDOWN times slower.

The ranks of one machine are identical, so this script makes them emulate devices: every rank's
forward+backward is padded (a sleep before backward, where a slower GPU would spend the time) to
``--ms-per-sample`` x its local batch, and rank ``--slow-rank`` pays ``--slowdown`` times that.
It trains MNIST-1D and prints the wall time at which the test accuracy first reached
``--target``, so static and a dynamix controller can be compared on the same job:

  horovodrun -np 2 python examples/slow_rank_quickstart.py --controller static
  horovodrun -np 2 python examples/slow_rank_quickstart.py --controller proportional
  mpirun -np 4 --allow-run-as-root --oversubscribe python -m mpi4py examples/slow_rank_quickstart.py \\
      --controller proportional

Without emulation (``--slowdown 1``) every controller keeps the even split: the steps are then
timed as identical within their noise.
"""
from __future__ import annotations

import argparse
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix


def load_mnist1d(samples: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.seed = samples, seed
    d = make_dataset(args)
    f = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return f(d["x"]), torch.as_tensor(d["y"]), f(d["x_test"]), torch.as_tensor(d["y_test"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--controller", default="proportional")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--target", type=float, default=0.45, help="test accuracy to time")
    p.add_argument("--ms-per-sample", type=float, default=0.25, help="emulated device speed of a normal rank")
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--slowdown", type=float, default=4.0)
    p.add_argument("--run-dir", default=None)
    args = p.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    x, y, xt, yt = load_mnist1d(args.samples)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dyn = Dynamix(model, optimizer, dataset_size=len(x), base_batch=32, controller=args.controller,
                  run_dir=args.run_dir, interval_steps=10)
    optimizer = dyn.optimizer
    ms = args.ms_per_sample * (args.slowdown if hvd.rank() == args.slow_rank % hvd.size() else 1.0)
    t0, reached, acc = time.perf_counter(), None, 0.0
    for epoch in range(args.epochs):
        for idx in dyn.batches(epoch):
            t_batch = time.perf_counter()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            pad = ms * 1e-3 * len(idx) - (time.perf_counter() - t_batch)   # the emulated device's speed
            if pad > 0:
                time.sleep(pad)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        wall = time.perf_counter() - t0
        if reached is None and acc >= args.target:
            reached = wall
        if hvd.rank() == 0:
            print(f"epoch {epoch}: plan {list(dyn.plan.batch_sizes)} test accuracy {acc:.4f} ({wall:.1f} s)", flush=True)
    if hvd.rank() == 0:
        hit = f"{reached:.1f} s" if reached is not None else "not reached"
        print(f"{args.controller}: time to accuracy {args.target}: {hit}; final test accuracy {acc:.4f}", flush=True)
    dyn.close()


if __name__ == "__main__":
    main()
