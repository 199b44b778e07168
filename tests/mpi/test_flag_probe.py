"""The per-step flags ride on one gradient element (apply.FlagProbe), with no collective of their
own: an early-decision flag leaves the step's gradient exactly the big batch's (the poisoned
element is restored from every rank's kept value); a gradient that is really not finite is left
to the user, with no decision and no hang; fp16 compression keeps the probe, a custom compression
falls back to the flag tensor, and an out-of-memory error is handled either way; an out-of-memory
report after the probe has left is refused with an error instead of a wrong update."""
from __future__ import annotations

import horovod.torch as hvd
import pytest
import torch
import torch.nn.functional as F

from _models import reference_grads, ScriptedController, make_data, make_model, uneven_script
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.errors import DynamixError
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.plan import PlanBounds

hvd.init()



@pytest.mark.parametrize("uneven", [False, True])
def test_early_decision_flag_keeps_the_gradient_exact(comm, uneven):
    rank, world = comm.Get_rank(), comm.Get_size()
    x, y = make_data()
    model = make_model()
    cfg = DynamixConfig(base_batch=7, interval_steps=3 if uneven else 1000, min_decision_s=0, deadband=0.0,
                        max_batch=64, seed=3, collector=False, warmup_steps=0)
    ctl = None
    if uneven and rank == 0:
        ctl = ScriptedController(PlanBounds(max_batch=(64,) * world, deadband=0.0), 7, uneven_script(world))
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.1), dataset_size=len(x), config=cfg,
                  controller=ctl if uneven else "static")
    assert (dyn._weighting.probe is not None) == (world > 1)
    worst, early, sums = 0.0, 0, set()
    for idx in dyn.batches(0):
        sl = dyn.current_slice
        union = torch.as_tensor(dyn.step_indices(sl))
        ref = reference_grads(model, x[union], y[union])
        flag = sl.step % 4 == 2                       # the last rank's detector "fired" before this step
        if flag and rank == world - 1:
            dyn.local.react_flag = 1
        dyn.optimizer.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        dyn.optimizer.synchronize()                   # the user sees the gradients, e.g. to clip them
        for p, r in zip(model.parameters(), ref):
            d = float((p.grad - r).abs().max())
            worst = max(worst, d if d == d else float("inf"))     # (max() would drop a NaN)
        if flag:
            assert dyn.local.react_ranks == [world - 1], (sl.step, dyn.local.react_ranks)
            early += 1
        else:
            assert dyn.local.react_ranks is None, (sl.step, dyn.local.react_ranks)
        sums.add(dyn._averaging)
        with dyn.optimizer.skip_synchronize():
            dyn.optimizer.step()
        assert not dyn._redo
        if sl.step >= 20:
            break
    dyn._pending.clear()
    dyn.close()
    assert worst <= 1e-6, worst
    assert early >= 5
    if world > 1:
        # both of Horovod's ops were exercised: Average on uniform steps, Sum on uneven ones
        assert sums == ({False, True} if uneven else {True}), sums


def test_a_gradient_that_is_not_finite_is_left_to_the_user(comm):
    rank, world = comm.Get_rank(), comm.Get_size()
    x, y = make_data()
    model = make_model()
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.1), dataset_size=len(x), base_batch=8,
                  interval_steps=1000, collector=False, controller="static")
    opt = dyn.optimizer
    steps = 0
    for idx in dyn.batches(0):
        loss = F.cross_entropy(model(x[idx]), y[idx])
        if steps == 3 and rank == 0:
            loss = loss * float("nan")                # the model's own non-finite gradient
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert not dyn._redo and dyn.local.react_ranks is None
        steps += 1
        if steps == 4:
            break
    dyn._pending.clear()
    first = next(model.parameters())
    # as in plain Horovod: the update went through with the non-finite gradient, on every rank
    assert not torch.isfinite(first).all()
    assert dyn.step_count == 4
    dyn.close()


class CustomNone(hvd.Compression.none):
    """A user's own compression: dynamix cannot assume it is elementwise."""


@pytest.mark.parametrize("compression", ["none", "fp16", "custom"])
def test_out_of_memory_with_each_flag_transport(comm, compression):
    rank, world = comm.Get_rank(), comm.Get_size()
    x, y = make_data(n=400)
    model = make_model()
    comp = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16, "custom": CustomNone}[compression]
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), base_batch=16,
                  interval_steps=1000, max_batch=64, collector=False, controller="static", compression=comp)
    if world > 1:
        assert (dyn._weighting.probe is not None) == (compression != "custom")
        assert (dyn._flags is not None) == (compression == "custom")
    seen, redone = [], 0
    for idx in dyn.batches(0):
        loss = F.cross_entropy(model(x[idx]), y[idx])
        dyn.optimizer.zero_grad()
        if rank == world - 1 and len(idx) > 12:      # this rank fits 12 samples
            dyn.report(oom=True)
        else:
            loss.backward()
        dyn.optimizer.step()
        if dyn._redo:
            redone += 1
        else:
            seen.extend(idx.tolist())
    everything = comm.gather(seen, root=0)
    if rank == 0:
        assert sorted(i for r in everything for i in r) == list(range(len(x)))
    assert 1 <= redone <= 3, redone       # 16 -> 14 -> 12: each lowering 10% (at least a quantum)
    assert dyn.plan.batch_sizes[world - 1] <= 12
    dyn.close()


def test_out_of_memory_reported_after_the_probe_left_is_refused(comm):
    world = comm.Get_size()
    x, y = make_data()
    model = make_model()
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), base_batch=8,
                  collector=False, controller="static")
    for idx in dyn.batches(0):
        dyn.optimizer.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        if world > 1:     # the gradients, the probe's with them, are on their way: too late to skip the step
            with pytest.raises(DynamixError, match="after this step's gradients were handed"):
                dyn.report(oom=True)
        dyn.optimizer.step()
        assert not dyn._redo
        break
    dyn._pending.clear()
    dyn.close()
