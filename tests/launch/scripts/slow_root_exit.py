"""A job whose last step starts a decision, rank 0 slower than the others to send its row, and
no ``close()``: the script ends with the decision's messages in flight (``decision_lag`` 2).

A fast rank must not leave (and shut its engine down) before every rank has sent what the last
decision started; without that, rank 0's send meets an engine that is already shut down
("Horovod has been shut down", or MPI finalised under it). The delay is a real sleep around the
real transport's method on rank 0, nothing replaced.

    horovodrun --gloo -np 2 -H localhost:2 python tests/launch/scripts/slow_root_exit.py
    mpirun -np 2 python -m mpi4py tests/launch/scripts/slow_root_exit.py
    torchrun --standalone --nproc-per-node 2 tests/launch/scripts/slow_root_exit.py --engine ddp
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--engine", choices=("horovod", "ddp"), default="horovod")
args = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
model = torch.nn.Linear(8, 2)
kw = dict(dataset_size=len(x), base_batch=4, controller="proportional", interval_steps=2, first_decision_steps=2,
          min_decision_s=0, decision_lag=2)
if args.engine == "horovod":
    import horovod.torch as hvd

    from dynamix_hvd import Dynamix
    hvd.init()
    rank = hvd.rank()
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.1), **kw)
else:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dynamix_hvd.ddp import Dynamix as DDPDynamix
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(model)
    dyn = DDPDynamix(model, torch.optim.SGD(model.parameters(), lr=0.1), **kw)
optimizer = dyn.optimizer
if rank == 0:
    send = dyn.comm.gather_rows_async

    def slow_send(row):
        time.sleep(0.5)      # rank 0 is busy (its controller, a slow disk) when the last row leaves
        return send(row)
    dyn.comm.gather_rows_async = slow_send
steps = 0
for idx in dyn.batches(0):
    loss = F.cross_entropy(model(x[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    steps += 1
print(f"rank {rank}: {steps} steps, a decision in flight: {dyn._inflight is not None}", flush=True)
