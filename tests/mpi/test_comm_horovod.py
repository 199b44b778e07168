"""Horovod's own MPI_Allreduce calls, made from its background thread, are caught by the
preloaded recorder: N hvd.allreduce calls -> exactly N data allreduces of the tensor's bytes,
and Horovod's coordination traffic lands in the control class. Skipped only when Horovod
(or the preload, see test_comm_recorder.py) is missing."""
from __future__ import annotations

import threading

import pytest
from mpi4py import MPI

from dynamix_hvd import load_native

hvd = pytest.importorskip("horovod.torch")
torch = pytest.importorskip("torch")

n = load_native()
DATA_ALLREDUCE = (1 << n.OP_ALLREDUCE) | (1 << n.OP_IALLREDUCE)


@pytest.fixture(scope="module")
def horovod() -> object:
    hvd.init()
    return hvd


@pytest.fixture
def reader(pmpi_reader: object) -> object:
    return pmpi_reader


def test_horovod_allreduce_exact_count_and_bytes(comm: MPI.Comm, horovod: object, reader: object) -> None:
    N, m = 20, 1000
    t = torch.full((m,), float(horovod.rank() + 1))
    horovod.allreduce(t, name="dx.warmup", op=horovod.Sum)
    tot0 = reader.totals(n.OP_ALLREDUCE, n.CLASS_DATA)
    cur = reader.head()
    for i in range(N):
        out = horovod.allreduce(t, name=f"dx.grad.{i}", op=horovod.Sum)
    assert out[0].item() == horovod.size() * (horovod.size() + 1) / 2
    tot1 = reader.totals(n.OP_ALLREDUCE, n.CLASS_DATA)
    batch = reader.read(cur)
    s = batch.summarize(DATA_ALLREDUCE, n.CLASS_DATA)
    assert (s.count, s.bytes) == (N, N * m * 4)
    assert (tot1.count - tot0.count, tot1.bytes - tot0.bytes) == (N, N * m * 4)
    data = [r for r in batch.records() if r["cls"] == n.CLASS_DATA and r["op"] == n.OP_ALLREDUCE]
    # made from Horovod's background thread, not from this (the Python) thread
    assert threading.get_native_id() not in {r["tid"] for r in data}


def test_horovod_control_traffic_is_classified_control(comm: MPI.Comm, horovod: object, reader: object) -> None:
    if horovod.size() == 1:
        pytest.skip("a single Horovod rank does not coordinate")
    before = reader.totals(n.OP_ALLREDUCE, n.CLASS_CONTROL).count + reader.totals(n.OP_BCAST, n.CLASS_CONTROL).count
    for i in range(5):
        horovod.allreduce(torch.ones(10), name=f"dx.ctl.{i}")
    after = reader.totals(n.OP_ALLREDUCE, n.CLASS_CONTROL).count + reader.totals(n.OP_BCAST, n.CLASS_CONTROL).count
    assert after > before
