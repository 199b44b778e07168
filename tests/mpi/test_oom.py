"""Out of memory on one rank: the step is skipped everywhere, that rank's cap is lowered, the
same samples are redone, and the epoch still covers every index exactly once."""
from __future__ import annotations

import warnings

import horovod.torch as hvd
import pytest
import torch
import torch.nn.functional as F

from _models import make_data, make_model
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.errors import OutOfMemoryError
from dynamix_hvd.horovod import Dynamix

hvd.init()


class TightMemory:
    """Emulated device: the last rank fits at most `limit` samples per micro-batch."""

    def __init__(self, rank: int, world: int, limit: int) -> None:
        self.limit = limit if rank == world - 1 else 10**9
        self.rank = rank
        self.ooms = 0

    def before_backward(self, batch_size: int, elapsed_s: float) -> None:
        if batch_size > self.limit:
            self.ooms += 1
            raise OutOfMemoryError(self.rank, batch_size, self.limit)


@pytest.mark.parametrize("api", ["loss.backward", "dyn.backward"])
def test_oom_lowers_cap_and_redoes_step(comm, api):
    rank, world = comm.Get_rank(), comm.Get_size()
    x, y = make_data(n=700)
    model = make_model()
    emu = TightMemory(rank, world, limit=11)
    cfg = DynamixConfig(base_batch=16, interval_steps=5, min_decision_s=0, max_batch=64, controller="static", collector=False)
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg,
                  emulator=emu if api == "dyn.backward" else None)
    seen: list[int] = []
    redo_plans = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        for idx in dyn.batches(0):
            dyn.optimizer.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            if api == "dyn.backward":            # deprecated: catches the error itself
                dyn.backward(loss)
            else:                                # the user's loop catches it and reports it
                try:
                    emu.before_backward(len(idx), 0.0)
                    loss.backward()
                except OutOfMemoryError:
                    dyn.report(oom=True)
            dyn.optimizer.step()
            if not dyn._redo:
                seen.extend(idx.tolist())
            else:
                redo_plans.append(dyn.sampler.plans.latest)
            if api == "dyn.backward":
                dyn.step(0.0)
    everything = comm.gather(seen, root=0)
    ooms = comm.allgather(emu.ooms)
    if rank == 0:
        assert sorted(i for r in everything for i in r) == list(range(len(x)))
    assert sum(ooms) >= 1
    assert dyn.bounds.max_batch[world - 1] <= 11
    assert dyn.plan.batch_sizes[world - 1] <= 11
    # each replan keeps the global batch where the caps allow (the other ranks take the rest)
    for plan in redo_plans:
        expected = 16 * world if world > 1 else plan.batch_sizes[0]   # alone, rank 0 is bound by its cap
        assert plan.global_batch == expected, plan
    dyn.close()


@pytest.mark.parametrize("average", [False, True])
def test_step_flags_read_exactly_with_the_gradients_op(comm, average):
    """The flags are reduced with the step's gradient op (Average on a uniform step, so Horovod
    fuses them into the gradients' allreduce); every rank reads every rank's exact values."""
    from dynamix_hvd.apply import StepFlags
    from dynamix_hvd.wire import REACT_BIT, SKIP_BIT, STOP_BIT, Flagged

    rank, world = comm.Get_rank(), comm.Get_size()
    flags = StepFlags(hvd, rank, world)
    word = (REACT_BIT if rank == 0 else 0) | (STOP_BIT | SKIP_BIT if rank == world - 1 else 0)
    flags.submit(oom_batch=37 + rank if rank == world - 1 else 0, word=word, average=average)
    oom, flagged = flags.wait()
    assert oom is not None and oom.tolist() == [0] * (world - 1) + [37 + world - 1]
    assert flagged == Flagged(react=[0], stop=[world - 1], skipped=[world - 1])
    flags.submit(oom_batch=0, word=0, average=average)
    assert flags.wait() == (None, Flagged())
