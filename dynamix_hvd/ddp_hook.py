"""The DDP communication hook of the ddp engine: DDP's one supported place to change how a
gradient bucket is reduced (``DistributedDataParallel.register_comm_hook``).

Per bucket (DDP launches them in index order, each as soon as its gradients are ready):
  1. multiply the bucket by this rank's weight n_i/T (the step's share of the global batch),
  2. on sampled steps, take the squared norm of the weighted local bucket (noise scale),
  3. SUM it over the ranks (DDP would average: with unequal n_i the mean of the per-rank mean
     gradients is not the big batch's gradient; the weighted sum is),
  4. time it: (bytes, seconds from launch to completion) per bucket, into ``BucketTimes``.
On a uniform step (every rank the same batch, no accumulation: n_i/T = 1/N everywhere) steps 1
and 3 become one AVG allreduce, as in a plain DDP job: no weight pass on the training thread,
the backend divides (gloo and NCCL; other backends keep the weight and SUM).
Bucket 0 (the first one reduced, at most DDP's 1 MB first-bucket cap by default) also carries the
step's flag vector (wire.py: every rank's out-of-memory batch and flag word): it is
allreduced as one tensor [weighted bucket 0, flags], so the flags cost no collective of their
own. They are reduced by the time ``loss.backward()`` returns (DDP waits for every bucket);
averaged flags are multiplied back by N (small integers: exact after rounding).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from dynamix_hvd.wire import Flagged, flag_slots, read_flags, set_flags

NAN = float("nan")


class BucketTimes:
    """Per-bucket allreduce durations and bytes of one decision interval (bounded ring)."""

    def __init__(self, capacity: int = 4096) -> None:
        self._ring = np.zeros((capacity, 2))    # seconds, bytes
        self.reset()

    def reset(self) -> None:
        self.n = 0
        self.bytes = 0.0
        self.steps = 0

    def add(self, nbytes: int, seconds: float) -> None:
        row = self._ring[self.n % len(self._ring)]
        row[0], row[1] = seconds, nbytes
        self.bytes += nbytes
        self.n += 1

    def p50_s(self) -> float:
        """Median allreduce duration of the interval's buckets (NaN: none timed)."""
        k = min(self.n, len(self._ring))
        return float(np.median(self._ring[:k, 0])) if k else NAN

    def bytes_per_step(self) -> float:
        return self.bytes / self.steps if self.steps else NAN


class SumHook:
    """The comm hook (``register(ddp_model)``) and the per-step state it keeps."""

    def __init__(self, rank: int, world: int, group: Any, scale: Callable[[], float],
                 on_local: Callable[[torch.Tensor], None] | None, flags: Callable[[], tuple[int, int]] | None) -> None:
        self.rank, self.world, self.group = rank, world, group
        self.scale = scale             # this rank's weight n_i/T for the step (float)
        self.on_local = on_local       # sampled-step norm capture of the weighted local bucket, or None
        self.flags = flags             # () -> (oom batch, flag word: wire.py's bits) of this rank, or None
        self.times = BucketTimes()
        self.buckets = 0               # buckets launched in this step
        self.t_last = 0.0              # when this step's last bucket was launched (local compute done)
        self._ext: torch.Tensor | None = None   # [bucket 0, flags], reused while bucket 0 keeps its size
        self._flag_np = np.zeros(flag_slots(world), dtype=np.float32)
        self._flags_ready = False
        self.can_average = False       # the backend has an AVG allreduce (set by register)
        self.average = False           # this step: AVG, no weight (a uniform step)

    def register(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> None:
        if self.group is None:
            self.group = ddp_model.process_group      # DDP's own group (gloo or NCCL)
        self.can_average = str(dist.get_backend(self.group)) in ("gloo", "nccl")
        ddp_model.register_comm_hook(None, self.hook)

    def new_step(self, average: bool = False) -> None:
        """A step starts; ``average``: a uniform step, reduced with AVG and no weight."""
        self.buckets = 0
        self._flags_ready = False
        self.average = average and self.can_average

    def hook(self, state, bucket):  # type: ignore[no-untyped-def]  # (DDP checks the annotations; none here)
        """(state, GradBucket) -> Future[Tensor]: the weighted bucket, summed over the ranks."""
        buf = bucket.buffer()
        avg = self.average
        w = 1.0 if avg else self.scale()
        self.buckets += 1
        first = bucket.index() == 0
        if first:
            self.times.steps += 1
        if first and self.flags is not None:
            n = buf.numel()
            ext = self._ext
            if ext is None or ext.numel() != n + len(self._flag_np) or ext.dtype != buf.dtype or ext.device != buf.device:
                ext = self._ext = torch.empty(n + len(self._flag_np), dtype=buf.dtype, device=buf.device)
            out = ext[:n]
            if w != 1.0:
                torch.mul(buf, w, out=out)
            else:
                out.copy_(buf)
            set_flags(self._flag_np, self.rank, self.world, *self.flags())
            ext[n:].copy_(torch.from_numpy(self._flag_np))
            send = ext
        else:
            if w != 1.0:
                buf.mul_(w)
            send = out = buf
        if self.on_local is not None:
            self.on_local(out)
        nbytes = send.numel() * send.element_size()
        t0 = self.t_last = time.perf_counter()
        op = dist.ReduceOp.AVG if avg else dist.ReduceOp.SUM
        fut = dist.all_reduce(send, op=op, group=self.group, async_op=True).get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            f.value()                               # re-raises a failed allreduce
            self.times.add(nbytes, time.perf_counter() - t0)
            if send is not out:
                self._flags_ready = True
            return out

        return fut.then(done)

    def read_flags(self) -> tuple[np.ndarray, Flagged]:
        """(oom batch per rank, the ranks with each flag bit: wire.Flagged), summed over ranks."""
        if not self._flags_ready or self._ext is None:
            raise RuntimeError("dynamix: the step's flags did not arrive (bucket 0 was not reduced)")
        n = self._ext.numel() - len(self._flag_np)
        got = self._ext[n:].float().cpu().numpy()
        return read_flags(got * self.world if self.average else got, self.world)
