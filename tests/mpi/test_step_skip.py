"""A rank that leaves a step out. Every rank must call ``optimizer.step()`` once for each batch it
takes; the ranks' gradients are reduced step by step, so a rank that takes its next batch without
stepping (``continue`` on a loss that is not finite, an out-of-memory error caught without
``dyn.report``) would train every later step against the other ranks' next one and the job would
hang or fail at its end (tests/launch: ``--skip-at-step``). It is stopped there, with
``StepSkippedError``. An update left out *after* the reduction (``torch.amp.GradScaler`` on an
overflow decides from the reduced gradients, so the same on every rank) is allowed: its samples
count as consumed, and the next step's flags check that every rank left it out. Real Horovod,
both flag transports (the probe gradient element and a custom compression's flag tensor); at 1
rank nothing can go out of step and nothing is raised."""
from __future__ import annotations

import faulthandler
import os

import horovod.torch as hvd
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _models import make_data, make_model
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.errors import StepSkippedError
from dynamix_hvd.horovod import Dynamix

hvd.init()

SKIP = 5     # the step left out


class CustomNone(hvd.Compression.none):
    """A user's own compression: the flags travel in their own tensor."""


@pytest.fixture(autouse=True)
def no_hang():
    """A rank left out of step makes the others wait for ever (what these tests guard against):
    such a test fails after 60 s with every rank's stack instead of hanging the suite."""
    faulthandler.dump_traceback_later(60, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _build(transport: str) -> tuple[Dynamix, torch.Tensor, torch.Tensor]:
    x, y = make_data(n=800)
    cfg = DynamixConfig(base_batch=8, controller="proportional", collector=False, tensorboard=False, seed=1,
                        interval_steps=4, min_decision_s=0)
    model = make_model()
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg,
                  compression=hvd.Compression.none if transport == "probe" else CustomNone)
    if dyn.world > 1:
        assert (dyn._weighting.probe is not None) == (transport == "probe")
    return dyn, x, y


def _flat(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).numpy().copy()


@pytest.mark.parametrize("transport", ["probe", "tensor"])
def test_an_update_left_out_by_every_rank_after_the_reduction_goes_on(comm, tmp_path_factory, transport):
    rank, world = comm.Get_rank(), comm.Get_size()
    path = os.path.join(comm.bcast(str(tmp_path_factory.mktemp("skip")) if rank == 0 else None, root=0), "ck.pt")
    dyn, x, y = _build(transport)
    seen: list[int] = []
    for k, idx in enumerate(dyn.batches(0)):
        seen.extend(torch.as_tensor(idx).tolist())
        F.cross_entropy(dyn.model(x[idx]), y[idx]).backward()
        dyn.optimizer.synchronize()                 # the reduced gradients (GradScaler's unscale_ and check)
        if k == SKIP:                               # an overflow: every rank leaves the update out
            before = _flat(dyn.model)
            dyn.optimizer.zero_grad()
            assert dyn.save(path)                   # a checkpoint between the skip and the next batch
            assert dyn.step_count == SKIP + 1       # the step's samples count as consumed
            continue
        dyn.optimizer.step()
        dyn.optimizer.zero_grad()
        if k == SKIP + 1:
            assert not np.array_equal(_flat(dyn.model), before)
    steps = dyn.step_count
    dyn.close()
    every = [i for part in comm.allgather(seen) for i in part]
    assert sorted(every) == list(range(800))        # exactly once, the skipped step's samples included
    assert comm.allgather(steps) == [steps] * world
    sums = comm.allgather(float(_flat(dyn.model).sum()))
    assert sums == [sums[0]] * world                # the same model everywhere
    ck = torch.load(path, weights_only=True)["dynamix"]
    assert ck["sampler"]["step"] == SKIP + 1


