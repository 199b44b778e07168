"""The collective layer: gather per-rank stats to rank 0 and broadcast the plan. Thin on purpose.
Three transports with one interface: ``Comm`` (mpi4py), ``HorovodComm`` (Horovod's ops, Gloo
jobs) and ``TorchComm`` (torch.distributed, torchrun + DDP jobs).

The gather and the plan's broadcast each come in two forms: blocking (``gather_rows``,
``bcast_plan``) and started now, waited for later (``gather_rows_async``, ``bcast_plan_async``:
a ``Pending`` whose ``wait()`` gives the same result), so a decision's messages can travel while
the ranks train a step (``decision_lag`` >= 2, core.py): MPI_Igather / MPI_Ibcast (a row and a
plan are a few hundred bytes, sent eagerly at the start: after a step without MPI calls the wait
takes microseconds, docs/results/s62/igather_progress.txt), Horovod's background thread, gloo's
threads. Every rank starts and waits for the same operations in the same order.

Uses mpi4py on a duplicate of the communicator Horovod runs on (MPI_COMM_WORLD unless the
user passed another), so dynamix messages never match Horovod's own. Fixed-size numpy
buffers (Gather/Bcast, no pickling) keep one decision in the tens of microseconds.

mpi4py's blocking forms are its nonblocking ones waited for by ``wait_yielding``: MPI_Test
in a loop, spinning for ``SPIN_S`` and then sleeping between tests (longer as the wait grows),
so that a rank waiting for rank 0's controller (or for a rank still in its step) leaves the
core to them instead of spinning in MPI_Wait. Where ranks share cores (2 and 4 ranks on 2 here, each
with Horovod's background thread) a waiting decision takes less (docs/results/s68/).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from dynamix_hvd.plan import Plan
from dynamix_hvd.wire import decode_plan, encode_plan, plan_buffer


SPIN_S = 2e-4          # spin on MPI_Test this long first: a message on an idle link arrives within it
POLL_S = 2e-5          # then sleep between tests: this long at first,
POLL_FRACTION = 0.05   # growing to this fraction of the time already waited (the wait ends at
POLL_MAX_S = 1e-3      # most that much late), and never longer than this


def wait_yielding(req: Any) -> None:
    """Complete an MPI request (``Test()`` -> bool) without holding the core: MPI_Test in a loop,
    sleeping between tests once ``SPIN_S`` has passed (``POLL_S`` growing to ``POLL_FRACTION`` of
    the wait so far, at most ``POLL_MAX_S``), so a long wait costs the core little and ends at
    most 5% late. Python signal handlers run between tests, which MPI_Wait would hold off."""
    if req.Test():
        return
    start = time.perf_counter()
    while not req.Test():
        waited = time.perf_counter() - start
        if waited > SPIN_S:
            time.sleep(min(POLL_MAX_S, max(POLL_S, POLL_FRACTION * waited)))


class Pending:
    """A collective started on every rank; ``wait()`` (once) returns its result."""

    def __init__(self, finish: Callable[[], Any]) -> None:
        self._finish: Callable[[], Any] | None = finish

    def wait(self) -> Any:
        finish, self._finish = self._finish, None
        if finish is None:
            raise RuntimeError("dynamix: Pending.wait() called twice")
        return finish()


def _plan_out(size: int, rank: int, plan: Plan | None, next_due: int) -> np.ndarray:
    """The zeroed plan buffer of a world of ``size``, filled on rank 0 (which must pass a plan
    for this world) with ``plan`` and ``next_due``; every transport broadcasts it from rank 0."""
    buf = plan_buffer(size)
    buf[:] = 0
    if rank == 0:
        assert plan is not None and plan.world_size == size
        encode_plan(plan, buf, next_due)
    return buf


class Comm:
    """Collectives dynamix needs, over a private duplicate of ``base`` (an mpi4py Comm)."""

    def __init__(self, base: Any = None) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = (base if base is not None else MPI.COMM_WORLD).Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def gather_rows(self, row: np.ndarray) -> np.ndarray | None:
        """Gather one float64 row per rank; (size, len(row)) on rank 0, None elsewhere."""
        return self.gather_rows_async(row).wait()

    def bcast_plan(self, plan: Plan | None, next_due: int = 0) -> tuple[Plan, int]:
        """Rank 0 passes the plan (and the step of the next regular decision), the others None;
        every rank returns rank 0's (plan, next_due)."""
        return self.bcast_plan_async(plan, next_due).wait()

    def gather_rows_async(self, row: np.ndarray) -> Pending:
        """``gather_rows`` started now (MPI_Igather); ``wait()`` gives its result."""
        row = np.ascontiguousarray(row, dtype=np.float64)
        out = np.empty((self.size, row.size), dtype=np.float64) if self.rank == 0 else None
        req = self.comm.Igather(row, out, root=0)
        buffers = (row, out)   # alive until the gather completed

        def finish() -> np.ndarray | None:
            wait_yielding(req)
            return buffers[1]
        return Pending(finish)

    def bcast_plan_async(self, plan: Plan | None, next_due: int = 0) -> Pending:
        """``bcast_plan`` started now (MPI_Ibcast); ``wait()`` gives its result."""
        buf = _plan_out(self.size, self.rank, plan, next_due)
        req = self.comm.Ibcast(buf, root=0)

        def finish() -> tuple[Plan, int]:
            wait_yielding(req)
            return decode_plan(buf)
        return Pending(finish)

    def bcast_object(self, obj: Any) -> Any:
        return self.comm.bcast(obj, root=0)

    def allgather_floats(self, values: list[float]) -> np.ndarray:
        """Every rank's ``values`` (same length on all ranks), on every rank: (size, len)."""
        row = np.asarray(values, dtype=np.float64)
        out = np.empty((self.size, row.size), dtype=np.float64)
        self.comm.Allgather(row, out)
        return out

    def allreduce_max(self, value: float) -> float:
        return float(self.comm.allreduce(value, op=self._MPI.MAX))

    def allreduce_min(self, value: float) -> float:
        return float(self.comm.allreduce(value, op=self._MPI.MIN))

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)

    def free(self) -> None:
        """Release the private communicator (idempotent; a no-op once MPI is finalized)."""
        MPI = self._MPI
        if self.comm == MPI.COMM_NULL or MPI.Is_finalized():
            return
        self.comm.Free()
        self.comm = MPI.COMM_NULL


