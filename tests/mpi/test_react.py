"""Early decisions: when the last rank's compute time jumps mid-interval, every rank takes a
decision together a few steps later (the flag rides beside the gradient allreduce), the decision
record names the flagging ranks, and no sample is skipped or seen twice."""
from __future__ import annotations

import time

import horovod.torch as hvd
import pytest
import torch
import torch.nn.functional as F

from _models import make_data, make_model
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.runlog import read_decisions

hvd.init()

SLOW_FROM = 25     # the step at which the last rank slows down
K = 40             # regular decisions at steps 40, 80, ...; the runs stop after step K + 2


class SlowsDown:
    """Emulated device: compute padded to 20 ms per step (far above the scheduling noise of 4 ranks
    on 2 cores); the last rank's to 100 ms from SLOW_FROM."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world, self.steps = rank, world, 0

    def before_backward(self, batch_size: int, elapsed_s: float) -> None:
        slow = self.rank == self.world - 1 and self.steps >= SLOW_FROM
        self.steps += 1
        time.sleep(max((0.100 if slow else 0.020) - elapsed_s, 0.0))


def _run(comm, tmp_path_factory, react: bool, lag: int = 0):
    rank, world = comm.Get_rank(), comm.Get_size()
    run_dir = comm.bcast(str(tmp_path_factory.mktemp("react")) if rank == 0 else None, root=0)
    x, y = make_data(n=16 * world * 100)
    model = make_model()
    cfg = DynamixConfig(base_batch=16, interval_steps=K, first_decision_steps=K, max_batch=64, controller="proportional",
                        collector=False,
                        run_dir=run_dir, tensorboard=False, react=react, decision_lag=lag)
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg)
    emu = SlowsDown(rank, world)
    optimizer = dyn.optimizer
    seen: list[int] = []
    for idx in dyn.batches(0):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        emu.before_backward(len(idx), time.perf_counter() - t0)
        loss.backward()
        optimizer.step()
        seen.extend(idx.tolist())
        if dyn.step_count >= K + 2:
            break
    plan = dyn.plan
    dyn.close()
    everything = comm.gather(seen, root=0)
    records = []
    if rank == 0:
        flat = [i for r in everything for i in r]
        assert len(flat) == len(set(flat)), "a sample was seen twice"
        records = [r.to_dict() for r in read_decisions(run_dir)]       # schema-checked
    return comm.bcast(records, root=0), plan


@pytest.mark.parametrize("lag", [0, 2])
def test_a_slowdown_brings_the_decision_forward(comm, tmp_path_factory, lag):
    """(lag: ``decision_lag``, which an early decision does not wait for)"""
    world = comm.Get_size()
    records, plan = _run(comm, tmp_path_factory, react=True, lag=lag)
    early = [r for r in records if "early" in r]
    # one decision for one change: a rank that confirms it a step later does not ask again
    assert len(early) == 1, [(r["step"], r["early"]) for r in early]
    first = early[0]
    # flagged within a few steps of the change (3 to confirm, 1 to tell everyone), long before step K
    assert SLOW_FROM < first["step"] <= SLOW_FROM + 6, first["step"]
    assert world - 1 in first["early"]["ranks"]
    slow = first["workers"][world - 1]
    assert slow["changed"] == 1
    # the reported compute time is the new speed's, not a mix with the steps before the change
    assert slow["compute_s"] > 0.090, slow["compute_s"]
    # so is the throughput the goodput guard takes as its reference: steps of >= 100 ms (a mix
    # with the 20 ms steps before the change would be about 3x higher)
    assert first["glob"]["samples_per_s"] < 16 * world / 0.08, first["glob"]["samples_per_s"]
    if world > 1:
        # proportional re-splits at the early decision: the slow rank gets the smallest batch
        assert first["next_plan"]["batch_sizes"][world - 1] == min(first["next_plan"]["batch_sizes"])
        assert first["next_plan"]["start_step"] == first["step"]       # from the next step, whatever the lag
        assert plan.batch_sizes[world - 1] < 16
    # the regular decision at step K, less than half an interval after the early one, was skipped
    assert K - first["step"] < K // 2
    assert not [r for r in records if "early" not in r], [r["step"] for r in records]


def test_without_react_decisions_keep_the_interval(comm, tmp_path_factory):
    records, _ = _run(comm, tmp_path_factory, react=False)
    assert [r["step"] for r in records] == [K]
    assert not any("early" in r for r in records)
