"""BatchNorm running statistics of the global batch (bnstats.py), under a real launcher: ranks with
uneven local batches end with the statistics one BatchNorm would have computed over the union of
their samples, on every rank, through the hook's own communicator and through Horovod's."""
from __future__ import annotations

import horovod.torch as hvd
import pytest
import torch

from dynamix_hvd.bnstats import sync_batchnorm_stats
from dynamix_hvd.comm import HorovodComm, make_comm
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.horovod import Dynamix

hvd.init()
SIZES = [20, 45, 70, 33]          # rank r's local batch (uneven)


def _bn_model(seed: int = 3) -> torch.nn.Module:
    torch.manual_seed(seed)
    # momentum 1: the running statistics are exactly the last batch's
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5, momentum=1.0), torch.nn.Linear(5, 3))


def _global_batch(world: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    # different distributions per rank, so the between-rank part of the variance matters
    return [torch.randn(SIZES[r], 6, generator=g) * (1 + r) + 3 * r for r in range(world)]


@pytest.mark.parametrize("comm_kind", ["mpi", "horovod"])
def test_uneven_ranks_end_with_the_global_batch_statistics(comm, comm_kind):
    world, rank = comm.Get_size(), comm.Get_rank()
    parts = _global_batch(world)
    model = _bn_model()
    model.train()
    model(parts[rank])                                    # this rank's local statistics
    c = make_comm() if comm_kind == "mpi" else HorovodComm()
    assert sync_batchnorm_stats(model, c, weight=SIZES[rank]) == 1
    bn = model[1]
    # the reference: one BatchNorm over the union of every rank's samples, in one process
    ref = _bn_model()
    ref.train()
    ref(torch.cat(parts))
    torch.testing.assert_close(bn.running_mean, ref[1].running_mean, rtol=1e-5, atol=1e-6)
    # running_var holds unbiased variances (n/(n-1)): the combination matches the union's
    # within 1/min(n) relative
    torch.testing.assert_close(bn.running_var, ref[1].running_var, rtol=1.5 / min(SIZES[:world]), atol=1e-6)
    if world > 1:    # every rank holds the same statistics afterwards
        means = comm.allgather(bn.running_mean.numpy().copy())
        assert all((m == means[0]).all() for m in means)


def test_the_hook_weights_by_the_ranks_local_batch(comm):
    world, rank = comm.Get_size(), comm.Get_rank()
    model = _bn_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dyn = Dynamix(model, opt, dataset_size=400, config=DynamixConfig(base_batch=8, min_decision_s=0))
    try:
        model.train()
        model(_global_batch(world)[rank])
        before = model[1].running_mean.clone()
        assert dyn.sync_batchnorm_stats() == 1
        # the uniform plan weighs every rank alike: the plain average of the ranks' means
        means = torch.stack([torch.as_tensor(m) for m in comm.allgather(before.numpy().copy())])
        torch.testing.assert_close(model[1].running_mean, means.mean(0).to(before.dtype), rtol=1e-5, atol=1e-6)
    finally:
        dyn.close()