class HorovodComm:
    """The same collectives over Horovod's own ops, for jobs without MPI underneath (Gloo,
    e.g. Horovod elastic). Fixed op names: calls are sequential and identical on all ranks,
    and a worker that joins after a reset must match the others' names."""

    def __init__(self) -> None:
        import horovod.torch as hvd

        self.hvd = hvd
        self.rank = hvd.rank()
        self.size = hvd.size()

    def gather_rows(self, row: np.ndarray) -> np.ndarray | None:
        import torch

        t = torch.from_numpy(np.ascontiguousarray(row, dtype=np.float64)).view(1, -1)
        out = self.hvd.allgather(t, name="dynamix.gather").numpy()
        return out if self.rank == 0 else None

    def bcast_plan(self, plan: Plan | None, next_due: int = 0) -> tuple[Plan, int]:
        import torch

        buf = _plan_out(self.size, self.rank, plan, next_due)
        out = self.hvd.broadcast(torch.from_numpy(buf), root_rank=0, name="dynamix.plan")
        return decode_plan(out.tolist())

    def gather_rows_async(self, row: np.ndarray) -> Pending:
        """Horovod's background thread moves it while the ranks train (an allgather: Horovod has
        no gather)."""
        import torch

        t = torch.from_numpy(np.ascontiguousarray(row, dtype=np.float64)).view(1, -1)
        handle = self.hvd.allgather_async(t, name="dynamix.rows_async")

        def finish() -> np.ndarray | None:
            out = self.hvd.synchronize(handle).numpy()
            return out if self.rank == 0 else None
        return Pending(finish)

    def bcast_plan_async(self, plan: Plan | None, next_due: int = 0) -> Pending:
        import torch

        buf = torch.from_numpy(_plan_out(self.size, self.rank, plan, next_due))
        handle = self.hvd.broadcast_async_(buf, root_rank=0, name="dynamix.plan_async")

        def finish() -> tuple[Plan, int]:
            self.hvd.synchronize(handle)
            return decode_plan(buf.numpy())
        return Pending(finish)

    def bcast_object(self, obj: Any) -> Any:
        return self.hvd.broadcast_object(obj, root_rank=0, name="dynamix.object")

    def allgather_floats(self, values: list[float]) -> np.ndarray:
        import torch

        t = torch.tensor([list(map(float, values))], dtype=torch.float64)
        return self.hvd.allgather(t, name="dynamix.allgather_floats").numpy()

    def allreduce_max(self, value: float) -> float:
        import torch

        return float(self.hvd.allreduce(torch.tensor([float(value)]), op=self.hvd.Max, name="dynamix.max"))

    def allreduce_min(self, value: float) -> float:
        import torch

        return float(self.hvd.allreduce(torch.tensor([float(value)]), op=self.hvd.Min, name="dynamix.min"))

    def barrier(self) -> None:
        self.hvd.barrier()

    def abort(self, code: int = 1) -> None:
        import os

        os._exit(code)

    def free(self) -> None:
        pass


