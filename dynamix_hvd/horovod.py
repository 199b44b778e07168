"""The hook a user adds to a Horovod PyTorch script.

    hvd.init()
    dyn = Dynamix(model, optimizer, dataset_size=len(train_set), base_batch=32, controller="proportional")
    for epoch in range(epochs):
        for idx in dyn.batches(epoch):                     # this rank's b_i sample indices
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            dyn.optimizer.zero_grad(); dyn.backward(loss); dyn.optimizer.step()
            dyn.step(loss)

Per step:  measure (timings, |g_i|^2)  ->  every ``interval_steps``: gather to rank 0 ->
controller decides -> ``next_plan`` (bounds, quantum, deadband) -> broadcast -> all ranks
apply the plan from the same future step (sampler slices, loss weight n_i/T, LR rule).

Why the loss weight: Horovod sums gradients (``op=hvd.Sum``); rank i's loss is its mean over
n_i samples, multiplied by n_i/T where T is the step's total over all ranks, so the summed
gradient is exactly the mean gradient over all T samples, the one big batch's update.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from dynamix_hvd import checkpoint as ckpt
from dynamix_hvd.comm import make_comm
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.controllers import Controller, make_controller
from dynamix_hvd.data import ExactOnceSampler, PlanLog, StepSlice
from dynamix_hvd.errors import DynamixError, OutOfMemoryError
from dynamix_hvd.lr import LRScaler, lr_factor
from dynamix_hvd.plan import Plan, PlanBounds, next_plan, split_global
from dynamix_hvd.react import ChangeDetector
from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats
from dynamix_hvd.observe import EpochProgress, RunLogger
from dynamix_hvd.safety import ControllerErrors, GoodputGuard, MoveLimits, limit_proposal, unexplained_slowdown
from dynamix_hvd.stats import NoiseScaleEstimator, Trend, statistical_efficiency

N_EXTRA = 2  # per-rank GNS sums appended to the WorkerStats row


def _is_horovod_distributed(optimizer: Any) -> bool:
    return hasattr(optimizer, "_allreduce_delay") and hasattr(optimizer, "synchronize")


@dataclasses.dataclass
class _Interval:
    """Per-rank accumulators for one decision interval (reset after each decision)."""

    loss: float = 0.0
    loss_n: int = 0
    gns_a: float = 0.0   # sum_t T_t c_i,t / (N-1)
    gns_a2: float = 0.0  # sum_t c_i,t / (N-1)
    g_s: float = 0.0     # rank 0: sum_t T_t |G_t|^2 / (N-1)
    g_sum: float = 0.0   # rank 0: sum_t |G_t|^2
    g_inv: float = 0.0   # rank 0: sum_t |G_t|^2 / (N-1)
    gns_steps: int = 0
    samples: int = 0
    t0: float = dataclasses.field(default_factory=time.perf_counter)
    # per full step (compute, comm, step) seconds and samples (all ranks), and where this rank's
    # detector placed a change
    per_step: list[tuple[float, float, float, int]] = dataclasses.field(default_factory=list)
    since: int | None = None     # index into per_step of the first step after a detected change
    changed: int = 0             # 1 if that change was in this rank's own compute time


class Dynamix:
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
        self.config = config.validate(self.world)
        cfg = self.config
        self.model = model
        self.emulator = emulator
        self.metrics_fn = metrics_fn

        # -- optimizer: Horovod, summing -------------------------------------------------
        if _is_horovod_distributed(optimizer):
            if getattr(optimizer, "op", None) != hvd.Sum:
                raise DynamixError(
                    "the optimizer was wrapped with hvd.DistributedOptimizer(op=Average) (or Adasum); dynamix "
                    "weights each rank's loss by n_i/T and needs op=hvd.Sum. Pass the plain optimizer and "
                    "dynamix wraps it, or wrap it with op=hvd.Sum.")
            if optimizer.backward_passes_per_step != cfg.accumulation:
                raise DynamixError(
                    f"optimizer backward_passes_per_step={optimizer.backward_passes_per_step} but "
                    f"config accumulation={cfg.accumulation}; they must match")
            self.optimizer = optimizer
        else:
            self.optimizer = hvd.DistributedOptimizer(
                optimizer, named_parameters=list(named_parameters or model.named_parameters()),
                compression=compression or hvd.Compression.none, op=hvd.Sum,
                backward_passes_per_step=cfg.accumulation)
        if broadcast_initial_state is None:
            # Horovod elastic workers (HOROVOD_ELASTIC=1): state.sync() broadcasts instead; a worker
            # joining later would deadlock on these broadcasts while the others are in sync()
            broadcast_initial_state = os.environ.get("HOROVOD_ELASTIC", "") != "1"
        if broadcast_initial_state:
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)
        self.hvd_optimizer = self.optimizer
        self.optimizer = GuardedOptimizer(self.hvd_optimizer, self)
        self._oom_batch = 0          # this rank's batch size that ran out of memory in this step
        self._detector = ChangeDetector(tol=cfg.react_tol) if cfg.react else None
        self._react_flag = 0         # this rank's detector fired; sent with the next per-step collective
        self._react_ranks: list[int] | None = None   # ranks that flagged, known to all: decide early
        self._early_step = -(10 ** 9)                # step of the last early decision
        self._redo = False

        # -- plan, sampler, controller ---------------------------------------------------
        first = Plan.uniform(self.world, cfg.base_batch)
        self.bounds = self._bounds_for_world()
        self.sampler = ExactOnceSampler(dataset_size, first, seed=cfg.seed, shuffle=cfg.shuffle,
                                        accumulation=cfg.accumulation)
        self.controller: Controller | None = None
        self._startup_events: list[dict[str, Any]] = []
        if self.rank == 0:
            self.controller = controller or self._build_controller()
        self.base_global_batch = cfg.base_global_batch or cfg.base_batch * self.world
        self.lr = LRScaler(cfg.lr_rule)
        self.noise = NoiseScaleEstimator(beta=cfg.gns_beta)
        self.loss_trend = Trend()
        self.var_trend = Trend()
        self.lag_steps = 0          # steps a DataLoader generates ahead (agreed by all ranks)

        # -- per-step state --------------------------------------------------------------
        self._pending: collections.deque[tuple[StepSlice, int, int]] = collections.deque()
        self._current: tuple[StepSlice, int, int] | None = None   # (slice, micro index, n samples)
        self._consumed = self.sampler.position()
        self._t_batch = time.perf_counter()
        self._t_backward_end = self._t_batch
        self._t_last_step = self._t_batch
        self._compute_acc = 0.0
        self._interval = _Interval()
        self._local_sq: list[torch.Tensor] = []
        self._capture = False
        self._last_action: np.ndarray | None = None
        self._t_start = time.perf_counter()
        self.log = RunLogger(cfg.run_dir if self.rank == 0 else None, tensorboard=cfg.tensorboard)
        for event in self._startup_events:
            self.log.event(event)
        self.progress = EpochProgress(dataset_size, enabled=cfg.progress and self.rank == 0)
        self._errors = ControllerErrors()
        self._guard = GoodputGuard(drop=cfg.guard_drop, patience=cfg.guard_patience)
        self._limits = MoveLimits(max_rank_change=cfg.max_rank_change, max_global_change=cfg.max_global_change)
        self._changed_last = False
        self._prev_state: ClusterState | None = None     # the last decision's state (the guard's reference)
        self.collector = self._start_collector() if cfg.collector else None
        _install_abort_on_uncaught(self.rank, self.world, self.comm.abort)
        if cfg.gns:
            for p in model.parameters():
                if p.requires_grad:
                    p.register_hook(self._make_grad_hook(p))

    def _build_controller(self) -> Controller:
        """The configured controller; if it cannot be built (e.g. a missing or corrupt policy
        file) the fallback controller is used instead, named in a warning and the event log."""
        cfg = self.config
        try:
            return make_controller(cfg.controller, self.bounds, cfg.base_batch, **cfg.controller_options())
        except Exception as exc:  # noqa: BLE001 - any build failure: run on the fallback
            if cfg.controller == cfg.fallback_controller:
                raise
            warnings.warn(f"dynamix: controller {cfg.controller!r} could not be built ({exc}); "
                          f"using the fallback controller {cfg.fallback_controller!r}", RuntimeWarning, stacklevel=3)
            self._startup_events.append({"step": 0, "fallback": {"from": cfg.controller,
                                                                 "to": cfg.fallback_controller, "reason": str(exc)}})
            return make_controller(cfg.fallback_controller, self.bounds, cfg.base_batch)

    def _start_collector(self) -> Any:
        """The native NIC/CPU/memory sampler and collective-timing reader; None (one warning)
        when it cannot run here: those WorkerStats fields then stay NaN ("no data")."""
        try:
            from dynamix_hvd.metrics import Collector, CollectorConfig

            return Collector(CollectorConfig(period_s=self.config.collector_period_ms / 1000.0)).start()
        except Exception as exc:  # noqa: BLE001 - metrics are optional, training is not
            warnings.warn(f"dynamix: native metric collector unavailable on rank {self.rank} ({exc}); "
                          "NIC/CPU/memory/allreduce metrics will be absent", RuntimeWarning, stacklevel=3)
            return None

    # =====================================================================================
    # properties
    @property
    def plan(self) -> Plan:
        """The plan in force for the next step to be trained."""
        return self.sampler.plans.at(self._consumed["step"])

    @property
    def step_count(self) -> int:
        return self._consumed["step"]

    @property
    def epoch(self) -> int:
        return self._consumed["epoch"]

    @property
    def local_batch(self) -> int:
        return self._current[2] if self._current else self.plan.batch_sizes[self.rank]

    @property
    def current_slice(self) -> StepSlice | None:
        """The step being trained (sizes of every rank, position in the epoch), or None."""
        return self._current[0] if self._current else None

    def step_indices(self, sl: StepSlice | None = None) -> np.ndarray:
        """All ranks' sample indices of a step (default: the current one), in rank order."""
        sl = sl or self.current_slice
        if sl is None:
            raise DynamixError("no current step")
        return self.sampler.permutation(sl.epoch)[sl.start:sl.end]

    @property
    def noise_scale(self) -> float:
        return self.noise.noise_scale

    # =====================================================================================
    # data
    def _generate(self, epoch: int) -> Iterator[np.ndarray]:
        """Micro-batches of this rank for the rest of ``epoch``; records what was generated."""
        for sl in self.sampler.iter_epoch(epoch):
            for j, mb in enumerate(self.sampler.rank_micro_batches(sl, self.rank)):
                self._pending.append((sl, j, len(mb)))
                yield mb

    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        """This rank's sample indices, one array per micro-batch, for (the rest of) ``epoch``."""
        self._check_epoch(epoch)
        for mb in self._generate(epoch):
            self._begin_micro()
            yield mb

    def loader(self, dataset: Any, epoch: int, **dataloader_kwargs: Any) -> Iterator[Any]:
        """A torch DataLoader over ``dataset`` with this rank's batches. Worker processes are
        fine: the batch sampler runs ``num_workers * prefetch_factor`` micro-batches ahead, so
        plans take effect that many steps later (all ranks must use the same settings)."""
        from torch.utils.data import DataLoader

        self._check_epoch(epoch)
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
        dl = DataLoader(dataset, batch_sampler=_BatchSampler(self, epoch), **dataloader_kwargs)
        for batch in dl:
            self._begin_micro()
            yield batch

    def _check_epoch(self, epoch: int) -> None:
        if self._pending:
            raise DynamixError("a previous epoch's iterator was not consumed to the end")
        if epoch < self._consumed["epoch"]:
            raise DynamixError(f"epoch {epoch} is before the resumed position (epoch {self._consumed['epoch']})")

    def _begin_micro(self) -> None:
        self._current = self._pending.popleft()
        sl, j, _ = self._current
        if j == 0:
            self._t_batch = time.perf_counter()
            self._compute_acc = 0.0
        self._capture = self.config.gns and j == self.config.accumulation - 1 and self._is_full(sl)

    def _is_full(self, sl: StepSlice) -> bool:
        plan = self.sampler.plans.at(sl.step)
        return sl.sizes == tuple(self.config.accumulation * b for b in plan.batch_sizes)

    # =====================================================================================
    # backward / step
    def loss_weight(self) -> float:
        """n_i / T for the current micro-batch."""
        if self._current is None:
            raise DynamixError("backward() called before taking a batch from batches()/loader()")
        sl, _, n = self._current
        return n / sl.total

    def backward(self, loss: torch.Tensor | None, oom: bool = False) -> None:
        """(loss * n_i/T).backward(). Pass None for an empty micro-batch (tiny datasets only).

        Out of memory (an ``OutOfMemoryError`` from the emulator or torch during backward, or
        ``oom=True`` from user code that caught one in its forward): this rank still completes
        Horovod's allreduce with zero gradients, the optimizer step is skipped on all ranks,
        the rank's cap is lowered, and the same samples are redone under the new plan."""
        w = self.loss_weight()
        n = self._current[2]
        try:
            if oom:
                raise OutOfMemoryError(self.rank, n)
            if self.emulator is not None:
                self.emulator.before_backward(n, time.perf_counter() - self._t_batch)
            if loss is None or n == 0:
                self._zero_backward()
            else:
                (loss * w).backward()
        except (OutOfMemoryError, torch.OutOfMemoryError) as exc:
            if not self.config.oom_redo:
                raise
            self._oom_batch = max(self._oom_batch, n, 1)
            warnings.warn(f"dynamix: rank {self.rank} out of memory at batch {n} ({exc}); redoing the step",
                          RuntimeWarning, stacklevel=2)
            self._capture = False
            self._zero_backward()
        self._t_backward_end = time.perf_counter()

    def _zero_backward(self) -> None:
        """Zero gradients through autograd, so Horovod's hooks still fire on this rank."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        (sum(p.sum() for p in params) * 0.0).backward()

    def _before_optimizer_step(self) -> bool:
        """Collective, once per step (when oom_redo or react is on): every rank's out-of-memory
        batch and early-decision flag in one allgather. True if any rank ran out of memory, in
        which case the update is skipped, caps are lowered and the step is replanned."""
        if not (self.config.oom_redo or self.config.react):
            return False
        flags = self.comm.allgather_floats([float(self._oom_batch), float(self._react_flag)])
        self._oom_batch = self._react_flag = 0
        if np.any(flags[:, 1] > 0):
            self._react_ranks = np.flatnonzero(flags[:, 1] > 0).tolist()
        oom = flags[:, 0]
        if not np.any(oom > 0):
            return False
        if self._current is None:
            raise DynamixError("optimizer.step() called without a batch")
        if self.lag_steps > 0:
            raise DynamixError(f"rank(s) {np.flatnonzero(oom).tolist()} ran out of memory at batch sizes "
                               f"{oom[oom > 0].astype(int).tolist()}; redoing a step is not possible while a "
                               "DataLoader prefetches (num_workers > 0): lower max_batch or use num_workers=0")
        inner = self.hvd_optimizer
        inner.synchronize()              # drain Horovod's allreduces of the discarded gradients
        inner._synchronized = False      # noqa: SLF001 - the step is skipped, not taken later
        inner.zero_grad()
        sl = self._current[0]
        q = self.config.quantum
        for r in np.flatnonzero(oom > 0):
            b = int(oom[r])
            lowered = ((b - max(q, int(np.ceil(0.1 * b)))) // q) * q   # 10% (at least a quantum) below
            self.bounds = self.bounds.with_max(int(r), min(self.bounds.max_batch[r], lowered))
        caps = list(self.bounds.max_batch)
        old = self.sampler.plans.at(sl.step)
        sizes = split_global(old.global_batch, old.batch_sizes, self.bounds)
        plan = Plan(self.sampler.plans.latest.version + 1, tuple(sizes), sl.step)
        self.sampler.plans = PlanLog(plan)
        self.sampler.epoch, self.sampler.cursor, self.sampler.step = sl.epoch, sl.start, sl.step
        if self.controller is not None:
            self.controller.update_bounds(self.bounds)
        if self.rank == 0:
            self.log.event({"step": sl.step, "oom": {"ranks": np.flatnonzero(oom > 0).tolist(),
                                                     "batch": oom[oom > 0].astype(int).tolist(),
                                                     "max_batch": caps, "plan": sizes}})
        self._redo = True
        return True

    def _make_grad_hook(self, p: torch.nn.Parameter) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            # runs before the gradient is accumulated into p.grad, i.e. before Horovod's
            # accumulator hook starts the in-place allreduce: the local gradient is intact.
            if self._capture:
                local = grad if p.grad is None else grad + p.grad
                self._local_sq.append(local.detach().float().pow(2).sum())
        return hook

    def step(self, loss: torch.Tensor | float | None = None) -> Plan:
        """Call after ``optimizer.step()``. Records timings and statistics; every
        ``interval_steps`` steps takes a decision (collective: all ranks call it)."""
        if self._current is None:
            raise DynamixError("step() called without a batch")
        if self._redo:                   # the step ran out of memory somewhere: it is redone
            self._redo = False
            self._current = None
            self._local_sq.clear()
            self._capture = False
            self._t_last_step = time.perf_counter()
            return self.plan
        sl, j, _ = self._current
        if j != self.config.accumulation - 1:
            raise DynamixError(f"step() after micro-batch {j + 1} of {self.config.accumulation}: "
                               "call it once per optimizer step, after the last micro-batch")
        now = time.perf_counter()
        iv = self._interval
        before = self.sampler.plans.at(sl.step)       # the plan this step ran under
        full = self._is_full(sl)
        if full:
            c, m, st = self._t_backward_end - self._t_batch, now - self._t_backward_end, now - self._t_batch
            # step time from taking the batch: user pauses (eval) between steps excluded
            iv.per_step.append((c, m, st, sl.total))
            if self._detector is not None:
                change = self._detector.add(before.batch_sizes[self.rank], before.global_batch, c, st)
                if change is not None:
                    self._react_flag = 1
                    iv.since = max(len(iv.per_step) - change.steps_since, 0)
                    iv.changed = int(change.compute)
        iv.samples += sl.total
        if loss is not None:
            iv.loss += float(loss.detach() if isinstance(loss, torch.Tensor) else loss)
            iv.loss_n += 1
        if self._capture and self._local_sq:
            self._accumulate_gns(sl)
        self._local_sq.clear()
        self._capture = False
        self._t_last_step = now

        self.progress.update(sl.epoch, sl.end, sl.total, sl.sizes)
        # advance the consumed position
        epoch_end = sl.end >= self.sampler.dataset_size
        self._consumed = {"epoch": sl.epoch + (1 if epoch_end else 0), "cursor": 0 if epoch_end else sl.end,
                          "step": sl.step + 1}
        self._current = None
        if self._due(sl.step):
            self._decide(sl.step)
        after = self.sampler.plans.at(sl.step + 1)
        if after is not before or self.config.lr_rule == "adascale":
            self._apply_lr(after)
        if self.config.checkpoint_every and (sl.step + 1) % self.config.checkpoint_every == 0 and self.config.run_dir:
            self.save(Path(self.config.run_dir) / "checkpoint.pt")
        return after

    def _reset_react(self) -> None:
        """Forget the early-decision state (after a restore or a world-size change; the plan in
        force changed under it, and every rank must agree that no early decision is pending)."""
        if self._detector is not None:
            self._detector.reset()
        self._react_flag = 0
        self._react_ranks = None

    def _due(self, step: int) -> bool:
        """Decide after this step? Every ``interval_steps``, and at once when a rank flagged a
        change (``react``); a regular decision less than half an interval after an early one is
        skipped. Every rank computes the same answer (the flags came from one allgather)."""
        k, warm = self.config.interval_steps, self.config.warmup_steps
        if step + 1 < warm:
            self._react_ranks = None     # a change during warm-up is not decided on
            return False
        if self._react_ranks is not None:
            self._early_step = step
            return True
        return (step + 1) % k == 0 and step - self._early_step >= k // 2

    def _accumulate_gns(self, sl: StepSlice) -> None:
        n_ranks = sum(1 for s in sl.sizes if s > 0)
        if n_ranks < 2:
            return
        T, n_i = sl.total, sl.sizes[self.rank]
        sq = float(torch.stack(self._local_sq).sum())
        c = (T / n_i) * sq                     # (n_i/T) |g_i|^2 with g_i = local_acc * T / n_i
        iv = self._interval
        iv.gns_a += T * c / (n_ranks - 1)
        iv.gns_a2 += c / (n_ranks - 1)
        if self.rank == 0:
            g = float(sum(p.grad.detach().float().pow(2).sum() for p in self.model.parameters()
                          if p.grad is not None))
            iv.g_s += T * g / (n_ranks - 1)
            iv.g_sum += g
            iv.g_inv += g / (n_ranks - 1)
            iv.gns_steps += 1

    def _apply_lr(self, plan: Plan) -> None:
        f = lr_factor(self.config.lr_rule, plan.global_batch, self.base_global_batch,
                      self.noise.s_ema, self.noise.g2_ema)
        self.lr.apply(self.optimizer, f)

    # =====================================================================================
    # decision
    def _worker_row(self, step: int) -> np.ndarray:
        iv = self._interval
        plan = self.sampler.plans.at(step)
        # timings: means per step over the interval, or over the steps since this rank's detector
        # saw a change in it (the mixed mean would describe neither the old nor the new speed)
        recent = iv.per_step[iv.since:] if iv.since is not None else iv.per_step
        c, m, st = (float(x) for x in np.asarray(recent, dtype=float)[:, :3].mean(axis=0)) if recent else (math.nan,) * 3
        # the scatter of the per-step compute times: controllers act on a speed difference only
        # when it is outside this (controllers/model.py: ComputeModel.rel_uncertainty)
        c_se = (float(np.std(np.asarray(recent, dtype=float)[:, 0], ddof=1)) / math.sqrt(len(recent))
                if len(recent) >= 2 else math.nan)
        ws = WorkerStats(
            rank=self.rank, batch_size=plan.batch_sizes[self.rank], max_batch=self.bounds.max_batch[self.rank],
            steps=len(iv.per_step), compute_s=c / self.config.accumulation, step_s=st, comm_s=m,
            loss=iv.loss / iv.loss_n if iv.loss_n else float("nan"),
            changed=iv.changed if recent else 0, compute_se_s=c_se / self.config.accumulation,
        )
        if self.collector is not None:
            for key, value in self.collector.window().worker_stats_fields(len(iv.per_step) or None).items():
                setattr(ws, key, value)
        if self.metrics_fn is not None:
            self.metrics_fn(ws)
        return np.concatenate([ws.to_array(), [iv.gns_a, iv.gns_a2]])

    def _decide(self, step: int) -> None:
        rows = self.comm.gather_rows(self._worker_row(step))
        proposal: Plan | None = None
        record: dict[str, Any] = {}
        if self.rank == 0:
            assert rows is not None and self.controller is not None
            workers = [WorkerStats.from_array(r[:-N_EXTRA]) for r in rows]
            glob = self._global_stats(step, rows[:, -N_EXTRA:])
            state = ClusterState(plan=self.sampler.plans.latest, workers=workers, glob=glob, last_action=self._last_action)
            record = {"t": time.perf_counter() - self._t_start, "step": step + 1}
            if self._react_ranks is not None:
                record["early"] = {"ranks": self._react_ranks}
            t0 = time.perf_counter()
            proposal, proposed = self._propose(state, step, record)
            finetune = getattr(self.controller, "finetune_info", lambda: None)()
            if finetune is not None:   # online PPO fine-tuning (config.finetune): counters + the reward
                record.update(finetune=finetune, reward=finetune.get("reward"))
            record.update({"controller": self.controller.name, "decide_ms": 1e3 * (time.perf_counter() - t0),
                           "plan": list(self.plan.batch_sizes), "proposed": [float(x) for x in proposed],
                           "next_plan": proposal.to_dict(), "glob": glob, "workers": workers})
            # (dataclasses: the log's writer thread converts them, off the training loop)
        plan = self.comm.bcast_plan(proposal)
        if plan.version != self.sampler.plans.latest.version:
            self.sampler.plans.add(plan)
            if self.controller is not None:
                self._last_action = np.asarray(plan.batch_sizes, dtype=float) - np.asarray(
                    self.sampler.plans.at(step).batch_sizes, dtype=float)
        self.sampler.plans.prune(step)
        if self.rank == 0:
            self.log.decision(record, lr=float(self.optimizer.param_groups[0]["lr"]))
        self._interval = _Interval()
        if self._react_ranks is not None and self._detector is not None:
            self._detector.rebase()
        self._react_ranks = None
        # a flag raised in this very step is answered by this decision (its row already reports the
        # means since the change): sending it on would ask for a second decision one step later
        self._react_flag = 0

    def _propose(self, state: ClusterState, step: int, record: dict[str, Any]) -> tuple[Plan, Any]:
        """Rank 0: the controller's proposal through the guards and next_plan. Never raises
        for a controller fault: the plan stays and, after repeated faults, the fallback
        controller takes over (logged as an event)."""
        assert self.controller is not None
        current = self.sampler.plans.latest
        goodput = state.glob.samples_per_s * statistical_efficiency(
            current.global_batch, self.base_global_batch, state.glob.noise_scale)
        slowdown = unexplained_slowdown(self._prev_state, state)
        self._prev_state = state
        if math.isfinite(slowdown):
            record["cluster_slowdown"] = slowdown
        revert_B = math.nan
        if self.controller.guarded and self._guard.observe(goodput, self._changed_last, slowdown,
                                                                 float(current.global_batch)):
            self._fall_back(record, f"goodput fell more than {self.config.guard_drop:.0%} for "
                                    f"{self.config.guard_patience} intervals after {self.controller.name} decisions")
            # undo the decisions that lost the goodput: the fallback starts from the global batch the
            # guard's reference level was measured at (the fallback keeps the global batch it is given)
            revert_B = self._guard.baseline_B
            record["fallback"]["global_batch"] = revert_B
        try:
            proposed = self.controller.decide(state)
            total = float(sum(proposed))
            if math.isfinite(revert_B) and revert_B > 0 and total > 0:
                proposed = [float(x) * revert_B / total for x in proposed]
            notes: list[str] = []
            if not self.controller.exact:
                proposed, notes = limit_proposal(state, proposed, self._limits, self.bounds.min_batch)
            proposal = next_plan(current, proposed, self.bounds, step + 1 + self.lag_steps)
            record["reason"] = "; ".join([r for r in (self.controller.last_reason,) if r] + notes) or None
            if proposal is not current:
                sys.stderr.write(f"dynamix: step {step + 1}: plan {list(current.batch_sizes)} -> "
                                 f"{list(proposal.batch_sizes)} ({self.controller.name}): {record['reason']}\n")
            self._errors.ok()
        except Exception as exc:  # noqa: BLE001 - a controller fault must not stop training
            warnings.warn(f"dynamix: controller {self.controller.name!r} failed: {exc!r}; plan unchanged",
                          RuntimeWarning, stacklevel=2)
            record["controller_error"] = repr(exc)
            if self._errors.failed():
                self._fall_back(record, f"controller raised {self._errors.max_errors} times in a row: {exc!r}")
            proposed, proposal = list(current.batch_sizes), current
        self._changed_last = proposal is not current
        record["goodput"] = goodput
        return proposal, proposed

    def _fall_back(self, record: dict[str, Any], reason: str) -> None:
        old = self.controller.name if self.controller else "?"
        self.controller = make_controller(self.config.fallback_controller, self.bounds, self.config.base_batch)
        self._errors.ok()
        record["fallback"] = {"from": old, "to": self.controller.name, "reason": reason}
        warnings.warn(f"dynamix: falling back from {old!r} to {self.controller.name!r}: {reason}",
                      RuntimeWarning, stacklevel=3)

    def _global_stats(self, step: int, extra: np.ndarray) -> GlobalStats:
        iv = self._interval
        if iv.gns_steps:
            s_sum = float(extra[:, 0].sum()) - iv.g_s
            g2_sum = iv.g_sum - (float(extra[:, 1].sum()) - iv.g_inv)
            self.noise.update(s_sum / iv.gns_steps, g2_sum / iv.gns_steps)
        loss = iv.loss / iv.loss_n if iv.loss_n else float("nan")
        return GlobalStats(step=step + 1, noise_scale=self.noise.noise_scale, loss=loss,
                           noise_scale_rel_err=self.noise.rel_err, noise_scale_stable=self.noise.stable,
                           loss_trend=self.loss_trend.update(loss),
                           grad_var_trend=self.var_trend.update(self.noise.grad_variance),
                           samples_per_s=self._throughput())

    def _throughput(self) -> float:
        """Rank 0: samples per second of training steps (pauses between steps, e.g. evaluation,
        excluded) over the interval, or on an early decision over the steps since the change (the
        goodput guard takes its reference level from this: a level mixing the old cluster's
        steps with the new one's made a link_degrade PPO run fall back after its right move)."""
        iv = self._interval
        recent = iv.per_step
        if self._react_ranks is not None and self._detector is not None and recent:
            k = len(recent) - iv.since if iv.since is not None else self._detector.confirm
            recent = recent[-min(max(k, 1), len(recent)):]
        t = sum(p[2] for p in recent)
        if t > 0:
            return sum(p[3] for p in recent) / t
        elapsed = time.perf_counter() - iv.t0
        return iv.samples / elapsed if elapsed > 0 else float("nan")

    # =====================================================================================
    # checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": 1, "world_size": self.world, "config": self.config.to_dict(),
            "sampler": self.sampler.state_dict(self._consumed),
            "noise": self.noise.state_dict(), "loss_trend": self.loss_trend.state_dict(),
            "var_trend": self.var_trend.state_dict(), "lr_factor": self.lr.factor,
            "max_batch": list(self.bounds.max_batch),
            "controller": self.controller.state_dict() if self.controller is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any], allow_resize: bool = False) -> None:
        """Restore ``state_dict()``. With ``allow_resize`` (elastic jobs) a state written by
        another number of ranks is accepted and the plan is recomputed for this world."""
        resized = state.get("world_size") != self.world
        if resized and not allow_resize:
            raise DynamixError(f"checkpoint was written by {state.get('world_size')} ranks; this job has "
                               f"{self.world} (resize through the elastic path instead)")
        self.sampler.load_state_dict(state["sampler"])
        self._consumed = {k: int(state["sampler"][k]) for k in ("epoch", "cursor", "step")}
        self.noise.load_state_dict(state["noise"])
        self.loss_trend.load_state_dict(state["loss_trend"])
        self.var_trend.load_state_dict(state["var_trend"])
        self.lr.factor = float(state["lr_factor"])
        self._pending.clear()
        self._current = None
        self._interval = _Interval()
        self._reset_react()
        if resized:
            self.adapt_to_world()
            return
        self.bounds = dataclasses.replace(self.bounds, max_batch=tuple(state["max_batch"]))
        if self.controller is not None and state.get("controller") is not None:
            self.controller.update_bounds(self.bounds)
            self.controller.load_state_dict(state["controller"])

    def _bounds_for_world(self) -> PlanBounds:
        """Bounds from the config for the current world size (per-rank caps given for another
        world size fall back to their largest value on every rank)."""
        cfg = self.config
        caps = cfg.max_batch
        if isinstance(caps, tuple) and len(caps) != self.world:
            caps = max(caps)
        caps = caps if isinstance(caps, tuple) else (caps,) * self.world
        floor = cfg.min_global_batch_for(self.world)
        cap = cfg.max_global_batch_for(self.world)
        floor = min(floor, sum(caps), cap or floor)
        return PlanBounds(max_batch=caps, min_batch=cfg.min_batch, quantum=cfg.quantum,
                          max_global_batch=cap, min_global_batch=floor, deadband=cfg.deadband)

    def reconnect(self) -> None:
        """After Horovod was re-initialised (elastic reset): a communicator for the new world."""
        self.comm.free()
        self.comm = make_comm()
        self.rank, self.world = self.comm.rank, self.comm.size

    def adapt_to_world(self) -> None:
        """Re-plan for the current world size (after ``reconnect`` or a resized checkpoint):
        keep the global batch, split it evenly over the ranks from the next untrained step on,
        and rebuild the controller on the (possibly new) rank 0. The sampler keeps its
        position, so coverage stays exact-once."""
        cfg = self.config
        self.bounds = self._bounds_for_world()
        old = self.sampler.plans.latest
        sizes = split_global(old.global_batch, [1.0] * self.world, self.bounds)
        if old.world_size != self.world or tuple(sizes) != old.batch_sizes:
            self.sampler.plans = PlanLog(Plan(old.version + 1, tuple(sizes), self._consumed["step"]))
        self.controller = self._build_controller() if self.rank == 0 else None
        if self.rank == 0 and self.log.run_dir is None and cfg.run_dir:
            self.log = RunLogger(cfg.run_dir, tensorboard=cfg.tensorboard)
        self.progress = EpochProgress(self.sampler.dataset_size, enabled=cfg.progress and self.rank == 0)
        self._pending.clear()
        self._current = None
        self._interval = _Interval()
        self._reset_react()
        self._last_action = None
        if self.rank == 0:
            self.log.event({"step": self._consumed["step"], "world_change": {"world_size": self.world,
                                                                             "plan": list(sizes)}})

    def save(self, path: str | os.PathLike[str], **extra: Any) -> None:
        """Rank 0 writes model, optimizer and dynamix state atomically; collective (barrier)."""
        if self._current is not None:
            raise DynamixError("save() in the middle of a step: call it after dyn.step()")
        if self.rank == 0:
            payload = {"dynamix": self.state_dict(), "model": self.model.state_dict(),
                       "optimizer": self.optimizer.state_dict(), **extra}
            ckpt.save(path, payload)
            self.log.flush()       # the run log is complete up to the checkpoint
        self.comm.barrier()

    def load(self, path: str | os.PathLike[str], allow_resize: bool = False) -> dict[str, Any]:
        """Rank 0 reads the checkpoint and broadcasts it; every rank restores model,
        optimizer and dynamix state. Returns the payload (for the user's extra entries).
        With ``allow_resize`` a checkpoint from a job with another number of ranks resumes
        here: the global batch is kept and re-split over this world, coverage stays exact-once."""
        payload: Any = None
        err = None
        if self.rank == 0:
            try:
                payload = ckpt.load(path)
            except ckpt.CheckpointError as exc:
                err = str(exc)
        err = self.comm.bcast_object(err)
        if err:
            raise ckpt.CheckpointError(err)
        payload = self.comm.bcast_object(payload)
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.load_state_dict(payload["dynamix"], allow_resize=allow_resize)
        return payload

    def close(self) -> None:
        if self.collector is not None:
            self.collector.stop()
            self.collector = None
        self.log.close()
        self.progress.close()
        self.comm.free()


