"""The engine-neutral part of the hook: everything ``Dynamix`` does that does not depend on how
gradients are reduced. The engines (horovod.py: Horovod's DistributedOptimizer; ddp.py: PyTorch
DistributedDataParallel under torchrun) add the n_i/T weight in their own gradient path, the
per-step flags beside the gradients, and the collectives' transport (comm.py).

    batches / loader   this rank's micro-batches (local state, sampler)
    report             loss trend, out-of-memory report
    _after_update      after the optimizer's update: record the step in O(1), decide when due
                       (gather rows -> rank 0 decides -> broadcast the plan; with decision_lag the
                       plan applies that many steps later, the controller in rank 0's thread and
                       the messages travelling during the steps between: inflight.py), LR rule,
                       checkpoint
    _replan_after_oom  a rank ran out of memory: lower its cap and redo the same step
    state_dict / save / load / adapt_to_world / close
"""
from __future__ import annotations

import atexit
import dataclasses
import math
import os
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from dynamix_hvd import bnstats, lifecycle
from dynamix_hvd.apply import apply_lr, oom_replan
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.controllers import Controller
from dynamix_hvd.data import ExactOnceSampler, PlanLog, StepSlice
from dynamix_hvd.decide import Decider
from dynamix_hvd.errors import DynamixError, OutOfMemoryError
from dynamix_hvd.inflight import DecideThread, InFlight
from dynamix_hvd.localstate import LocalState
from dynamix_hvd.lr import LRScaler
from dynamix_hvd.observe import EpochProgress, RunLogger
from dynamix_hvd.plan import Plan
from dynamix_hvd.records import WorkerStats
from dynamix_hvd.wire import decode_rows, encode_row


def load_config(config: DynamixConfig | None, controller: Controller | str | None,
                config_kwargs: dict[str, Any]) -> tuple[DynamixConfig, Controller | None]:
    """The validated-later config (kwargs / TOML / DYNAMIX_* env) and a controller object, if given."""
    if isinstance(controller, str):  # a name: goes through the validated config
        config_kwargs["controller"] = controller
        controller = None
    if config is None:
        config = DynamixConfig.load(**config_kwargs)
    elif config_kwargs:
        config = dataclasses.replace(config, **config_kwargs)
    return config, controller


def resolve_config(config: DynamixConfig, controller: Controller | None, comm: Any) -> DynamixConfig:
    """The automatic settings (``gns`` None) made concrete from rank 0's controller, the same on
    every rank: a controller object may exist on rank 0 only (one broadcast, at construction)."""
    if config.gns is not None:
        return config
    if lifecycle.under_horovod_elastic():
        # a Horovod elastic worker joining later would wait in this broadcast while the others are
        # in state.sync() (as for the initial-state broadcasts, horovod.py): each rank decides from
        # its own controller argument, so pass the same controller (a name) on every rank
        return config.resolved(controller)
    gns = comm.bcast_object(config.resolved(controller).gns if comm.rank == 0 else None)
    return dataclasses.replace(config, gns=bool(gns))


