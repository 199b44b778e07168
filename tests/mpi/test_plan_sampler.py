"""Under real MPI: every rank applies rank 0's plans at the same step, all ranks take the
same number of steps, and every index is seen exactly once per epoch (with and without
DataLoader worker processes, whose prefetching delays plans by an agreed lag)."""
from __future__ import annotations

import horovod.torch as hvd
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from _models import ScriptedController, make_data, make_model, uneven_script
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.errors import DynamixError
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.runlog import read_events
from dynamix_hvd.plan import PlanBounds

hvd.init()


def build(comm, **kw):
    world = comm.Get_size()
    x, y = make_data(n=503)
    model = make_model()
    cfg = DynamixConfig(base_batch=9, interval_steps=2, min_decision_s=0, deadband=0.0, max_batch=64, seed=3, **kw)
    bounds = PlanBounds(max_batch=(64,) * world, deadband=0.0)
    ctl = ScriptedController(bounds, 9, uneven_script(world, 6)) if comm.Get_rank() == 0 else None
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg, controller=ctl)
    return dyn, model, x, y


@pytest.mark.parametrize("num_workers", [0, 2])
def test_exact_once_and_same_plans(comm, num_workers):
    dyn, model, x, y = build(comm)
    ds = TensorDataset(torch.arange(len(x)), x, y)
    for epoch in range(2):
        seen, steps, plan_trace = [], 0, []
        for ids, xb, yb in dyn.loader(ds, epoch, num_workers=num_workers):
            assert len(ids) == dyn.local_batch
            seen.extend(ids.tolist())
            plan_trace.append((dyn.current_slice.step, dyn.current_slice.sizes))
            dyn.optimizer.zero_grad()
            dyn.backward(F.cross_entropy(model(xb), yb))
            dyn.optimizer.step()
            dyn.step(0.0)
            steps += 1
        everything = comm.gather(seen, root=0)
        traces = comm.allgather(plan_trace)
        assert all(t == traces[0] for t in traces), "ranks disagree on step sizes"
        if comm.Get_rank() == 0:
            flat = sorted(i for r in everything for i in r)
            assert flat == list(range(len(x))), "an index was skipped or repeated"
        if epoch == 0:
            assert len({t[1] for t in plan_trace}) >= (3 if comm.Get_size() > 1 else 1)
    if num_workers:
        assert dyn.lag_steps > 0
    dyn.close()


def test_loader_rejects_batch_size(comm):
    dyn, model, x, y = build(comm)
    with pytest.raises(DynamixError, match="batch_size"):
        next(dyn.loader(TensorDataset(x, y), 0, batch_size=4))
    dyn.close()


def test_average_optimizer_is_rejected(comm):
    x, y = make_data()
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Average)
    with pytest.raises(DynamixError, match="op=hvd.Sum"):
        Dynamix(model, opt, dataset_size=len(x), base_batch=4)


def test_lr_rule_follows_global_batch(comm):
    dyn, model, x, y = build(comm, lr_rule="linear")
    base_lr = dyn.optimizer.param_groups[0]["lr"]
    for idx in dyn.batches(0):
        dyn.optimizer.zero_grad()
        dyn.backward(F.cross_entropy(model(x[idx]), y[idx]))
        dyn.optimizer.step()
        dyn.step(0.0)
        expect = base_lr * dyn.plan.global_batch / (9 * comm.Get_size())
        assert np.isclose(dyn.optimizer.param_groups[0]["lr"], expect), (dyn.plan, expect)
    dyn.close()


class FaultyController(ScriptedController):
    name = "faulty"

    def decide(self, state):
        raise RuntimeError("boom")


def test_controller_fault_keeps_plan_then_falls_back(comm, tmp_path_factory):
    world = comm.Get_size()
    x, y = make_data(n=400)
    model = make_model()
    run_dir = comm.bcast(str(tmp_path_factory.mktemp("run")) if comm.Get_rank() == 0 else None)
    bounds = PlanBounds(max_batch=(64,) * world)
    ctl = FaultyController(bounds, 8, [[8] * world]) if comm.Get_rank() == 0 else None
    cfg = DynamixConfig(base_batch=8, interval_steps=2, min_decision_s=0, fallback_controller="static", run_dir=run_dir)
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg,
                  controller=ctl)
    with pytest.warns(RuntimeWarning) if comm.Get_rank() == 0 else _nullcontext():
        for idx in dyn.batches(0):
            dyn.optimizer.zero_grad()
            dyn.backward(F.cross_entropy(model(x[idx]), y[idx]))
            dyn.optimizer.step()
            dyn.step(0.0)
    assert dyn.plan.batch_sizes == (8,) * world
    dyn.close()
    if comm.Get_rank() == 0:
        from pathlib import Path
        assert dyn.controller.name == "static"
        events = [e.to_dict() for e in read_events(run_dir)]              # schema-checked
        assert sum("controller_error" in e for e in events) == 3
        assert [e["fallback"]["to"] for e in events if "fallback" in e] == ["static"]
        assert list((Path(run_dir) / "tb").glob("events.out.tfevents.*")), "no TensorBoard event file"


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_missing_policy_file_falls_back_named_in_log(comm, tmp_path_factory):
    x, y = make_data(n=200)
    model = make_model()
    run_dir = comm.bcast(str(tmp_path_factory.mktemp("run")) if comm.Get_rank() == 0 else None)
    cfg = DynamixConfig(base_batch=8, controller="ppo", controller_kwargs={"policy": "/nonexistent/policy.zip"},
                        fallback_controller="proportional", run_dir=run_dir)
    with pytest.warns(RuntimeWarning, match="fallback controller 'proportional'") if comm.Get_rank() == 0 \
            else _nullcontext():
        dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg)
    dyn.close()
    if comm.Get_rank() == 0:
        assert dyn.controller.name == "proportional"
        first = read_events(run_dir)[0].to_dict()
        assert first["fallback"]["from"] == "ppo" and "not found" in first["fallback"]["reason"]
