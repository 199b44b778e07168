"""Ranks built with different settings (one node's DYNAMIX_* environment, config file or data set
differs) are refused on every rank when Dynamix is built, naming the rank and the field, instead
of waiting in different collectives for ever or training samples twice (real Horovod; at 1 rank
there is nothing to disagree with)."""
from __future__ import annotations

import horovod.torch as hvd
import pytest
import torch

from _models import make_data, make_model
from dynamix_hvd.config import ConfigError, DynamixConfig
from dynamix_hvd.horovod import Dynamix

hvd.init()


def _build(seed: int, decision_lag: int, dataset_size: int) -> Dynamix:
    model = make_model()
    cfg = DynamixConfig(base_batch=8, controller="goodput", collector=False, tensorboard=False, seed=seed,
                        decision_lag=decision_lag)
    return Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=dataset_size, config=cfg)


@pytest.mark.parametrize("field", ["seed", "decision_lag", "dataset_size"])
def test_one_rank_with_other_settings_is_refused_on_every_rank(comm, field):
    rank, world = comm.Get_rank(), comm.Get_size()
    odd = rank == world - 1 and world > 1
    args = {"seed": 0, "decision_lag": 2, "dataset_size": len(make_data(n=800)[0])}
    if odd:
        args[field] = {"seed": 5, "decision_lag": 0, "dataset_size": 799}[field]
    if world == 1:
        _build(**args).close()
        return
    with pytest.raises(ConfigError) as err:
        _build(**args)
    msg = str(err.value)
    assert f"(compared with rank 0's): rank {world - 1}'s {field}. Every" in msg, msg
    assert f"(rank {rank}, this one, has {field}={args[field]!r})" in msg, msg
    comm.Barrier()
    dyn = _build(seed=0, decision_lag=2, dataset_size=800)      # the same settings everywhere: built
    assert dyn.world == world
    dyn.close()


def test_a_rank_running_another_version_is_refused_on_every_rank(comm, monkeypatch):
    """The last rank checks one setting fewer, as a dynamix_hvd version without ``seed`` would:
    its fingerprint has another length, so the versions are compared first (a fixed-length
    allgather) and every rank names them instead of gathering rows of different lengths."""
    import dynamix_hvd.config as config

    rank, world = comm.Get_rank(), comm.Get_size()
    if rank == world - 1 and world > 1:
        monkeypatch.setattr(config, "RANK0_ONLY", config.RANK0_ONLY | {"seed"})
    if world == 1:
        _build(seed=0, decision_lag=2, dataset_size=800).close()
        return
    with pytest.raises(ConfigError) as err:
        _build(seed=0, decision_lag=2, dataset_size=800)
    msg = str(err.value)
    n = len(config.agreement_fields()) + (1 if rank == world - 1 else 0)
    assert f"rank(s) {world - 1} check another set of settings than rank 0 ({n} settings; rank {rank}" in msg, msg
    assert "install the same version on every node" in msg, msg
    comm.Barrier()
