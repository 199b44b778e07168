"""The dynamix hook for PyTorch ``DistributedDataParallel`` under ``torchrun`` (no MPI, no Horovod):

    dist.init_process_group("gloo")                        # "nccl" on GPUs; torchrun sets the env
    model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    dyn = Dynamix(model, optimizer, dataset_size=len(train_set), base_batch=32)
    for epoch in range(dyn.epoch, epochs):
        for idx in dyn.batches(epoch):                     # this rank's b_i sample indices
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            optimizer.zero_grad(); loss.backward(); optimizer.step()

The loop is DDP's: the model and optimizer are the user's own objects. Dynamix adds
  * a DDP communication hook (ddp_hook.py) that weights each gradient bucket by n_i/T and SUMs
    it, so the reduced gradient is the one big batch's mean gradient whatever the b_i; it times
    every bucket and carries the step's flags in bucket 0 (no collective of its own per step);
  * the optimizer's step pre-hook: the flags (an out-of-memory rank: the update is skipped on
    every rank and the same samples are redone under a lowered cap), and the post-hook: the
    engine-neutral per-step logic of core.py (record the step, decide when due, LR rule,
    automatic checkpoint, the stop after a stop signal on any rank);
  * gradient accumulation: DDP's ``no_sync`` (``require_backward_grad_sync = False``) on every
    micro-batch but the last of a step, so one reduction per step; a forward hook marks each
    micro-batch's backward, so a rank that leaves one without it stops (``StepSkippedError``).
Plans and rows travel over a private gloo group (comm.TorchComm). ``resume=PATH`` (or, after a
``torchrun --max-restarts`` restart, ``run_dir/checkpoint.pt``) resumes exactly once, also on
another number of ranks.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from dynamix_hvd.comm import TorchComm
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.controllers import Controller
from dynamix_hvd.core import DynamixCore, load_config
from dynamix_hvd.ddp_hook import SumHook
from dynamix_hvd.errors import DynamixError
from dynamix_hvd.records import WorkerStats


class Dynamix(DynamixCore):
    """Dynamic per-rank batch sizes for a DDP job. Create after ``init_process_group`` and DDP."""

    def __init__(self, model: DistributedDataParallel, optimizer: torch.optim.Optimizer, dataset_size: int,
                 config: DynamixConfig | None = None, *, controller: Controller | str | None = None,
                 emulator: Any = None, comm: Any = None, resume: str | os.PathLike[str] | None = None,
                 metrics_fn: Callable[[WorkerStats], None] | None = None, **config_kwargs: Any) -> None:
        if not isinstance(model, DistributedDataParallel):
            raise DynamixError(f"the ddp engine needs the model wrapped in DistributedDataParallel, got "
                               f"{type(model).__name__}: model = DistributedDataParallel(model) first")
        config, controller = load_config(config, controller, config_kwargs)
        self.optimizer = optimizer
        params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        self._setup(model, dataset_size, config, comm or TorchComm(), params, controller, emulator, metrics_fn)
        cfg = self.config
        self._hook = SumHook(self.rank, self.world, None, scale=lambda: self.local.scale,
                             on_local=self._on_local if cfg.gns else None,
                             flags=self._my_flags if cfg.step_flags else None)
        self._hook.register(model)
        self.local.on_new_step = self._new_step
        self.local.reduced = lambda: self._hook.buckets > 0     # (this step's buckets went to the reduction)
        self._t_compute = 0.0
        self._handles = [optimizer.register_step_pre_hook(self._pre_step),
                         optimizer.register_step_post_hook(self._post_step)]
        self._backward_seen = True
        self._watching = cfg.accumulation > 1 and self.world > 1   # no_sync hides a micro-batch's backward from DDP
        if self._watching:
            self._handles.append(model.register_forward_hook(self._watch_backward))
        if resume is None and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0:
            # torchrun restarted the workers: rank 0's run_dir (it may be set there alone)
            resume = self.comm.bcast_object(str(Path(cfg.run_dir) / "checkpoint.pt")
                                            if self.rank == 0 and cfg.run_dir else None)
        if resume is not None and self.comm.bcast_object(os.path.exists(resume) if self.rank == 0 else None):
            self.load(resume, allow_resize=True)

    def _new_step(self) -> None:
        """A step starts: on a uniform plan the hook averages (AVG allreduce, no weight pass),
        as plain DDP does; otherwise it sums the n_i/T-weighted buckets. Every rank takes the
        same branch: the step's sizes are the same on all ranks."""
        loc, hook = self.local, self._hook
        avg = loc.uniform and hook.can_average
        loc.gns.local_scale = loc.scale if avg else 1.0
        hook.new_step(avg)

    def _my_flags(self) -> tuple[int, int]:
        return self.local.oom_batch, self.local.flag_word()

    def _watch_backward(self, module: Any, args: Any, output: Any) -> None:
        """(accumulation) DDP's forward: a gradient reaching its output marks the micro-batch's
        backward. An output with no tensor to watch (a type ``_tensors`` does not open) cannot
        be checked: its micro-batch counts as backed."""
        if torch.is_grad_enabled():
            watched = [t.register_hook(self._saw_backward) for t in _tensors(output) if t.requires_grad]
            if not watched:
                self._backward_seen = True

    def _saw_backward(self, grad: torch.Tensor) -> None:
        self._backward_seen = True

    def _begin_micro(self) -> None:
        cur = self.local.current
        if self._watching and cur is not None and cur[1] < self.config.accumulation - 1:
            # the step's previous micro-batch: DDP's no_sync() would not notice it left without backward
            self.local.check_backward(cur[1] + self._backward_seen, cur[1] + 1)
        self._backward_seen = False
        super()._begin_micro()
        k = self.config.accumulation
        if k > 1:   # DDP's no_sync() on every micro-batch but the step's last
            self.model.require_backward_grad_sync = self.local.current[1] == k - 1   # type: ignore[index]

    # ---- optimizer.step(): pre-hook (flags, skip on out-of-memory), post-hook (core) -------------
    def _pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        t_entry = time.perf_counter()
        self._check_step_call()
        loc, hook = self.local, self._hook
        if hook.buckets == 0:
            self._join_reduction()
        oom: np.ndarray | None = None
        if hook.flags is not None:   # (without oom_redo, react and stop_on_signal no rank ever raises a flag)
            oom, flagged = hook.read_flags()
            loc.flags_read(flagged)
        loc.clear_flags()
        # this rank's compute ended when its last bucket was ready; the rest of backward was waiting
        self._t_compute = hook.t_last if hook.buckets else t_entry
        if oom is not None and np.any(oom > 0):
            for p in loc.params:      # every optimizer skips parameters without a gradient
                p.grad = None
            self._replan_after_oom(oom)

    def _post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.local.current is None:    # the step was skipped (out of memory somewhere) and is redone
            return
        self._after_update(self._t_compute)

    def _join_reduction(self) -> None:
        """This rank did not run backward in this step (it reported out of memory after DDP's
        forward): a zero backward so that DDP's reduction (and the flags) still runs everywhere."""
        if not self.local.oom_batch:
            raise DynamixError("optimizer.step() without loss.backward() in this step: every rank must run "
                               "backward (or report(oom=True) after an out-of-memory error)")
        with torch.enable_grad():
            torch.stack([p.sum() for p in self.local.params]).sum().mul(0.0).backward()
        if self._hook.buckets == 0:
            raise DynamixError(f"rank {self.rank} ran out of memory before DDP's forward finished; DDP cannot "
                               "reduce this step without it. Lower max_batch for this rank.")

    # ---- the interval's bucket timings into the rank's row ---------------------------------------
    def _engine_fields(self, ws: WorkerStats) -> None:
        times = self._hook.times
        if times.n:
            ws.allreduce_p50_s = times.p50_s()
            ws.allreduce_bytes = times.bytes_per_step()
        times.reset()

    @property
    def compute_end(self) -> float:
        """``time.perf_counter()`` when this rank's last gradient bucket of the step was ready:
        its own compute ended there; the rest of ``loss.backward()`` waited for the other ranks."""
        return self._hook.t_last

    def _rehook(self) -> None:
        """After a resized checkpoint: the hook already serves this process's world."""

    def close(self) -> None:
        for h in getattr(self, "_handles", ()):
            h.remove()
        self._handles = []
        super().close()


def _tensors(out: Any) -> list[torch.Tensor]:
    """The tensors in a model's output (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []
