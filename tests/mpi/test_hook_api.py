"""The hook as a plain Horovod loop (issue 21): ``loss.backward()`` and ``optimizer.step()`` on the
optimizer Dynamix returns, ``dyn.report(loss=...)``; the deprecated aliases warn once; close()
restores sys.excepthook; BatchNorm raises the smallest local batch; the noise scale is estimated
from the sampled steps only."""
from __future__ import annotations

import sys
import warnings

import horovod.torch as hvd
import pytest
import torch
import torch.nn.functional as F

from _models import make_data, make_model
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.runlog import read_decisions

hvd.init()


def _train(dyn, model, x, y, steps, old_api=False):
    opt = dyn.optimizer
    for idx in dyn.batches(0):
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        if old_api:
            dyn.backward(loss)
            opt.step()
            dyn.step(loss)
        else:
            loss.backward()
            opt.step()
            dyn.report(loss=loss)
        if dyn.step_count >= steps:
            break
    dyn._pending.clear()


def _record_sampled_steps(dyn) -> list[int]:
    """The steps whose gradient statistics are finished (filled in as training runs)."""
    finished: list[int] = []
    orig = dyn.gns.finish

    def finish(total, n_local, reduced):
        finished.append(dyn.step_count)
        orig(total, n_local, reduced)

    dyn.gns.finish = finish
    return finished


def test_new_loop_reports_loss_and_samples_gns(comm, tmp_path_factory):
    rank, world = comm.Get_rank(), comm.Get_size()
    run_dir = comm.bcast(str(tmp_path_factory.mktemp("api")) if rank == 0 else None, root=0)
    x, y = make_data(n=7000)
    model = make_model()
    cfg = DynamixConfig(base_batch=8, interval_steps=100, first_decision_steps=100, min_decision_s=0, gns_every=5, controller="static",
                        collector=False, react=False, gns=True,      # (auto would be off: static reads no noise scale)
                        run_dir=run_dir, tensorboard=False)
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg)
    finished = _record_sampled_steps(dyn)
    _train(dyn, model, x, y, 200 + dyn.config.decision_lag)   # (the decision after step 200 broadcast)
    noise = dyn.noise_scale
    dyn.close()
    if world > 1:
        # statistics only on the sampled steps: every 5th (100-step intervals hold >= 16 of them)
        # and the last of each interval
        assert finished == [s for s in range(200) if (s + 1) % 5 == 0], finished
        if rank == 0:
            assert noise == noise and noise > 0, noise
    else:
        assert finished == []           # one rank: no estimate possible, nothing measured
    if rank == 0:
        records = read_decisions(run_dir)                 # schema-checked: unknown/missing fields raise
        assert [r.step for r in records] == [100, 200]
        assert all(r.workers[0].loss == r.workers[0].loss for r in records[1:])   # reported: finite
        assert all(r.lr is not None and r.lr > 0 for r in records)        # the writer adds the LR


@pytest.mark.parametrize("controller,sampled", [("static", False), ("proportional", False), ("goodput", True)])
def test_gradient_statistics_only_for_a_controller_that_reads_them(comm, controller, sampled):
    """gns left to auto (issue 25): static and proportional never read the noise scale, so the hook
    takes no gradient statistics for them (no per-step cost); goodput does."""
    x, y = make_data(n=2000)
    model = make_model()
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), base_batch=8,
                  controller=controller, interval_steps=10, min_decision_s=0, collector=False)
    assert dyn.config.gns is sampled
    finished = _record_sampled_steps(dyn)
    _train(dyn, model, x, y, 40)
    dyn.close()
    assert bool(finished) is (sampled and comm.Get_size() > 1), finished


def test_deprecated_aliases_warn_once_and_close_restores_excepthook(comm):
    x, y = make_data(n=600)
    model = make_model()
    before = sys.excepthook
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), base_batch=8,
                  collector=False)
    assert sys.excepthook is not before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(dyn, model, x, y, 5, old_api=True)
    dep = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert sum("dyn.backward" in m for m in dep) <= 1 and sum("dyn.step" in m for m in dep) <= 1
    assert dyn.step_count == 5
    dyn.close()
    assert sys.excepthook is before


def test_batchnorm_raises_min_batch(comm):
    world = comm.Get_size()
    x, y = make_data(n=600)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), base_batch=32,
                      bn_min_batch=12, collector=False)
    assert dyn.bounds.min_batch == 12
    if comm.Get_rank() == 0:
        assert any("SyncBatchNorm" in str(w.message) for w in caught)
    _train(dyn, model, x, y, 3)
    assert dyn.plan.batch_sizes == (32,) * world
    dyn.close()


def test_lr_scheduler_on_the_hooks_optimizer(comm):
    """A torch LR scheduler over ``dyn.optimizer`` (it wraps ``optimizer.step`` to track calls):
    steps train, the scheduler's LR reaches the update, and no warning says step() was skipped."""
    x, y = make_data(n=2000)
    model = make_model()
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.1), dataset_size=len(x), base_batch=8,
                  controller="static", interval_steps=10, min_decision_s=0, collector=False)
    sched = torch.optim.lr_scheduler.StepLR(dyn.optimizer, step_size=5, gamma=0.5)
    opt = dyn.optimizer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for idx in dyn.batches(0):
            before = [p.detach().clone() for p in model.parameters()]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
            if dyn.step_count >= 12:
                break
    dyn._pending.clear()
    dyn.close()
    assert dyn.step_count == 12
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 2)
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)], [str(w.message) for w in caught]


@pytest.mark.parametrize("first,interval,warmup,expected", [(5, 10, 0, 5), (5, 3, 0, 3), (4, 10, 7, 7)])
def test_first_decision_after_first_decision_steps_without_the_warm_up_step(comm, first, interval, warmup, expected):
    """The job's first decision comes after ``first_decision_steps`` (at most ``interval_steps``,
    not before ``warmup_steps``) and its rows leave out the first step (a warm-up); the next one
    comes a regular interval later."""
    x, y = make_data(n=3000)
    model = make_model()
    rows = []
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), base_batch=8,
                  controller="proportional", interval_steps=interval, min_decision_s=0, collector=False,
                  first_decision_steps=first, warmup_steps=warmup, react=False,
                  metrics_fn=lambda ws: rows.append((dyn.step_count, ws.steps)))
    _train(dyn, model, x, y, expected + interval)
    dyn.close()
    assert rows[0] == (expected, expected - 1), rows
    assert rows[1] == (expected + interval, interval), rows