class DynamixCore(lifecycle.DeprecatedLoop):
    """Engine-neutral state and per-step logic; an engine calls ``_setup`` from its constructor,
    applies the weight ``local.scale`` in its gradient path and calls ``_after_update``."""

    comm: Any
    optimizer: Any

    def _setup(self, model: torch.nn.Module, dataset_size: int, config: DynamixConfig, comm: Any,
               params: list[torch.nn.Parameter], controller: Controller | None, emulator: Any,
               metrics_fn: Callable[[WorkerStats], None] | None) -> None:
        self.comm = comm
        self.rank, self.world = comm.rank, comm.size
        lifecycle.check_same_config(comm, config, dataset_size)    # before any collective that depends on it
        self.config = cfg = resolve_config(config, controller, comm).validate(self.world)
        self.model, self.emulator, self.metrics_fn = model, emulator, metrics_fn
        self.bounds = lifecycle.bounds_for_world(cfg, self.world, model)
        lifecycle.warn_batchnorm(model, self.bounds, self.rank)
        self.sampler = ExactOnceSampler(dataset_size, Plan.uniform(self.world, cfg.base_batch), seed=cfg.seed,
                                        shuffle=cfg.shuffle, accumulation=cfg.accumulation)
        self.base_global_batch = cfg.base_global_batch or cfg.base_batch * self.world
        self.log = RunLogger(cfg.run_dir if self.rank == 0 else None, tensorboard=cfg.tensorboard)
        self._decider = self._make_decider(controller) if self.rank == 0 else None
        self._decide_thread = DecideThread()   # rank 0's controller beside training (decision_lag >= 1)
        self._inflight: InFlight | None = None
        self.lr = LRScaler(cfg.lr_rule)
        self.lag_steps = 0          # steps a DataLoader generates ahead (agreed by all ranks)
        self.progress = EpochProgress(dataset_size, enabled=cfg.progress and self.rank == 0)
        self.local = LocalState(cfg, self.rank, self.world, self.sampler, params, self.progress)
        self.local.on_unstepped = self._settle_unstepped
        self._t_start = time.perf_counter()
        self.collector = lifecycle.start_collector(cfg.collector_period_ms, self.rank) if cfg.collector else None
        self._excepthook = lifecycle.AbortOnUncaught(self.rank, self.world, self.comm.abort)
        self._watchdog = lifecycle.start_watchdog(self)    # stall_timeout_s: ends a job stuck on a lost peer
        # SIGTERM / SIGUSR1: every rank checkpoints and stops after the same step (not under Horovod
        # elastic, whose driver stops and replaces workers itself)
        self._stopper = lifecycle.StopOnSignal(cfg.stop_on_signal and not lifecycle.under_horovod_elastic())
        self.local.stop_signal = self._stopper.get
        # close() also runs when the hook is garbage collected or the interpreter exits, so the
        # run log is complete without an explicit close(). At exit it runs before the engine's
        # own shutdown (registered after hvd.init()): a decision still in flight is waited for
        # there, else a rank that finishes first shuts the engine down while a slower one has
        # yet to send its part (tests/launch/scripts/slow_root_exit.py)
        self._res: dict[str, Any] = {}
        self._finalizer = weakref.finalize(self, _release, self._res)
        self._at_exit = _close_at_exit(weakref.ref(self))
        atexit.register(self._at_exit)
        self._track()

    def _track(self) -> None:
        self._res.update(log=self.log, progress=self.progress, comm=self.comm, collector=self.collector,
                         excepthook=self._excepthook, watchdog=self._watchdog, decide_thread=self._decide_thread,
                         stopper=self._stopper)

    def _make_decider(self, controller: Controller | None) -> Decider:
        return Decider(self.config, self.bounds, self.base_global_batch, controller, log_event=self.log.event)

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
    def _begin_micro(self) -> None:
        """The user takes the next micro-batch (an engine may add to this)."""
        self.local.begin_micro()

    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        """This rank's sample indices, one array per micro-batch, for (the rest of) ``epoch``."""
        self.local.check_epoch(epoch)
        # (the local state's own method when the engine adds nothing to it: one call less per step)
        begin = self.local.begin_micro if type(self)._begin_micro is DynamixCore._begin_micro else self._begin_micro
        yield from self.local.generate(epoch, begin)

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
        dl = DataLoader(dataset, batch_sampler=BatchSampler(self.local, epoch), **dataloader_kwargs)
        for batch in dl:
            self._begin_micro()
            yield batch

    # =====================================================================================
    # the step
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
            if self._oom_signal_sent():
                raise DynamixError(
                    f"rank {self.rank}: report(oom=True) after this step's gradients were handed to the "
                    "allreduce (the flag that makes every rank skip the step has left): report an "
                    "out-of-memory error caught in the step's forward or backward")
            self.local.oom_batch = max(self.local.oom_batch, n, 1)
            self.local.gns.cancel()

    def sync_batchnorm_stats(self) -> int:
        """Collective, before evaluating or saving: every rank's BatchNorm running statistics become
        the global batch's, each rank weighted by its local batch (bnstats.py). Returns the number
        of BatchNorm layers synchronised. Nothing changes in training."""
        return bnstats.sync_batchnorm_stats(self.model, self.comm, float(self.plan.batch_sizes[self.rank]))

    def _oom_signal_sent(self) -> bool:
        """Has this step's out-of-memory flag already left (an engine's flag transport)?"""
        return False

    def _on_local(self, grad: torch.Tensor) -> None:
        if self.local.gns.capturing:
            self.local.gns.on_local(grad)

    def _check_step_call(self) -> None:
        loc = self.local
        if loc.current is None:
            raise DynamixError("optimizer.step() called without a batch from dyn.batches() / dyn.loader()")
        j = loc.current[1]
        if j != self.config.accumulation - 1:
            raise DynamixError(f"optimizer.step() after micro-batch {j + 1} of {self.config.accumulation}: "
                               "call it once per step, after the last micro-batch")

    def _after_update(self, t_entry: float) -> None:
        """After the update of a trained step: bookkeeping, the decision when due, the LR rule,
        the automatic checkpoint, the stop (a rank got a stop signal). ``t_entry``: when this
        rank's own compute of the step ended."""
        self._after_step(*self.local.record_step(t_entry, self._reduced_grads))

    def _settle_unstepped(self) -> None:
        """The last micro-batch's step got no ``optimizer.step()`` (``LocalState.settle_unstepped``):
        after the reduction its update was left out, and the step's own work follows as after an
        update (decisions, checkpoint, stop: the same collectives on every rank, so the flags of
        the next step can say whether every rank left it out); before it, StepSkippedError."""
        self._after_step(*self.local.settle_unstepped())

    def _after_step(self, sl: StepSlice, before: Plan) -> None:
        """What follows every step, updated or left out: the decision when due, the LR rule, the
        automatic checkpoint, the stop."""
        loc = self.local
        step = sl.step
        if self._inflight is not None:
            if loc.react_ranks is not None:     # a rank flagged a change: decide on it now, not on older rows
                self._drop_decision("a rank flagged a change")
            else:
                self._advance_decision(step)
        if self._inflight is None and loc.due(step):
            self._decide(step)
        after = self.sampler.plans.at(step + 1)
        cfg = self.config
        if after is not before or cfg.lr_rule == "adascale":
            est = loc.gns.estimator
            apply_lr(self.lr, self.optimizer, cfg.lr_rule, after, self.base_global_batch, est.s_ema, est.g2_ema)
        every = cfg.checkpoint_every
        if every and (step + 1) % every == 0 and cfg.run_dir:
            self.save(Path(cfg.run_dir) / "checkpoint.pt")
        if loc.stop_ranks is not None:     # some rank got SIGTERM / SIGUSR1: every rank, after this step
            lifecycle.stop_after_step(self, step, loc.stop_ranks)

    def _reduced_grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.local.params if p.grad is not None]

    def _replan_after_oom(self, oom: np.ndarray) -> None:
        """Some rank ran out of memory in this step (the engine has already discarded the
        update): lower the ranks' caps, re-split the same step and redo it."""
        if self.lag_steps > 0:
            raise DynamixError(f"rank(s) {np.flatnonzero(oom).tolist()} ran out of memory at batch sizes "
                               f"{oom[oom > 0].astype(int).tolist()}; redoing a step is not possible while a "
                               "DataLoader prefetches (num_workers > 0): lower max_batch or use num_workers=0")
        self._drop_decision("out of memory")      # (planned on caps and a plan the re-split replaces)
        loc = self.local
        sl = loc.current[0]  # type: ignore[index]
        self.bounds, plan = oom_replan(oom, self.bounds, self.sampler.plans, sl, self.config.quantum)
        self.sampler.plans = PlanLog(plan)
        self.sampler.epoch, self.sampler.cursor, self.sampler.step = sl.epoch, sl.start, sl.step
        if self._decider is not None:
            self._decider.update_bounds(self.bounds)
            self.log.event({"step": sl.step, "oom": {"ranks": np.flatnonzero(oom > 0).tolist(),
                                                      "batch": oom[oom > 0].astype(int).tolist(),
                                                      "max_batch": list(self.bounds.max_batch),
                                                      "plan": list(plan.batch_sizes)}})
        loc.gns.cancel()
        loc.current = None
        loc.redo = True

    # =====================================================================================
    # decision: gather rows -> rank 0 decides -> broadcast the plan
    def _engine_fields(self, ws: WorkerStats) -> None:
        """An engine's own measurements of the interval (e.g. DDP's per-bucket timings)."""

    def _worker_row(self, step: int) -> np.ndarray:
        ws = self.local.worker_stats(step, self.bounds.max_batch[self.rank])
        if self.collector is not None:
            for key, value in self.collector.window().worker_stats_fields(ws.steps or None).items():
                setattr(ws, key, value)
        self._engine_fields(ws)
        if self.metrics_fn is not None:
            self.metrics_fn(ws)
        return encode_row(ws, self.local.gns.sum_tc, self.local.gns.sum_tg)

    def _decide(self, step: int) -> None:
        """Gather the rows after ``step``; rank 0's controller decides; the plan is broadcast and
        applied: all after ``step`` (``decision_lag`` 0, and every early decision: a rank flagged
        a change, so the plan should not wait), or after ``step + decision_lag`` with the
        messages and rank 0's controller overlapping the steps between (inflight.py)."""
        self._inflight = self._start_decision(step)
        if self._inflight.finish_step <= step:
            self._finish_decision(step)

    def _start_decision(self, step: int) -> InFlight:
        """Every rank's row leaves after ``step`` (a blocking gather, or one that travels during
        the next step when the lag is >= 2); a new interval begins. Collective."""
        loc = self.local
        lag = self.config.decision_lag if loc.react_ranks is None else 0    # (react_ranks: the same on every rank)
        row = self._worker_row(step)
        fl = InFlight(step, step + lag, send_step=step + lag - 1 if lag >= 3 else None)
        totals = loc.gns.take_interval()
        if self._decider is not None:   # (the interval's means: the meter starts a new interval below)
            fl.context = (totals, loc.meter.mean_loss(), loc.meter.throughput(loc.recent_steps()))
            fl.record = {"t": time.perf_counter() - self._t_start, "step": step + 1}
            if loc.react_ranks is not None:
                fl.record["early"] = {"ranks": loc.react_ranks}
            fl.next_due = step + 1 + self.config.next_interval(loc.meter.means()[2])
        if lag >= 2:
            fl.rows = self.comm.gather_rows_async(row)
        else:
            self._begin_controller(fl, self.comm.gather_rows(row), threaded=lag > 0)
        loc.decided(step + 1)
        if lag > 0:   # until the broadcast brings rank 0's: the same on every rank
            loc.next_due = step + 1 + self.config.interval_steps
        return fl

    def _begin_controller(self, fl: InFlight, rows: np.ndarray | None, threaded: bool) -> None:
        """Rank 0, with the gathered rows: the noise-scale update and the controller (in the
        decide thread when ``threaded``); nothing on the other ranks."""
        d = self._decider
        if d is None:
            return
        assert rows is not None
        workers, extras = decode_rows(rows)
        totals, mean_loss, throughput = fl.context
        self.local.gns.update(extras[:, 0], extras[:, 1], totals)
        glob = d.global_stats(fl.step, self.local.gns.estimator, mean_loss, throughput)
        fl.job = self._decide_thread.run(d.decide, workers, glob, self.sampler.plans.latest,
                                         fl.finish_step + 1 + self.lag_steps, fl.record, threaded=threaded)

    def _rows_arrived(self, fl: InFlight, threaded: bool) -> None:
        """Every rank: wait for the travelling gather; rank 0 starts its controller."""
        pending, fl.rows = fl.rows, None
        self._begin_controller(fl, pending.wait(), threaded)

    def _advance_decision(self, step: int) -> None:
        """After each step while a decision is in flight: the rows arrived (rank 0 starts its
        controller), the plan's broadcast starts, the plan is applied: each at the step the lag
        set for it, the same on every rank."""
        fl = self._inflight
        assert fl is not None
        if fl.rows is not None and step > fl.step:
            self._rows_arrived(fl, threaded=step < fl.finish_step)
        if fl.send_step is not None and fl.plan is None and step >= fl.send_step:
            fl.plan = self.comm.bcast_plan_async(fl.proposal(), fl.next_due)
        if step >= fl.finish_step:
            self._finish_decision(step)

    def _finish_decision(self, step: int) -> None:
        """Complete the decision in flight (the stages not done yet, rank 0 waiting for its
        controller) and apply its plan; collective. ``step``: the step trained last."""
        fl, self._inflight = self._inflight, None
        assert fl is not None
        d = self._decider
        if fl.rows is not None:
            self._rows_arrived(fl, threaded=False)
        if fl.plan is not None:
            plan, self.local.next_due = fl.plan.wait()
        else:
            plan, self.local.next_due = self.comm.bcast_plan(fl.proposal(), fl.next_due)
        if self.config.lr_rule == "adascale":   # every rank scales its LR from rank 0's estimate
            est = self.local.gns.estimator
            est.s_ema, est.g2_ema = self.comm.bcast_object((est.s_ema, est.g2_ema) if d is not None else None)
        if plan.version != self.sampler.plans.latest.version:
            self.sampler.plans.add(plan)
            if d is not None:
                d.applied(plan, self.sampler.plans.at(fl.step))
        self.sampler.plans.prune(step)
        if d is not None:
            self.log.decision(fl.record, lr=float(self.optimizer.param_groups[0]["lr"]))

    def _drop_decision(self, reason: str) -> None:
        """Forget the decision in flight (every rank, at the same step: an early decision, an
        out-of-memory re-plan, a restore, a world change, ``close()``): every rank waits for the
        messages still travelling, rank 0 for its controller; the plan is discarded and the
        event logged."""
        fl, self._inflight = self._inflight, None
        if fl is not None:
            fl.wait_messages(strict=reason not in ("world change", "closed"))
            fl.settle()
            if self._decider is not None:
                self.log.event({"step": self.step_count, "decision_dropped": {"gathered": fl.step + 1, "reason": reason}})

    def _settle_decision(self) -> None:
        """Rank 0's controller is not deciding after this (its state may be read); the plan
        stays in flight."""
        if self._inflight is not None:
            self._inflight.settle()

    # =====================================================================================
    # checkpoint, resizing, shutdown (lifecycle.py)
    def state_dict(self) -> dict[str, Any]:
        """The hook's part of a checkpoint. A decision in flight (``decision_lag``) is not in it
        unless ``save()`` wrote it (save broadcasts it first: it is collective, this is not)."""
        self._settle_decision()
        return lifecycle.hook_state(self)

    def load_state_dict(self, state: dict[str, Any], allow_resize: bool = False) -> None:
        """Restore ``state_dict()``. With ``allow_resize`` a state written by another number of
        ranks is accepted and the plan is recomputed for this world."""
        self._drop_decision("restore")
        lifecycle.restore_hook_state(self, state, allow_resize)

    def adapt_to_world(self) -> None:
        """Re-plan for the current world size (after a resized checkpoint or an elastic reset):
        the global batch kept and split evenly from the next untrained step on, the controller
        rebuilt on the (possibly new) rank 0; the sampler keeps its position (exact-once)."""
        self._drop_decision("world change")
        lifecycle.adapt_to_world(self)

    def save(self, path: str | os.PathLike[str], **extra: Any) -> bool:
        """Rank 0 writes model, optimizer and dynamix state atomically; collective. A failed write
        follows ``checkpoint_on_error`` (lifecycle.save); True when written."""
        cur = self.local.current
        if cur is not None and cur[1] == self.config.accumulation - 1 and self.local.reduced():
            self._settle_unstepped()           # its update left out after the reduction (GradScaler)
        if self.local.current is not None:
            raise DynamixError("save() in the middle of a step: call it after optimizer.step()")
        if self._inflight is not None:    # (collective, like save: the checkpoint holds its plan)
            self._finish_decision(self.step_count - 1)
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
        ``sys.excepthook``. Idempotent; also run at garbage collection and interpreter exit.
        A decision still in flight (``decision_lag``) is dropped: its plan would apply to steps
        not trained (a ``decision_dropped`` event, reason "closed"); every rank then waits for the
        others (the same decision is in flight on all of them: it started at the same step), so
        none shuts its engine down while another has yet to send its part of it."""
        atexit.unregister(self._at_exit)
        in_flight = self._inflight is not None
        self._drop_decision("closed")
        if in_flight and self.world > 1:
            try:
                self.comm.barrier()
            except Exception:   # noqa: BLE001 - the world it started in is gone (as wait_messages)
                pass
        self._track()
        self._finalizer()
        self.collector = None


def _close_at_exit(ref: weakref.ReferenceType[Any]) -> Callable[[], None]:
    """An exit handler that closes the hook if it is still alive (it does not keep it alive)."""
    def close() -> None:
        dyn = ref()
        if dyn is not None:
            dyn.close()
    return close


def _release(res: dict[str, Any]) -> None:
    if res.get("collector") is not None:
        res["collector"].stop()
    res["decide_thread"].close()
    res["log"].close()
    res["progress"].close()
    res["comm"].free()
    res["excepthook"].restore()
    res["stopper"].restore()
    if res.get("watchdog") is not None:
        res["watchdog"].close()


class BatchSampler:
    """Adapts the rank's batch generator to DataLoader's ``batch_sampler`` protocol."""

    def __init__(self, local: LocalState, epoch: int) -> None:
        self.local, self.epoch = local, epoch

    def __iter__(self) -> Iterator[list[int]]:
        for mb in self.local.generate(self.epoch):
            yield mb.tolist()