def _install_abort_on_uncaught(rank: int, world: int, abort: Callable[[int], None]) -> None:
    """An uncaught exception on any rank prints the rank and the error, then aborts the whole
    MPI job (as ``python -m mpi4py`` does), so the other ranks never hang in a collective."""
    previous = sys.excepthook
    if getattr(previous, "_dynamix", False):
        return

    def hook(etype: type[BaseException], value: BaseException, tb: Any) -> None:
        sys.stderr.write(f"dynamix: rank {rank} of {world} failed with {etype.__name__}: {value}; "
                         "aborting the job\n")
        previous(etype, value, tb)
        sys.stderr.flush()
        abort(1)

    hook._dynamix = True  # type: ignore[attr-defined]
    sys.excepthook = hook


class GuardedOptimizer:
    """``dyn.optimizer``: Horovod's DistributedOptimizer, whose ``step()`` first asks all ranks
    whether one ran out of memory (then the update is skipped and the step redone).
    Everything else is delegated to the Horovod optimizer."""

    def __init__(self, inner: Any, dyn: "Dynamix") -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_dyn", dyn)

    def step(self, closure: Any = None) -> Any:
        if self._dyn._before_optimizer_step():
            return None
        return self._inner.step(closure)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)


class _BatchSampler:
    """Adapts Dynamix's generator to DataLoader's ``batch_sampler`` protocol."""

    def __init__(self, dyn: Dynamix, epoch: int) -> None:
        self.dyn, self.epoch = dyn, epoch

    def __iter__(self) -> Iterator[list[int]]:
        for mb in self.dyn._generate(self.epoch):
            yield mb.tolist()