@pytest.mark.parametrize("transport", ["probe", "tensor"])
def test_an_update_left_out_by_some_ranks_stops_every_rank_at_the_next_step(comm, transport):
    rank, world = comm.Get_rank(), comm.Get_size()
    dyn, x, y = _build(transport)
    skipper = world - 1
    raised = None
    for k, idx in enumerate(dyn.batches(0)):
        F.cross_entropy(dyn.model(x[idx]), y[idx]).backward()
        try:
            dyn.optimizer.synchronize()         # (the step's flags are read here, after the reduction)
        except StepSkippedError as e:
            raised = (k, str(e))
            break
        if k == SKIP and rank == skipper:
            dyn.optimizer.zero_grad()
            continue
        dyn.optimizer.step()
        dyn.optimizer.zero_grad()
        if k == SKIP + 3:
            break
    dyn.close()
    if world == 1:
        assert raised is None           # one rank: nothing to differ from
        return
    assert raised is not None and raised[0] == SKIP + 1         # every rank, at the next step
    assert f"rank(s) [{skipper}] left out the update of step {SKIP}" in raised[1]
    assert f"rank(s) {list(range(world - 1))} applied it" in raised[1]
    assert comm.allgather(raised[0]) == [SKIP + 1] * world


@pytest.mark.parametrize("transport", ["probe", "tensor"])
def test_a_rank_that_takes_its_next_batch_without_stepping_is_stopped_there(comm, transport):
    rank, world = comm.Get_rank(), comm.Get_size()
    dyn, x, y = _build(transport)
    skipper = world - 1
    it = iter(dyn.batches(0))
    for k in range(SKIP + 1):
        idx = next(it)
        if k == SKIP and rank == skipper:       # no backward, no step: on to the next batch
            if world > 1:
                with pytest.raises(StepSkippedError, match=f"rank {skipper} of {world} took its next batch "
                                                           f"without calling optimizer.step\\(\\) for the batch "
                                                           f"of step {SKIP}"):
                    next(it)
                # still the batch of step SKIP: stepping it lets the other ranks' step SKIP finish
                assert dyn.current_slice.step == SKIP
            else:
                next(it)                        # one rank: the batch is left out, nothing else
                assert dyn.step_count == SKIP + 1 and dyn.current_slice.step == SKIP + 1
                break
        F.cross_entropy(dyn.model(x[idx]), y[idx]).backward()
        dyn.optimizer.step()
        dyn.optimizer.zero_grad()
    if world > 1:
        assert comm.allgather(dyn.step_count) == [SKIP + 1] * world
    dyn.close()


@pytest.mark.parametrize("transport", ["probe", "tensor"])
def test_torch_grad_scaler_leaving_out_overflowed_updates(comm, transport):
    """The real ``torch.amp.GradScaler`` in Horovod's documented pattern (``synchronize()``,
    ``unscale_``, ``step`` inside ``skip_synchronize()``), started at a scale that overflows: it
    leaves out the first update(s) on every rank (the reduced gradients are the same everywhere),
    and the job trains on: no StepSkippedError, every sample of the epoch exactly once, the same
    model on every rank, every step counted."""
    rank, world = comm.Get_rank(), comm.Get_size()
    dyn, x, y = _build(transport)
    opt = dyn.optimizer
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127)
    seen: list[int] = []
    scales: list[float] = []
    for idx in dyn.batches(0):
        seen.extend(torch.as_tensor(idx).tolist())
        opt.zero_grad()
        scaler.scale(F.cross_entropy(dyn.model(x[idx]), y[idx], reduction="sum")).backward()
        opt.synchronize()
        scaler.unscale_(opt)
        with opt.skip_synchronize():
            scaler.step(opt)
        scales.append(scaler.get_scale())
        scaler.update()
    steps = dyn.step_count
    dyn.close()
    left_out = sum(1 for a, b in zip(scales, scales[1:] + [scaler.get_scale()]) if b < a)
    assert left_out >= 1, scales[:5]                # the overflow happened: some update was left out
    assert comm.allgather(left_out) == [left_out] * world
    assert steps == len(scales)                     # every step counted, the left-out ones too
    every = [i for part in comm.allgather(seen) for i in part]
    assert sorted(every) == list(range(800))
    sums = comm.allgather(float(_flat(dyn.model).sum()))
    assert sums == [sums[0]] * world and np.isfinite(sums[0])