class TorchComm:
    """The same collectives over ``torch.distributed`` (torchrun + DDP jobs: no MPI, no Horovod).
    A private gloo group (a ``new_group`` of every rank), so dynamix's messages never interleave
    with DDP's gradient traffic and its CPU tensors work whatever backend DDP uses (gloo, NCCL).
    ``timeout_s``: how long a collective waits for a missing rank before raising."""

    def __init__(self, timeout_s: float | None = None) -> None:
        import datetime

        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("dynamix: call torch.distributed.init_process_group() before creating Dynamix")
        self.dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        kw = {"timeout": datetime.timedelta(seconds=timeout_s)} if timeout_s else {}
        self.group: Any = dist.new_group(backend="gloo", **kw)

    def gather_rows(self, row: np.ndarray) -> np.ndarray | None:
        import torch

        t = torch.from_numpy(np.ascontiguousarray(row, dtype=np.float64))
        out = [torch.empty_like(t) for _ in range(self.size)] if self.rank == 0 else None
        self.dist.gather(t, out, dst=0, group=self.group)
        return torch.stack(out).numpy() if out is not None else None

    def bcast_plan(self, plan: Plan | None, next_due: int = 0) -> tuple[Plan, int]:
        import torch

        buf = _plan_out(self.size, self.rank, plan, next_due)
        t = torch.from_numpy(buf)
        self.dist.broadcast(t, src=0, group=self.group)
        return decode_plan(buf)

    def gather_rows_async(self, row: np.ndarray) -> Pending:
        import torch

        t = torch.from_numpy(np.ascontiguousarray(row, dtype=np.float64))
        out = [torch.empty_like(t) for _ in range(self.size)] if self.rank == 0 else None
        work = self.dist.gather(t, out, dst=0, group=self.group, async_op=True)

        def finish() -> np.ndarray | None:
            work.wait()
            return torch.stack(out).numpy() if out is not None else None
        return Pending(finish)

    def bcast_plan_async(self, plan: Plan | None, next_due: int = 0) -> Pending:
        import torch

        buf = _plan_out(self.size, self.rank, plan, next_due)
        work = self.dist.broadcast(torch.from_numpy(buf), src=0, group=self.group, async_op=True)

        def finish() -> tuple[Plan, int]:
            work.wait()
            return decode_plan(buf)
        return Pending(finish)

    def bcast_object(self, obj: Any) -> Any:
        box = [obj]
        self.dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def allgather_floats(self, values: list[float]) -> np.ndarray:
        import torch

        t = torch.tensor(list(map(float, values)), dtype=torch.float64)
        out = [torch.empty_like(t) for _ in range(self.size)]
        self.dist.all_gather(out, t, group=self.group)
        return torch.stack(out).numpy()

    def _allreduce(self, value: float, op: Any) -> float:
        import torch

        t = torch.tensor([float(value)], dtype=torch.float64)
        self.dist.all_reduce(t, op=op, group=self.group)
        return float(t[0])

    def allreduce_max(self, value: float) -> float:
        return self._allreduce(value, self.dist.ReduceOp.MAX)

    def allreduce_min(self, value: float) -> float:
        return self._allreduce(value, self.dist.ReduceOp.MIN)

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)

    def abort(self, code: int = 1) -> None:
        """Leave at once: torchrun sees the failed worker and stops the others; ranks of other
        agents see the closed connections and fail in their next collective."""
        import os
        import sys

        sys.stderr.flush()
        os._exit(code)

    def free(self) -> None:
        """Release the private group (idempotent; a no-op once torch.distributed is shut down)."""
        group, self.group = self.group, None
        if group is not None and self.dist.is_initialized():
            try:
                self.dist.destroy_process_group(group)
            except (RuntimeError, ValueError):   # the default group is already gone
                pass


def make_comm(base: Any = None) -> "Comm | HorovodComm":
    """mpi4py over Horovod's MPI communicator when Horovod runs on MPI; Horovod's own ops
    when it runs on Gloo (``horovodrun --gloo``, elastic mode)."""
    import horovod.torch as hvd

    if base is None and hvd.gloo_enabled() and not hvd.mpi_enabled():
        return HorovodComm()
    return Comm(base)
