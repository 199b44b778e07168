"""The PMPI recorder under real mpirun (any world size): mpi4py collectives are recorded with
exact count and bytes, non-blocking ones at their completion, control vs data classified.

Needs libdynamix_pmpi.so preloaded (scripts/run_tests.sh does it). Without the preload these
tests skip, unless DYNAMIX_REQUIRE_PMPI=1, where a missing preload is a failure."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from mpi4py import MPI

from dynamix_hvd import load_native
from dynamix_hvd.metrics import Collector, CollectorConfig

n = load_native()
ALLREDUCE = 1 << n.OP_ALLREDUCE


@pytest.fixture
def reader(pmpi_reader: object) -> object:
    assert pmpi_reader.enabled
    return pmpi_reader


def test_allreduce_exact_count_and_bytes(comm: MPI.Comm, reader: object) -> None:
    N, m = 37, 1000
    a = np.full(m, comm.rank + 1.0)
    b = np.empty_like(a)
    tot0 = reader.totals(n.OP_ALLREDUCE, n.CLASS_DATA)
    cur = reader.head()
    for _ in range(N):
        comm.Allreduce(a, b, op=MPI.SUM)
    assert b[0] == comm.size * (comm.size + 1) / 2
    batch = reader.read(cur)
    s = batch.summarize(ALLREDUCE, n.CLASS_DATA)
    assert (s.count, s.bytes) == (N, N * m * 8)
    tot1 = reader.totals(n.OP_ALLREDUCE, n.CLASS_DATA)
    assert (tot1.count - tot0.count, tot1.bytes - tot0.bytes) == (N, N * m * 8)
    recs = [r for r in batch.records() if r["op"] == n.OP_ALLREDUCE and r["cls"] == n.CLASS_DATA]
    assert all(r["end_ns"] >= r["start_ns"] and r["comm_size"] == comm.size for r in recs)
    assert {r["tid"] for r in recs} == {threading.get_native_id()}
    assert s.p50_s > 0 and s.bandwidth_Bps > 0


def test_in_place_and_float32(comm: MPI.Comm, reader: object) -> None:
    buf = np.ones(513, dtype=np.float32)
    cur = reader.head()
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    s = reader.read(cur).summarize(ALLREDUCE, n.CLASS_DATA)
    assert (s.count, s.bytes) == (1, 513 * 4)
    assert buf[0] == comm.size


def test_iallreduce_recorded_at_completion(comm: MPI.Comm, reader: object) -> None:
    a = np.ones(256)
    outs = [np.empty_like(a) for _ in range(6)]
    cur = reader.head()
    comm.Iallreduce(a, outs[0]).Wait()
    reqs = [comm.Iallreduce(a, outs[i]) for i in (1, 2)]
    MPI.Request.Waitall(reqs)
    req = comm.Iallreduce(a, outs[3])
    while not req.Test():
        pass
    reqs = [comm.Iallreduce(a, outs[i]) for i in (4, 5)]
    done = 0
    while done < 2:
        MPI.Request.Waitany(reqs)
        done += 1
    batch = reader.read(cur)
    s = batch.summarize(1 << n.OP_IALLREDUCE, n.CLASS_DATA)
    assert (s.count, s.bytes) == (6, 6 * 256 * 8)
    assert all(o[0] == comm.size for o in outs)
    # a data window counts blocking and non-blocking allreduces together
    assert batch.summarize(ALLREDUCE | (1 << n.OP_IALLREDUCE), n.CLASS_DATA).count == 6


def test_bcast_allgather_allgatherv(comm: MPI.Comm, reader: object) -> None:
    size = comm.size
    cur = reader.head()
    x = np.arange(100, dtype=np.float64)
    comm.Bcast(x, root=0)
    g = np.empty(3 * size, dtype=np.float32)
    comm.Allgather(np.ones(3, dtype=np.float32), g)
    counts = [r + 1 for r in range(size)]
    v = np.empty(sum(counts), dtype=np.float64)
    comm.Allgatherv(np.ones(comm.rank + 1), [v, counts])
    batch = reader.read(cur)
    bc = batch.summarize(1 << n.OP_BCAST, n.CLASS_DATA)
    ag = batch.summarize(1 << n.OP_ALLGATHER, n.CLASS_DATA)
    agv = batch.summarize(1 << n.OP_ALLGATHERV, n.CLASS_DATA)
    assert (bc.count, bc.bytes) == (1, 800)
    assert (ag.count, ag.bytes) == (1, 3 * 4 * size)
    assert (agv.count, agv.bytes) == (1, 8 * sum(counts))


def test_control_plane_patterns_are_not_data(comm: MPI.Comm, reader: object) -> None:
    """What Horovod's coordinator sends: bit-vector allreduces, an int + bytes broadcast."""
    cur = reader.head()
    bits = np.full(4, -1, dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, bits, op=MPI.BAND)
    comm.Allreduce(MPI.IN_PLACE, bits, op=MPI.BOR)
    length = np.array([64], dtype=np.int32)
    comm.Bcast(length, root=0)
    comm.Bcast([bytearray(64), MPI.BYTE], root=0)  # MPI_BYTE payload, like the response list
    comm.Allgather(np.array([comm.rank], dtype=np.int32), np.empty(comm.size, dtype=np.int32))
    # only this thread's records: an earlier test module may have started Horovod, whose
    # background thread keeps sending its own control collectives meanwhile
    mine = [r for r in reader.read(cur).records() if r["tid"] == threading.get_native_id()]
    assert [r["cls"] for r in mine] == [n.CLASS_CONTROL] * 5
    assert sum(r["bytes"] for r in mine) == 32 + 32 + 4 + 64 + 4 * comm.size


def test_collector_window_sees_the_interval(comm: MPI.Comm, reader: object) -> None:
    c = Collector(CollectorConfig(interfaces=("lo",), gpu=False))
    a, b = np.ones(2048, dtype=np.float32), np.empty(2048, dtype=np.float32)
    for _ in range(5):
        comm.Allreduce(a, b)
    w1 = c.window()
    for _ in range(3):
        comm.Allreduce(a, b)
    w2 = c.window()
    assert w1.comm_available and (w1.allreduce.count, w1.allreduce.bytes) == (5, 5 * 8192)
    assert (w2.allreduce.count, w2.allreduce.bytes) == (3, 3 * 8192)
    assert w2.worker_stats_fields(steps=3)["allreduce_bytes"] == 8192
    assert w2.by_op["allreduce"]["data"].count == 3


def test_recording_can_be_switched_off(comm: MPI.Comm, reader: object) -> None:
    a, b = np.ones(8), np.empty(8)
    reader.set_enabled(False)
    try:
        cur = reader.head()
        comm.Allreduce(a, b)
        # (a collective already inside the wrapper on another thread may still land)
        mine = [r for r in reader.read(cur).records() if r["tid"] == threading.get_native_id()]
        assert mine == []
    finally:
        reader.set_enabled(True)
    comm.Allreduce(a, b)
    assert reader.read(cur).summarize(ALLREDUCE, n.CLASS_DATA).count == 1
