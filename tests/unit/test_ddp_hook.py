"""The DDP comm hook on a one-rank gloo group (real DDP, no launcher): the reduced bucket is the
weighted local gradient, the flags come back from bucket 0, every bucket is timed; BucketTimes'
statistics. The multi-rank behaviour is tested under torchrun (tests/launch/test_ddp.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dynamix_hvd.ddp_hook import BucketTimes, SumHook
from dynamix_hvd.wire import Flagged


def make_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 600), torch.nn.Tanh(), torch.nn.Linear(600, 600), torch.nn.Tanh(),
                               torch.nn.Linear(600, 3))


@pytest.fixture()
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_bucket_times_median_and_bytes_per_step():
    t = BucketTimes(capacity=4)
    assert np.isnan(t.p50_s()) and np.isnan(t.bytes_per_step())
    t.steps = 2
    for s in (0.1, 0.3, 0.2):
        t.add(100, s)
    assert t.p50_s() == pytest.approx(0.2)
    assert t.bytes_per_step() == pytest.approx(150.0)
    for s in (9.0, 9.0, 9.0):          # the ring keeps the last `capacity` durations
        t.add(1, s)
    assert t.p50_s() == pytest.approx(9.0)
    t.reset()
    assert t.n == 0 and np.isnan(t.p50_s())


@pytest.mark.parametrize("weight,average", [(1.0, False), (0.25, False), (0.25, True)])
def test_hook_weights_sums_times_and_carries_flags(one_rank_group, weight, average):
    """average: a uniform step, reduced with AVG and no weight pass (the weight is not applied)."""
    torch.manual_seed(0)
    net = make_net()
    ref = [p.detach().clone() for p in net.parameters()]
    model = DDP(net, bucket_cap_mb=1)       # 1.5 MB of gradients: two buckets, bucket 0 carries the flags
    norms: list[torch.Tensor] = []
    hook = SumHook(0, 1, None, scale=lambda: weight, on_local=lambda t: norms.append(t.detach().norm()), flags=lambda: (17, 1))
    hook.register(model)
    assert hook.can_average                  # gloo has AVG
    ref_net = make_net()
    with torch.no_grad():
        for p, r in zip(ref_net.parameters(), ref):
            p.copy_(r)
    for step in range(2):          # DDP rebuilds its buckets after the first iteration
        x = torch.randn(8, 6)
        hook.new_step(average)
        norms.clear()
        model.zero_grad()
        ref_net.zero_grad()
        model(x).square().sum().backward()
        ref_net(x).square().sum().backward()
        w = 1.0 if average else weight      # (AVG over one rank: the local gradient)
        for p, r in zip(net.parameters(), ref_net.parameters()):
            torch.testing.assert_close(p.grad, w * r.grad, rtol=1e-6, atol=1e-7)
    assert hook.buckets >= 2, hook.buckets     # bucket 0 (with the flags) and buckets without
    assert hook.times.steps == 2 and hook.times.p50_s() > 0
    assert hook.times.bytes >= 2 * 4 * sum(p.numel() for p in net.parameters())
    oom, flagged = hook.read_flags()
    assert oom.tolist() == [17] and flagged == Flagged(react=[0])
    total = torch.stack(norms).square().sum().sqrt()       # the weighted local gradient's norm
    expect = torch.cat([w * r.grad.flatten() for r in ref_net.parameters()]).norm()
    torch.testing.assert_close(total, expect, rtol=1e-5, atol=1e-7)
    assert hook.t_last > 0


def test_the_output_tensors_the_backward_check_watches():
    """ddp.Dynamix (accumulation > 1) hooks every tensor of the model's output to see each
    micro-batch's backward: a tensor, tuples / lists / dicts of them at any depth (a dict
    subclass, as Hugging Face's ModelOutput, too); anything else gives none, and such an output
    counts as backed (no false alarm)."""
    from collections import OrderedDict, namedtuple

    from dynamix_hvd.ddp import _tensors

    a, b, c = torch.zeros(1), torch.ones(2), torch.full((3,), 2.0)
    Out = namedtuple("Out", "logits aux")
    ids = lambda ts: [id(t) for t in ts]      # noqa: E731
    assert ids(_tensors(a)) == [id(a)]
    assert ids(_tensors((a, [b, {"c": c, "n": 3}]))) == [id(a), id(b), id(c)]
    assert ids(_tensors(OrderedDict(loss=a, logits=b))) == [id(a), id(b)]
    assert ids(_tensors(Out(a, None))) == [id(a)]
    assert _tensors(object()) == [] and _tensors(None) == [] and _tensors("text") == []
