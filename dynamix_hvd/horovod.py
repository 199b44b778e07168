"""The hook a user adds to a Horovod PyTorch script: the loop stays as Horovod's.

    hvd.init()
    dyn = Dynamix(model, optimizer, dataset_size=len(train_set), base_batch=32, controller="proportional")
    optimizer = dyn.optimizer                              # instead of hvd.DistributedOptimizer(...)
    for epoch in range(epochs):
        for idx in dyn.batches(epoch):                     # this rank's b_i sample indices
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            optimizer.zero_grad(); loss.backward(); optimizer.step()
            dyn.report(loss=loss)                          # optional: the loss trend

``Dynamix`` is a thin facade over the stage modules:
  measure.py    step meter (ring buffers) and the noise scale from sampled steps
  apply.py      the n_i/T weight in Horovod's gradient hook, the per-step flags beside the
                gradient allreduce, the out-of-memory re-plan, the LR rule
  localstate.py this rank's position, step in flight, per-step record, whether a decision is due
  decide.py     rank 0: controller, guards, next plan (no MPI)
  wire.py       row, plan and flag formats; comm.py moves them
  lifecycle.py  bounds, BatchNorm floor, collector, excepthook, checkpoints
Per step (inside ``optimizer.step()``): wait for the flags that rode with the gradients,
apply the update, record the step in O(1); every ``interval_steps`` steps, at least
``min_decision_s`` apart (or at once when a rank's detector flags a change), gather the rows,
decide on rank 0, broadcast the plan with the step of the next decision.

Why the weight: Horovod sums gradients (``op=hvd.Sum``); rank i's loss is its mean over n_i
samples and its gradient is multiplied by n_i/T (T: the step's samples over all ranks), so the
summed gradient is exactly the mean gradient over all T samples, the one big batch's update.
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from dynamix_hvd import lifecycle
from dynamix_hvd.apply import StepFlags, Weighting, apply_lr, horovod_optimizer, rescale_accumulated, skip_and_replan
from dynamix_hvd.comm import make_comm
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.controllers import Controller
from dynamix_hvd.data import ExactOnceSampler, StepSlice
from dynamix_hvd.decide import Decider
from dynamix_hvd.errors import DynamixError, OutOfMemoryError
from dynamix_hvd.localstate import LocalState
from dynamix_hvd.lr import LRScaler
from dynamix_hvd.observe import EpochProgress, RunLogger
from dynamix_hvd.plan import Plan
from dynamix_hvd.records import WorkerStats
from dynamix_hvd.wire import decode_rows, encode_row


class Dynamix(lifecycle.DeprecatedLoop):
    """Dynamic per-rank batch sizes for a Horovod PyTorch job. Create after ``hvd.init()``."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, dataset_size: int,
                 config: DynamixConfig | None = None, *, controller: Controller | str | None = None,
                 emulator: Any = None, comm: Any = None, named_parameters: Iterable | None = None,
                 compression: Any = None, broadcast_initial_state: bool | None = None,
                 metrics_fn: Callable[[WorkerStats], None] | None = None, **config_kwargs: Any) -> None:
        import horovod.torch as hvd

        if isinstance(controller, str):  # a name: goes through the validated config
            config_kwargs["controller"] = controller
            controller = None
        if not hvd.is_initialized():
            raise DynamixError("call hvd.init() before creating Dynamix(...)")
        self.hvd = hvd
        if config is None:
            config = DynamixConfig.load(**config_kwargs)
        elif config_kwargs:
            config = dataclasses.replace(config, **config_kwargs)
        self.comm = make_comm(comm)
        self.rank, self.world = self.comm.rank, self.comm.size
        if self.world != hvd.size():
            raise DynamixError(f"the MPI communicator has {self.world} ranks but Horovod has {hvd.size()}; "
                               "pass comm= the communicator given to hvd.init(comm=...)")
        self.config = cfg = config.validate(self.world)
        self.model, self.emulator, self.metrics_fn = model, emulator, metrics_fn
        self.hvd_optimizer = inner = horovod_optimizer(hvd, optimizer, cfg, named_parameters or model.named_parameters(),
                                                       compression)
        params = [p for g in inner.param_groups for p in g["params"] if p.requires_grad]
        if broadcast_initial_state is None:
            # Horovod elastic workers (HOROVOD_ELASTIC=1): state.sync() broadcasts instead; a worker
            # joining later would deadlock on these broadcasts while the others are in sync()
            broadcast_initial_state = os.environ.get("HOROVOD_ELASTIC", "") != "1"
        if broadcast_initial_state:
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(inner, root_rank=0)
        self.optimizer = GuardedOptimizer(inner, self)
        self.bounds = lifecycle.bounds_for_world(cfg, self.world, model)
        lifecycle.warn_batchnorm(model, self.bounds, self.rank)
        self.sampler = ExactOnceSampler(dataset_size, Plan.uniform(self.world, cfg.base_batch), seed=cfg.seed,
                                        shuffle=cfg.shuffle, accumulation=cfg.accumulation)
        self.base_global_batch = cfg.base_global_batch or cfg.base_batch * self.world
        self.log = RunLogger(cfg.run_dir if self.rank == 0 else None, tensorboard=cfg.tensorboard)
        self._decider = self._make_decider(controller) if self.rank == 0 else None
        self.lr = LRScaler(cfg.lr_rule)
        self.lag_steps = 0          # steps a DataLoader generates ahead (agreed by all ranks)
        self.progress = EpochProgress(dataset_size, enabled=cfg.progress and self.rank == 0)
        self.local = LocalState(cfg, self.rank, self.world, self.sampler, params, self.progress)
        # the n_i/T weight, sampled gradient norms and the step's flags: in Horovod's own hook
        self._weighting = Weighting(inner._compression, len(inner._requires_update),  # noqa: SLF001
                                    scale=lambda: self.local.scale,
                                    on_local=self._on_local if cfg.gns else None, last=self._submit_flags)
        inner._compression = self._weighting                 # noqa: SLF001
        self.local.on_new_step = self._new_step
        self._averaging = False     # Horovod's op is Average (uniform step) rather than Sum
        self._hooked = bool(inner._requires_update)          # noqa: SLF001 - Horovod registered its hooks
        self._flags = self._make_flags()
        self._t_start = time.perf_counter()
        self.collector = lifecycle.start_collector(cfg.collector_period_ms, self.rank) if cfg.collector else None
        self._excepthook = lifecycle.AbortOnUncaught(self.rank, self.world, self.comm.abort)
        self._watchdog = lifecycle.start_watchdog(self)    # stall_timeout_s: ends a job stuck on a lost peer
        # close() also runs when the hook is garbage collected or the interpreter exits, so the
        # run log is complete without an explicit close() (the 3-line example has none)
        self._res: dict[str, Any] = {}
        self._finalizer = weakref.finalize(self, _release, self._res)
        self._track()

    def _track(self) -> None:
        self._res.update(log=self.log, progress=self.progress, comm=self.comm, collector=self.collector,
                         excepthook=self._excepthook, watchdog=self._watchdog)

    def _make_decider(self, controller: Controller | None) -> Decider:
        return Decider(self.config, self.bounds, self.base_global_batch, controller, log_event=self.log.event)

    def _make_flags(self) -> StepFlags | None:
        return StepFlags(self.hvd, self.rank, self.world) if (
            self.world > 1 and self._hooked and (self.config.oom_redo or self.config.react)) else None

    # =====================================================================================
    # properties
    plan = property(lambda self: self.local.plan, doc="The plan in force for the next step to be trained.")
    step_count = property(lambda self: self.local.consumed["step"])
    epoch = property(lambda self: self.local.consumed["epoch"])
    gns = property(lambda self: self.local.gns)
    noise = property(lambda self: self.local.gns.estimator)
    noise_scale = property(lambda self: self.local.gns.estimator.noise_scale)
    _pending = property(lambda self: self.local.pending)
    _current = property(lambda self: self.local.current)
    _redo = property(lambda self: self.local.redo)

    @property
    def controller(self) -> Controller | None:
        return self._decider.controller if self._decider is not None else None

    @property
    def local_batch(self) -> int:
        cur = self.local.current
        return cur[2] if cur else self.plan.batch_sizes[self.rank]

    @property
    def current_slice(self) -> StepSlice | None:
        """The step being trained (sizes of every rank, position in the epoch), or None."""
        cur = self.local.current
        return cur[0] if cur else None

    def step_indices(self, sl: StepSlice | None = None) -> np.ndarray:
        """All ranks' sample indices of a step (default: the current one), in rank order."""
        sl = sl or self.current_slice
        if sl is None:
            raise DynamixError("no current step")
        return self.sampler.permutation(sl.epoch)[sl.start:sl.end]

    def loss_weight(self) -> float:
        """n_i / T for the current micro-batch."""
        if self.local.current is None:
            raise DynamixError("no current micro-batch: take one from dyn.batches()/dyn.loader() first")
        sl, _, n = self.local.current
        return n / sl.total

    # =====================================================================================
    # data
    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        """This rank's sample indices, one array per micro-batch, for (the rest of) ``epoch``."""
        self.local.check_epoch(epoch)
        for mb in self.local.generate(epoch):
            self.local.begin_micro()
            yield mb

    def loader(self, dataset: Any, epoch: int, **dataloader_kwargs: Any) -> Iterator[Any]:
        """A torch DataLoader over ``dataset`` with this rank's batches. Worker processes are
        fine: the batch sampler runs ``num_workers * prefetch_factor`` micro-batches ahead, so
        plans take effect that many steps later (all ranks must use the same settings)."""
        from torch.utils.data import DataLoader

        self.local.check_epoch(epoch)
        for bad in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"):
            if bad in dataloader_kwargs:
                raise DynamixError(f"loader(): {bad}= is set by dynamix; remove it")
        workers = int(dataloader_kwargs.get("num_workers", 0))
        prefetch = int(dataloader_kwargs.get("prefetch_factor") or 2) if workers > 0 else 0
        ahead = workers * prefetch
        lag = math.ceil(ahead / self.config.accumulation) + (1 if ahead else 0)
        lo, hi = self.comm.allreduce_min(lag), self.comm.allreduce_max(lag)
        if lo != hi:
            raise DynamixError(f"ranks use different DataLoader prefetch depths (lag {lo}..{hi} steps); "
                               "use the same num_workers and prefetch_factor on every rank")
        self.lag_steps = int(hi)
        dl = DataLoader(dataset, batch_sampler=_BatchSampler(self.local, epoch), **dataloader_kwargs)
        for batch in dl:
            self.local.begin_micro()
            yield batch

    # =====================================================================================
    # the step: inside optimizer.step()
    def report(self, loss: torch.Tensor | float | None = None, oom: bool = False) -> None:
        """Optional. ``loss``: this step's loss, for the loss trend (kept as a tensor; read once
        per decision). ``oom=True``: this rank caught an out-of-memory error in this step's
        forward or backward; ``optimizer.step()`` then skips the update on every rank, lowers
        this rank's cap and the same samples are redone under the new plan."""
        if loss is not None:
            self.local.meter.add_loss(loss)
        if oom:
            cur = self.local.current
            n = cur[2] if cur else 0
            if not self.config.oom_redo:
                raise OutOfMemoryError(self.rank, n)
            self.local.oom_batch = max(self.local.oom_batch, n, 1)
            self.local.gns.cancel()

    def _new_step(self) -> None:
        """A step starts: on a uniform plan Horovod averages (no weight pass over the gradients,
        as in a plain Horovod job); otherwise it sums the n_i/T-weighted gradients. Every rank
        takes the same branch: the step's sizes are the same on all ranks."""
        loc = self.local
        avg = loc.uniform and self._hooked
        if avg != self._averaging:
            self.hvd_optimizer.op = self.hvd.Average if avg else self.hvd.Sum
            self._averaging = avg
        loc.gns.local_scale = loc.scale if avg else 1.0
        self._weighting.reset(avg)

    def _on_local(self, grad: torch.Tensor) -> None:
        if self.local.gns.capturing:
            self.local.gns.on_local(grad)

    def _submit_flags(self) -> None:
        if self._flags is not None:
            self._flags.submit(self.local.oom_batch, self.local.react_flag)

    def _optimizer_step(self, closure: Any) -> Any:
        t_entry = time.perf_counter()
        loc, inner = self.local, self.hvd_optimizer
        if loc.current is None:
            raise DynamixError("optimizer.step() called without a batch from dyn.batches() / dyn.loader()")
        j = loc.current[1]
        if j != self.config.accumulation - 1:
            raise DynamixError(f"optimizer.step() after micro-batch {j + 1} of {self.config.accumulation}: "
                               "call it once per step, after the last micro-batch")
        oom: np.ndarray | None = None
        if self._flags is not None:
            if not inner._synchronized:          # noqa: SLF001 - submits what backward did not
                inner.synchronize()
            self._submit_flags()                 # no-op: normally sent with the last gradient
            oom, react = self._flags.wait()
            if react is not None:
                loc.react_ranks = react
        else:
            if loc.react_flag:
                loc.react_ranks = [self.rank]
            if loc.oom_batch:
                oom = np.zeros(self.world, dtype=np.int64)
                oom[self.rank] = loc.oom_batch
        loc.oom_batch = loc.react_flag = 0
        if oom is not None and np.any(oom > 0):
            skip_and_replan(self, oom)
            return None
        self._weigh_locally()
        if inner._synchronized:                  # noqa: SLF001
            with inner.skip_synchronize():
                out = inner.step(closure)
        else:
            out = inner.step(closure)
        sl, before = loc.record_step(t_entry, self._reduced_grads if self.rank == 0 else None)
        if loc.due(sl.step):
            self._decide(sl.step)
        after = self.sampler.plans.at(sl.step + 1)
        if after is not before or self.config.lr_rule == "adascale":
            est = loc.gns.estimator
            apply_lr(self.lr, self.optimizer, self.config.lr_rule, after, self.base_global_batch, est.s_ema, est.g2_ema)
        every = self.config.checkpoint_every
        if every and (sl.step + 1) % every == 0 and self.config.run_dir:
            self.save(Path(self.config.run_dir) / "checkpoint.pt")
        return out

    def _reduced_grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.local.params if p.grad is not None]

    def _synchronize(self) -> None:
        """``optimizer.synchronize()``: Horovod's, then (one rank without hooks) the weight."""
        self.hvd_optimizer.synchronize()
        self._weigh_locally()

    def _weigh_locally(self) -> None:
        """One rank without Horovod's hooks (no allreduce to hook into): apply the weight here."""
        if not self._hooked and self.local.scale != 1.0:
            rescale_accumulated(self.local.params, self.local.scale)
            self.local.scale = 1.0

    # =====================================================================================
    # decision: gather rows -> rank 0 decides -> broadcast the plan
    def _worker_row(self, step: int) -> np.ndarray:
        ws = self.local.worker_stats(step, self.bounds.max_batch[self.rank])
        if self.collector is not None:
            for key, value in self.collector.window().worker_stats_fields(ws.steps or None).items():
                setattr(ws, key, value)
        if self.metrics_fn is not None:
            self.metrics_fn(ws)
        return encode_row(ws, self.local.gns.sum_tc)

    def _decide(self, step: int) -> None:
        loc, d = self.local, self._decider
        rows = self.comm.gather_rows(self._worker_row(step))
        proposal: Plan | None = None
        record: dict[str, Any] = {}
        next_due = 0
        if d is not None:
            assert rows is not None
            workers, extras = decode_rows(rows)
            loc.gns.update(extras[:, 0])
            glob = d.global_stats(step, loc.gns.estimator, loc.meter.mean_loss(),
                                  loc.meter.throughput(loc.recent_steps()))
            record = {"t": time.perf_counter() - self._t_start, "step": step + 1}
            if loc.react_ranks is not None:
                record["early"] = {"ranks": loc.react_ranks}
            proposal = d.decide(workers, glob, self.sampler.plans.latest, step + 1 + self.lag_steps, record)
            next_due = step + 1 + self.config.next_interval(loc.meter.means()[2])
        else:
            loc.gns.reset_interval()
        plan, loc.next_due = self.comm.bcast_plan(proposal, next_due)
        if self.config.lr_rule == "adascale":   # every rank scales its LR from rank 0's estimate
            est = loc.gns.estimator
            est.s_ema, est.g2_ema = self.comm.bcast_object((est.s_ema, est.g2_ema) if d is not None else None)
        if plan.version != self.sampler.plans.latest.version:
            self.sampler.plans.add(plan)
            if d is not None:
                d.applied(plan, self.sampler.plans.at(step))
        self.sampler.plans.prune(step)
        if d is not None:
            self.log.decision(record, lr=float(self.optimizer.param_groups[0]["lr"]))
        loc.decided()

    # =====================================================================================
    # checkpoint, resizing, shutdown (lifecycle.py)
    def state_dict(self) -> dict[str, Any]:
        return lifecycle.hook_state(self)

    def load_state_dict(self, state: dict[str, Any], allow_resize: bool = False) -> None:
        """Restore ``state_dict()``. With ``allow_resize`` (elastic jobs) a state written by
        another number of ranks is accepted and the plan is recomputed for this world."""
        lifecycle.restore_hook_state(self, state, allow_resize)

    def reconnect(self) -> None:
        """After Horovod was re-initialised (elastic reset): a communicator for the new world."""
        if self._watchdog is not None:
            self._watchdog.close()
        self.comm.free()
        self.comm = make_comm()
        self.rank, self.world = self.comm.rank, self.comm.size
        self._watchdog = lifecycle.start_watchdog(self)
        self._track()

    def adapt_to_world(self) -> None:
        """Re-plan for the current world size (after ``reconnect`` or a resized checkpoint): the
        global batch kept and split evenly from the next untrained step on, the controller rebuilt
        on the (possibly new) rank 0; the sampler keeps its position (exact-once)."""
        lifecycle.adapt_to_world(self)

    def save(self, path: str | os.PathLike[str], **extra: Any) -> bool:
        """Rank 0 writes model, optimizer and dynamix state atomically; collective. A failed write
        follows ``checkpoint_on_error`` (lifecycle.save); True when written."""
        if self.local.current is not None:
            raise DynamixError("save() in the middle of a step: call it after optimizer.step()")
        return lifecycle.save(path, self.rank, lambda: {"dynamix": self.state_dict(), "model": self.model.state_dict(),
                                                        "optimizer": self.optimizer.state_dict(), **extra},
                              self.log.flush, self.comm.barrier, hook=self)

    def load(self, path: str | os.PathLike[str], allow_resize: bool = False) -> dict[str, Any]:
        """Rank 0 reads the checkpoint and broadcasts it; every rank restores model, optimizer and
        dynamix state; returns the payload (for the user's extra entries). ``allow_resize``: a
        checkpoint of another world size resumes here, global batch kept, coverage exact-once."""
        payload = lifecycle.load(path, self.rank, self.comm.bcast_object)
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.load_state_dict(payload["dynamix"], allow_resize=allow_resize)
        return payload

    def close(self) -> None:
        """Stop the collector, flush and close the run log, free the communicator, restore
        ``sys.excepthook``. Idempotent; also run at garbage collection and interpreter exit."""
        self._track()
        self._finalizer()
        self.collector = None


def _release(res: dict[str, Any]) -> None:
    if res.get("collector") is not None:
        res["collector"].stop()
    res["log"].close()
    res["progress"].close()
    res["comm"].free()
    res["excepthook"].restore()
    if res.get("watchdog") is not None:
        res["watchdog"].close()


class GuardedOptimizer:
    """``dyn.optimizer``: Horovod's DistributedOptimizer whose ``step()`` also reads the step's
    flags (an out-of-memory rank: the update is skipped and the step redone), records the step
    and takes the decision when one is due. Everything else is Horovod's."""

    def __init__(self, inner: Any, dyn: Dynamix) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_dyn", dyn)

    def step(self, closure: Any = None) -> Any:
        return self._dyn._optimizer_step(closure)

    def synchronize(self) -> None:
        self._dyn._synchronize()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)


class _BatchSampler:
    """Adapts the rank's batch generator to DataLoader's ``batch_sampler`` protocol."""

    def __init__(self, local: LocalState, epoch: int) -> None:
        self.local, self.epoch = local, epoch

    def __iter__(self) -> Iterator[list[int]]:
        for mb in self.local.generate(self.epoch):
            yield mb.tolist()
