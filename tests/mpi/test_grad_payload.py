"""The scenario's ``grad_mb`` payload (``emulate.payload.WithPayload``) goes through the hook's
Horovod allreduce with the real gradients, and leaves the real gradients unchanged.

The payload's backward is given a per-rank constant here (``fill = rank + 1``; the bench uses 0),
so after the step its gradient must be the reduced value sum_i (n_i / T) (i + 1): something only
the allreduce across ranks can produce. The model's own gradients must still equal the
single-process gradient on the union of the step's samples (<= 1e-6), across uneven plans."""
from __future__ import annotations

import copy

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from _models import ScriptedController, make_data, make_model, uneven_script
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.emulate.payload import WithPayload, payload_numel, with_payload
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.plan import PlanBounds

hvd.init()
GRAD_MB = 0.5


def test_payload_is_reduced_and_real_gradient_unchanged(comm):
    world, rank = comm.Get_size(), comm.Get_rank()
    x, y = make_data()
    net = make_model()
    model = WithPayload(net, GRAD_MB, fill=float(rank + 1))
    assert model.payload_bytes == payload_numel(GRAD_MB) * 4 == 500_000
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cfg = DynamixConfig(base_batch=7, interval_steps=3, min_decision_s=0, deadband=0.0, max_batch=64, seed=11)
    bounds = PlanBounds(max_batch=(64,) * world, deadband=0.0)
    ctl = ScriptedController(bounds, 7, uneven_script(world)) if rank == 0 else None
    dyn = Dynamix(model, opt, dataset_size=len(x), config=cfg, controller=ctl)
    worst_real, worst_payload, plans, steps = 0.0, 0.0, set(), 0
    for idx in dyn.batches(0):
        sl = dyn.current_slice
        union = torch.as_tensor(dyn.step_indices(sl))
        ref = copy.deepcopy(net)
        F.cross_entropy(ref(x[union]), y[union]).backward()
        dyn.optimizer.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        assert float(loss.detach()) == float(F.cross_entropy(net(x[idx]), y[idx]).detach())     # the payload adds exactly 0
        loss.backward()
        dyn.optimizer.synchronize()
        for p, r in zip(net.parameters(), ref.parameters()):
            worst_real = max(worst_real, float((p.grad - r.grad).abs().max()))
        want = sum(n * (i + 1) for i, n in enumerate(sl.sizes)) / sum(sl.sizes)
        g = model.payload.weight.grad
        assert g.numel() == payload_numel(GRAD_MB)
        worst_payload = max(worst_payload, float((g - want).abs().max()))
        with dyn.optimizer.skip_synchronize():
            dyn.optimizer.step()
        plans.add(tuple(sl.sizes))
        steps += 1
    dyn.close()
    assert worst_real <= 1e-6, worst_real
    assert worst_payload <= 1e-5, worst_payload
    assert steps >= 6
    if world > 1:
        assert len(plans) >= 3, plans


def test_zero_payload_is_the_bare_model():
    net = make_model()
    assert with_payload(net, 0.0) is net
    m = with_payload(net, 0.25)
    assert isinstance(m, WithPayload) and m.payload.weight.numel() == 62_500
    x, y = make_data(n=16)
    F.cross_entropy(m(x), y).backward()
    assert float(m.payload.weight.grad.abs().max()) == 0.0
