"""A stop signal (SIGTERM, SIGUSR1: a scheduler's or launcher's warning before a kill) on one rank
stops every rank after the same step, with a checkpoint (``stop_on_signal``); the job resumes
from it and trains every remaining sample of the epoch exactly once. Real Horovod and real
signals (``os.kill`` of this process), over both flag transports (the probe gradient element and
the flag tensor of a custom compression); at 1 rank the flag never leaves the process."""
from __future__ import annotations

import os
import signal

import horovod.torch as hvd
import pytest
import torch
import torch.nn.functional as F

from _models import make_data, make_model
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.errors import STOP_EXIT_CODE, StopTraining
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.runlog import EventRecord, read_events

hvd.init()


class CustomNone(hvd.Compression.none):
    """A user's own compression: the flags travel in their own tensor."""


def _build(run_dir: str | None, comp: type, controller: str = "proportional") -> tuple[Dynamix, torch.Tensor, torch.Tensor]:
    x, y = make_data(n=800)
    model = make_model()
    cfg = DynamixConfig(base_batch=8, controller=controller, collector=False, tensorboard=False, seed=1,
                        interval_steps=4, min_decision_s=0, run_dir=run_dir)
    return Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg,
                   compression=comp), x, y


def _train(dyn: Dynamix, x: torch.Tensor, y: torch.Tensor, seen: list[int], kill_at: int | None = None,
           sig: int = 0, killer: int = 0) -> None:
    for k, idx in enumerate(dyn.batches(0)):
        if k == kill_at and dyn.rank == killer:
            os.kill(os.getpid(), sig)          # before this step's forward: its flags carry it
        seen.extend(torch.as_tensor(idx).tolist())
        loss = F.cross_entropy(dyn.model(x[idx]), y[idx])
        loss.backward()
        dyn.optimizer.step()
        dyn.optimizer.zero_grad()


@pytest.mark.parametrize("sig, transport", [(signal.SIGUSR1, "probe"), (signal.SIGTERM, "tensor")])
def test_a_stop_signal_on_one_rank_stops_every_rank_after_the_same_step(comm, tmp_path_factory, sig, transport):
    rank, world = comm.Get_rank(), comm.Get_size()
    run_dir = comm.bcast(str(tmp_path_factory.mktemp("stop")) if rank == 0 else None, root=0)
    comp = hvd.Compression.none if transport == "probe" else CustomNone
    dyn, x, y = _build(run_dir if rank == 0 else None, comp)      # run_dir on rank 0 alone
    if world > 1:
        assert (dyn._weighting.probe is not None) == (transport == "probe")
    assert signal.getsignal(sig) != signal.SIG_DFL
    seen: list[int] = []
    with pytest.raises(StopTraining) as stop:
        _train(dyn, x, y, seen, kill_at=6, sig=sig, killer=world - 1)
    assert stop.value.code == STOP_EXIT_CODE == 75
    assert stop.value.step == 7 and stop.value.ranks == [world - 1]        # the step it was raised in
    assert comm.allgather(stop.value.step) == [7] * world
    path = os.path.join(run_dir, "checkpoint.pt")
    assert stop.value.checkpoint == path and os.path.exists(path)
    dyn.close()
    assert signal.getsignal(sig) == signal.SIG_DFL                      # close() restores the default
    if rank == 0:
        stops = [e for e in read_events(run_dir) if isinstance(e, EventRecord) and e.kind == "stop"]
        assert [(e.step, e.detail) for e in stops] == [(7, {"ranks": [world - 1], "checkpoint": path})]

    # the job runs again and resumes: every sample of the epoch exactly once over both runs
    again, x, y = _build(run_dir if rank == 0 else None, comp)
    again.load(path)
    rest: list[int] = []
    _train(again, x, y, rest)
    again.close()
    every = [i for part in comm.allgather(seen + rest) for i in part]
    assert sorted(every) == list(range(800))
    comm.Barrier()


def test_off_leaves_the_signals_alone_and_a_handler_of_ones_own_is_kept(comm):
    previous = signal.signal(signal.SIGUSR1, lambda s, f: None)
    try:
        mine = signal.getsignal(signal.SIGUSR1)
        dyn, _, _ = _build(None, hvd.Compression.none)
        assert signal.getsignal(signal.SIGUSR1) is mine and signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
        dyn.close()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR1, previous)
    x, y = make_data(n=800)
    model = make_model()
    off = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x),
                  config=DynamixConfig(base_batch=8, collector=False, tensorboard=False, stop_on_signal=False))
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    off.close()
    comm.Barrier()


def test_without_run_dir_every_rank_still_stops_after_the_same_step(comm, capfd):
    rank, world = comm.Get_rank(), comm.Get_size()
    dyn, x, y = _build(None, hvd.Compression.none)
    with pytest.raises(StopTraining) as stop:
        _train(dyn, x, y, [], kill_at=2, sig=signal.SIGUSR1, killer=0)
    assert stop.value.checkpoint is None and comm.allgather(stop.value.step) == [3] * world
    if rank == 0:
        assert "stops after step 3: this rank got SIGUSR1; no checkpoint written (no run_dir)" in capfd.readouterr().err
    dyn.close()
    comm.Barrier()