@pytest.mark.parametrize("transport", ["probe", "tensor"])
@pytest.mark.parametrize("who", ["every rank", "last rank"])
def test_an_epoch_left_early(comm, transport, who):
    """After step SKIP the ranks leave epoch 0 and begin epoch 1. Every rank alike (a step
    budget per epoch): training goes on. The last rank alone (a budget counted per rank): the
    ranks would train different samples and end the job apart; every rank raises
    StepSkippedError in the step that begins the epoch on some of them (at one rank: nothing)."""
    rank, world = comm.Get_rank(), comm.Get_size()
    dyn, x, y = _build(transport)
    leaves = who == "every rank" or rank == world - 1
    raised = None
    trained = 0
    try:
        for epoch in (0, 1):
            for k, idx in enumerate(dyn.batches(epoch)):
                F.cross_entropy(dyn.model(x[idx]), y[idx]).backward()
                dyn.optimizer.step()
                dyn.optimizer.zero_grad()
                trained += 1
                if (epoch == 0 and k == SKIP and leaves) or (epoch == 1 and k == 3):
                    break
    except StepSkippedError as e:
        raised = str(e)
    dyn.close()
    if who == "every rank" or world == 1:
        assert raised is None
        assert comm.allgather(trained) == [trained] * world and trained >= SKIP + 5
        return
    assert raised is not None and (f"rank(s) [{world - 1}] began an epoch at step {SKIP + 1} while rank(s) "
                                   f"{list(range(world - 1))} are in the middle of one") in raised, raised
    assert comm.allgather(trained) == [SKIP + 1] * world      # every rank stopped in that step


class Branchy(torch.nn.Module):
    """A trunk every micro-batch uses and a head only some use (Horovod's count of that head's
    backward passes is lower all the same): the check goes by the most-used parameter."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.trunk, self.head, self.aux = torch.nn.Linear(12, 16), torch.nn.Linear(16, 4), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, aux: bool) -> torch.Tensor:
        h = torch.tanh(self.trunk(x))
        return self.head(h) + (self.aux(h) if aux else 0.0)


@pytest.mark.parametrize("accumulation", [1, 2, 3])
def test_a_micro_batch_left_without_backward_is_stopped_at_the_step(comm, accumulation):
    """Rank ``world - 1`` takes micro-batch 0 of step SKIP and runs no backward for it, then
    steps after the last: Horovod would submit the gradient all the same (its ``synchronize``
    sends what backward did not) and the skipped samples would count as trained without being
    in it; the run ended normally before session 75. Now ``optimizer.step()`` raises
    StepSkippedError there, before anything leaves the rank, and the rank can mend the step
    (backward on the skipped micro-batch, then step): every rank ends with the same model and
    every sample once. A head that some micro-batches leave unused raises nothing. One rank:
    nothing is raised (nothing can go out of step), as for the other skips."""
    rank, world = comm.Get_rank(), comm.Get_size()
    x, y = make_data(n=800)
    cfg = DynamixConfig(base_batch=8, controller="proportional", collector=False, tensorboard=False, seed=1,
                        interval_steps=4, min_decision_s=0, accumulation=accumulation)
    model = Branchy()
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg)
    opt, skipper = dyn.optimizer, world - 1
    raised, seen, left = [], [], None
    for n, idx in enumerate(dyn.batches(0)):
        step, j = divmod(n, accumulation)
        seen.extend(torch.as_tensor(idx).tolist())
        if rank == skipper and step == SKIP and j == 0:
            left = idx                              # no backward for it
        else:
            F.cross_entropy(model(x[idx], aux=j == 0 and step % 2 == 0), y[idx]).backward()
        if j < accumulation - 1:
            continue
        try:
            opt.step()
        except StepSkippedError as e:
            raised.append((step, str(e)))
            F.cross_entropy(model(x[left], aux=False), y[left]).backward()    # the step mended
            opt.step()
        opt.zero_grad()
    steps = dyn.step_count
    dyn.close()
    if world == 1:
        assert raised == []
    elif rank == skipper:
        assert [s for s, _ in raised] == [SKIP], raised
        assert (f"rank {skipper} of {world} ran loss.backward() for {accumulation - 1} of the {accumulation} "
                f"micro-batch(es) of step {SKIP} (accumulation={accumulation})") in raised[0][1]
    else:
        assert raised == []
    assert comm.allgather(steps) == [steps] * world
    every = [i for part in comm.allgather(seen) for i in part]
    assert sorted(every) == list(range(800))
    sums = comm.allgather(float(_flat(model).sum()))
    assert sums == [sums[0]] * world
