"""Every transport the Horovod engine can run on (mpi4py's ``Comm``; ``HorovodComm`` for Gloo
jobs) gives the same rows and the same plan from its started-now-waited-later forms as from its
blocking ones, with other traffic between the start and the wait, as a decision in flight has
(a training step's allreduce). Run under mpirun -np 1 and -np 4."""
from __future__ import annotations

import signal
import time

import numpy as np
import pytest

from dynamix_hvd.comm import Comm, HorovodComm
from dynamix_hvd.plan import Plan

hvd = pytest.importorskip("horovod.torch")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", params=["mpi4py", "horovod"])
def transport(request: pytest.FixtureRequest) -> object:
    hvd.init()
    t = Comm() if request.param == "mpi4py" else HorovodComm()
    yield t
    if isinstance(t, Comm):
        t.free()


def _row(rank: int, k: int) -> np.ndarray:
    return np.arange(12, dtype=np.float64) + 100.0 * rank + 1000.0 * k


def test_the_travelling_gather_gives_what_the_blocking_one_gives(transport: object) -> None:
    for k in range(3):
        rank, size = transport.rank, transport.size
        blocking = transport.gather_rows(_row(rank, k))
        pending = transport.gather_rows_async(_row(rank, k))
        hvd.allreduce(torch.ones(1000), name=f"dx.forms.step.{k}")   # a step's traffic while it travels
        time.sleep(0.002 * rank)
        got = pending.wait()
        if rank == 0:
            want = np.stack([_row(r, k) for r in range(size)])
            assert np.array_equal(blocking, want)
            assert np.array_equal(got, want)
        else:
            assert blocking is None and got is None
        with pytest.raises(RuntimeError, match="twice"):
            pending.wait()


def test_the_travelling_broadcast_gives_rank_0s_plan_to_every_rank(transport: object) -> None:
    rank, size = transport.rank, transport.size
    for k in range(3):
        plan = Plan(7 + k, tuple(16 + r + k for r in range(size)), 40 + k) if rank == 0 else None
        pending = transport.bcast_plan_async(plan, next_due=50 + k)
        hvd.allreduce(torch.ones(1000), name=f"dx.forms.bstep.{k}")
        got, due = pending.wait()
        assert got == Plan(7 + k, tuple(16 + r + k for r in range(size)), 40 + k)
        assert due == 50 + k
        assert transport.bcast_plan(plan, next_due=60 + k) == (got, 60 + k)


def test_the_rows_and_a_plan_in_flight_together_arrive_in_order(transport: object) -> None:
    """decision_lag >= 3 with decisions close together: one decision's plan and the next one's
    rows may travel at once."""
    rank, size = transport.rank, transport.size
    plan = Plan(3, (8,) * size, 10) if rank == 0 else None
    p_plan = transport.bcast_plan_async(plan, next_due=12)
    p_rows = transport.gather_rows_async(_row(rank, 9))
    hvd.allreduce(torch.ones(10), name="dx.forms.both")
    assert p_plan.wait() == (Plan(3, (8,) * size, 10), 12)
    rows = p_rows.wait()
    if rank == 0:
        assert np.array_equal(rows, np.stack([_row(r, 9) for r in range(size)]))


def test_a_rank_waiting_for_rank_0_leaves_the_core_and_hears_signals() -> None:
    """mpi4py's forms wait by MPI_Test and growing sleeps (``comm.wait_yielding``), not in MPI_Wait:
    while rank 0 is 0.2 s late to the broadcast (its controller deciding), a Python signal handler
    on a waiting rank runs when its signal comes (MPI_Wait held it off until the wait ended:
    cb5db28 failed this), the waiting thread uses a small part of that time on the CPU (a fixed
    20 us poll used 15%), and the plan still arrives."""
    hvd.init()
    t = Comm()
    heard: list[float] = []
    old = signal.signal(signal.SIGALRM, lambda *_: heard.append(time.perf_counter()))
    try:
        t.barrier()
        plan = Plan(5, (9,) * t.size, 11) if t.rank == 0 else None
        w0, c0 = time.perf_counter(), time.thread_time()
        if t.rank == 0:
            time.sleep(0.2)
        else:
            signal.setitimer(signal.ITIMER_REAL, 0.05)
        got = t.bcast_plan(plan, next_due=21)
        wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
        assert got == (Plan(5, (9,) * t.size, 11), 21)
        if t.rank != 0:
            assert wall > 0.15
            assert heard and heard[0] - w0 < 0.12, f"rank {t.rank}: the handler ran {heard[0] - w0 if heard else None} s in"
            assert cpu < 0.1 * wall, f"rank {t.rank} spent {cpu:.3f} s of CPU in a {wall:.3f} s wait"
        if t.rank == t.size - 1:
            time.sleep(0.05)                   # the last rank late to the gather
        rows = t.gather_rows(_row(t.rank, 0))
        if t.rank == 0:
            assert np.array_equal(rows, np.stack([_row(r, 0) for r in range(t.size)]))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        t.free()
