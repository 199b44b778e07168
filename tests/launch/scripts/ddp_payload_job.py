"""Test job for tests/launch/test_ddp_payload.py, run under torchrun (gloo): the scenario's grad_mb
payload (``emulate.payload.WithPayload``) on the ddp engine. The payload's backward is filled with
``rank + 1`` (the bench uses 0) so that after each step its gradient must be the reduced
sum_i (n_i/T)(i+1); the model's own gradient must equal one big batch's over the step's samples.

    torchrun --standalone --nproc-per-node 2 tests/launch/scripts/ddp_payload_job.py
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "mpi"))
from _models import ScriptedController, make_data, make_model, uneven_script  # noqa: E402

from dynamix_hvd.ddp import Dynamix  # noqa: E402
from dynamix_hvd.emulate.payload import WithPayload  # noqa: E402
from dynamix_hvd.plan import PlanBounds  # noqa: E402


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = make_data()
    net = make_model()
    ref = copy.deepcopy(net)
    model = WithPayload(net, 0.5, fill=float(rank + 1))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    bounds = PlanBounds(max_batch=(64,) * world, deadband=0.0)
    ctl = ScriptedController(bounds, 7, uneven_script(world)) if rank == 0 else None
    dyn = Dynamix(ddp, opt, dataset_size=len(x), base_batch=7, interval_steps=3, min_decision_s=0, deadband=0.0,
                  max_batch=64, seed=11, controller=ctl, collector=False)
    worst_real = worst_payload = 0.0
    steps, plans = 0, set()
    for idx in dyn.batches(0):
        sl = dyn.current_slice
        union = torch.as_tensor(dyn.step_indices(sl))
        ref.load_state_dict(net.state_dict())
        ref.zero_grad()
        F.cross_entropy(ref(x[union]), y[union]).backward()
        opt.zero_grad()
        F.cross_entropy(ddp(x[idx]), y[idx]).backward()
        for p, r in zip(net.parameters(), ref.parameters()):
            worst_real = max(worst_real, float((p.grad - r.grad).abs().max()))
        want = sum(n * (i + 1) for i, n in enumerate(sl.sizes)) / sum(sl.sizes)
        worst_payload = max(worst_payload, float((model.payload.weight.grad - want).abs().max()))
        opt.step()
        plans.add(tuple(sl.sizes))
        steps += 1
    t = torch.tensor([worst_real, worst_payload], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"PAYLOAD real {float(t[0]):.3e} payload {float(t[1]):.3e} steps {steps} plans {len(plans)} "
              f"bytes {model.payload_bytes}", flush=True)
    dyn.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
