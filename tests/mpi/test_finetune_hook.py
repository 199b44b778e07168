"""Online PPO fine-tuning through the hook (config finetune=True): rank 0's controller fine-tunes
during training, the decision log carries its counters and reward, and a checkpoint resumes with
the fine-tuned weights."""
from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from _models import make_data, make_model
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.runlog import read_decisions

hvd.init()


def _epoch(dyn, model, x, y, epoch):
    for idx in dyn.batches(epoch):
        dyn.optimizer.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        dyn.backward(loss)
        dyn.optimizer.step()
        dyn.step(loss.detach())


def test_finetune_through_hook_and_checkpoint(comm):
    rank = comm.Get_rank()
    run_dir = comm.bcast(tempfile.mkdtemp(prefix="dynamix_ft_") if rank == 0 else None, root=0)
    x, y = make_data(n=1200)
    model = make_model()
    cfg = DynamixConfig(base_batch=16, interval_steps=2, min_decision_s=0, max_batch=64, controller="ppo", finetune=True,
                        finetune_steps=3, collector=False, tensorboard=False, run_dir=run_dir,
                        guard_patience=10**6,
                        # this toy job's states are outside the shipped policy's training support, where
                        # the guard takes goodput's plan and records nothing (tests/unit/test_finetune.py)
                        controller_kwargs={"support": False})
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for epoch in range(2):
            _epoch(dyn, model, x, y, epoch)
    ckpt_path = Path(run_dir) / "ck.pt"
    if dyn._inflight is not None:   # noqa: SLF001 - (decision_lag; every rank) the decision in flight completed,
        dyn._finish_decision(dyn.step_count - 1)   # noqa: SLF001 - so its controller call (which may start an update) is done
    if rank == 0:
        ctl = dyn.controller
        assert ctl is not None and ctl.name == "ppo" and ctl.finetuner is not None
        assert ctl.finetuner.wait(60)
        assert ctl.finetuner.n_updates >= 1, ctl.finetune_info()
        dyn.log.flush()           # the log is written by a background thread
        decisions = [r for r in read_decisions(run_dir) if r.finetune is not None]   # schema-checked
        assert decisions and decisions[-1].finetune["n_transitions"] >= 3
        assert any(r.reward is not None for r in decisions)
    dyn.save(ckpt_path)
    weights = dyn.controller.finetuner.acting.state_dict() if rank == 0 else None

    model2 = make_model(seed=5)
    dyn2 = Dynamix(model2, torch.optim.SGD(model2.parameters(), lr=0.05), dataset_size=len(x), config=cfg)
    dyn2.load(ckpt_path)
    if rank == 0:
        ft2 = dyn2.controller.finetuner
        assert ft2.n_updates == dyn.controller.finetuner.n_updates
        got = ft2.acting.state_dict()
        assert all(torch.equal(got[k], weights[k]) for k in weights)
    dyn.close()
    dyn2.close()
