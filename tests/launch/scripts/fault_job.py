"""A tiny dynamix job that fails on one rank at a given step (fault tests)."""
from __future__ import annotations

import argparse
import os
import signal
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["raise", "sigkill"], required=True)
p.add_argument("--rank", type=int, default=1)
p.add_argument("--step", type=int, default=5)
args = p.parse_args()

hvd.init()
torch.manual_seed(0)
x, y = torch.randn(4000, 8), torch.randint(0, 3, (4000,))
model = torch.nn.Linear(8, 3)
dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.1), dataset_size=len(x), base_batch=8,
              interval_steps=3, collector=False)
for idx in dyn.batches(0):
    if dyn.step_count == args.step and hvd.rank() == args.rank:
        print(f"FAULT-AT {time.time():.3f}", flush=True)
        if args.mode == "raise":
            raise RuntimeError("injected failure in the training loop")
        os.kill(os.getpid(), signal.SIGKILL)
    dyn.optimizer.zero_grad()
    dyn.backward(F.cross_entropy(model(x[idx]), y[idx]))
    dyn.optimizer.step()
    dyn.step(0.0)
    time.sleep(0.01)
print("FINISHED", flush=True)
