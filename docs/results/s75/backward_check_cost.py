"""Session 75: what the check that every micro-batch ran backward costs, timed directly (not a test).

Horovod engine: once per step, ``apply.horovod_backward_passes`` on Horovod's own per-parameter
countdown (the fast path: the parameter that counted every pass last step), on a real
``hvd.DistributedOptimizer`` of a 161-parameter model (ResNet-50's count of tensors).
DDP engine, only with accumulation > 1 and several ranks: per micro-batch a forward hook on the DDP
model registers a gradient hook on its output, which runs once in backward; timed as forward +
backward of a small model with and without the two hooks (one process, gloo, world of 1, the
hooks installed by hand as ddp.Dynamix installs them). Run: .venv/bin/python docs/results/s75/backward_check_cost.py
"""
import os
import statistics
import time

import horovod.torch as hvd
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dynamix_hvd.apply import horovod_backward_passes
from dynamix_hvd.ddp import _tensors

torch.set_num_threads(1)
hvd.init()
model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(80)], torch.nn.Linear(4, 1, bias=False))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
                               op=hvd.Sum, backward_passes_per_step=2)
params = list(opt._allreduce_delay)
opt._requires_update = set(params)      # (Horovod fills it as it hooks the parameters: at more than one rank)
for p in params:
    opt._allreduce_delay[p] = 0          # as after every micro-batch's backward
n = 200_000
passes, hint = horovod_backward_passes(opt)
t = time.perf_counter()
for _ in range(n):
    passes, hint = horovod_backward_passes(opt, hint)
fast = (time.perf_counter() - t) / n
t = time.perf_counter()
for _ in range(2000):
    horovod_backward_passes(opt)
slow = (time.perf_counter() - t) / 2000
print(f"horovod: {len(params)} parameters, passes {passes}; per step {fast * 1e9:.0f} ns (with the hint), "
      f"{slow * 1e6:.1f} us (first step of the job: the full scan)")

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("gloo", rank=0, world_size=1)
net = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
x = torch.randn(32, 64)
seen = []


def watch(module, args, output):
    if torch.is_grad_enabled():
        for t in _tensors(output):
            if t.requires_grad:
                t.register_hook(lambda g: seen.append(1))


def step() -> float:
    t = time.perf_counter()
    with net.no_sync():
        net(x).sum().backward()
    return time.perf_counter() - t


rounds = {"plain": [], "hooked": []}
for r in range(7):
    for kind in ("plain", "hooked"):
        h = net.register_forward_hook(watch) if kind == "hooked" else None
        for _ in range(200):
            step()
        rounds[kind].append(statistics.median(step() for _ in range(2000)))
        if h is not None:
            h.remove()
pl, hk = statistics.median(rounds["plain"]), statistics.median(rounds["hooked"])
print(f"ddp (accumulation > 1 only): forward+backward of a micro-batch {pl * 1e6:.1f} us plain, {hk * 1e6:.1f} us "
      f"with the hooks, +{(hk - pl) * 1e6:.1f} us (medians of 7 alternated rounds of 2000); hook ran {len(seen)} times")
dist.destroy_process_group()
