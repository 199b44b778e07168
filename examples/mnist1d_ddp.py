"""MNIST-1D data-parallel training with PyTorch DistributedDataParallel under torchrun.

examples/mnist1d_ddp_plain.py is the plain DDP script; examples/mnist1d_ddp.py is the same script
with dynamix, and differs from it in 3 lines: the import, constructing ``Dynamix`` on the DDP model
and optimizer, and ``dyn.batches(epoch)`` as the loop's batches. The training loop
(``loss.backward()``, ``optimizer.step()``) is the same. dynamix settings come from the environment
(DYNAMIX_CONTROLLER=proportional, DYNAMIX_RUN_DIR=runs/a, ...) or a TOML file (DYNAMIX_CONFIG).

Run:
  torchrun --standalone --nproc-per-node 4 examples/mnist1d_ddp.py
  torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr HOST0 --master-port 29500 examples/mnist1d_ddp.py
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from dynamix_hvd.ddp import Dynamix


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
    p.add_argument("--batch", type=int, default=32, help="per-rank batch size")
    args = p.parse_args()

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    torch.set_num_threads(1)
    x, y, xt, yt = load_mnist1d(args.samples)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(40, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dyn = Dynamix(model, optimizer, dataset_size=len(x), base_batch=args.batch)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        for idx in dyn.batches(epoch):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: test accuracy {acc:.4f} ({time.perf_counter() - t0:.1f}s)", flush=True)
    if dist.get_rank() == 0:
        print(f"final test accuracy {acc:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
