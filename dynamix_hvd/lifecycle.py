"""Lifecycle: what happens around training rather than in a step. Bounds for a world size, the
BatchNorm floor, the metric collector (at low priority), the fault handling (the
abort-on-uncaught-exception hook and the stop-signal handlers installed by the constructor and
restored by ``close()``, the stop after a stop signal, the check that every rank has the same
settings, the stall watchdog), and checkpoint save / load.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable

import torch

from dynamix_hvd import checkpoint as ckpt
from dynamix_hvd.config import (ConfigError, DynamixConfig, disagreement, rank_fingerprint, schema_disagreement,
                                schema_fingerprint)
from dynamix_hvd.data import PlanLog
from dynamix_hvd.errors import DynamixError, OutOfMemoryError, StopTraining
from dynamix_hvd.measure import GradNoise
from dynamix_hvd.observe import EpochProgress, RunLogger
from dynamix_hvd.plan import Plan, PlanBounds, split_global
from dynamix_hvd.stats import Trend


def bounds_for_world(cfg: DynamixConfig, world: int, model: torch.nn.Module | None = None) -> PlanBounds:
    """Bounds from the config for ``world`` ranks (per-rank caps given for another world size
    fall back to their largest value on every rank); the minimum local batch is raised to
    ``bn_min_batch`` when the model has (non-synchronised) BatchNorm layers."""
    caps = cfg.max_batch
    if isinstance(caps, tuple) and len(caps) != world:
        caps = max(caps)
    caps = caps if isinstance(caps, tuple) else (caps,) * world
    floor = cfg.min_global_batch_for(world)
    cap = cfg.max_global_batch_for(world)
    floor = min(floor, sum(caps), cap or floor)
    min_batch = cfg.min_batch
    if model is not None and has_local_batchnorm(model):
        min_batch = max(min_batch, min(cfg.bn_min_batch, cfg.base_batch, min(caps)))
    return PlanBounds(max_batch=caps, min_batch=min_batch, quantum=cfg.quantum,
                      max_global_batch=cap, min_global_batch=floor, deadband=cfg.deadband)


def has_local_batchnorm(model: torch.nn.Module) -> bool:
    """BatchNorm layers whose statistics come from the local batch only (not SyncBatchNorm)."""
    from torch.nn.modules.batchnorm import _BatchNorm

    sync_types: tuple[type, ...] = (torch.nn.SyncBatchNorm,)
    hvd = sys.modules.get("horovod.torch")   # only when the job uses Horovod (not imported for DDP)
    if hvd is not None and hasattr(hvd, "SyncBatchNorm"):
        sync_types += (hvd.SyncBatchNorm,)
    return any(isinstance(m, _BatchNorm) and not isinstance(m, sync_types) for m in model.modules())


def warn_batchnorm(model: torch.nn.Module, bounds: PlanBounds, rank: int) -> None:
    if rank == 0 and has_local_batchnorm(model):
        warnings.warn(f"dynamix: the model has BatchNorm layers with per-rank statistics; the smallest local "
                      f"batch is raised to {bounds.min_batch} (bn_min_batch). Use hvd.SyncBatchNorm for "
                      "statistics over the global batch.", RuntimeWarning, stacklevel=3)


def start_collector(period_ms: int, rank: int) -> Any:
    """The native NIC/CPU/memory sampler at the lowest CPU priority (nice 19 on its own thread,
    so it never competes with training); None (one warning) when it cannot run here."""
    try:
        from dynamix_hvd.metrics import Collector, CollectorConfig

        before = _thread_ids()
        collector = Collector(CollectorConfig(period_s=period_ms / 1000.0)).start()
        for tid in _thread_ids() - before:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, 19)   # Linux: a thread id renices that thread
            except OSError:
                pass
        return collector
    except Exception as exc:  # noqa: BLE001 - metrics are optional, training is not
        warnings.warn(f"dynamix: native metric collector unavailable on rank {rank} ({exc}); "
                      "NIC/CPU/memory/allreduce metrics will be absent", RuntimeWarning, stacklevel=3)
        return None


def _thread_ids() -> set[int]:
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


class AbortOnUncaught:
    """An uncaught exception on any rank prints the rank and the error, then aborts the whole
    MPI job (as ``python -m mpi4py`` does), so the other ranks never hang in a collective.
    ``restore()`` puts the previous ``sys.excepthook`` back (``Dynamix.close()``)."""

    def __init__(self, rank: int, world: int, abort: Callable[[int], None]) -> None:
        self.previous = sys.excepthook
        self.installed = False
        if getattr(self.previous, "_dynamix", False):
            return

        previous = self.previous

        def hook(etype: type[BaseException], value: BaseException, tb: Any) -> None:
            sys.stderr.write(f"dynamix: rank {rank} of {world} failed with {etype.__name__}: {value}; "
                             "aborting the job\n")
            previous(etype, value, tb)
            sys.stderr.flush()
            abort(1)

        hook._dynamix = True  # type: ignore[attr-defined]
        self.hook = hook
        sys.excepthook = hook
        self.installed = True

    def restore(self) -> None:
        if self.installed and sys.excepthook is self.hook:
            sys.excepthook = self.previous
        self.installed = False


def under_horovod_elastic() -> bool:
    """Is this process a worker of elastic horovodrun (workers join later and are replaced)?"""
    return os.environ.get("HOROVOD_ELASTIC", "") == "1"


class StopOnSignal:
    """SIGTERM (what torchrun and batch schedulers send before a kill) and SIGUSR1 (what mpirun
    forwards to every rank; SLURM's ``--signal``) become a flag: ``get()`` is the signal got, 0
    before. The step's flags carry it to every rank, which then checkpoint and stop after the
    same step (``stop_after_step``). Installed only over a signal's default action and only in
    the main thread; a second signal of the same kind takes the default action (the process
    ends at once). ``restore()`` puts the default back (``Dynamix.close()``)."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self, enabled: bool) -> None:
        self.signum = 0
        self.installed: list[int] = []
        if not enabled or threading.current_thread() is not threading.main_thread():
            return
        for s in self.SIGNALS:
            if signal.getsignal(s) is signal.SIG_DFL:
                signal.signal(s, self._handle)
                self.installed.append(s)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum == signum:          # asked twice: the default action, now
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signum = self.signum or signum

    def get(self) -> int:
        return self.signum

    def restore(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for s in self.installed:
                if signal.getsignal(s) == self._handle:
                    signal.signal(s, signal.SIG_DFL)
        self.installed = []


def stop_after_step(dyn: Any, step: int, ranks: list[int]) -> None:
    """Some rank got a stop signal (``stop_on_signal``) and every rank knows it after this same
    step (the step's flags): checkpoint to rank 0's ``run_dir`` (collective), log a ``stop``
    event and leave the training loop with StopTraining (exit code 75); the job resumes from the
    file. ``dyn``: the ``Dynamix`` instance."""
    run_dir = dyn.config.run_dir if dyn.rank == 0 else None     # (it may be set on rank 0 alone)
    path = dyn.comm.bcast_object(os.path.join(run_dir, "checkpoint.pt") if run_dir else None)
    where = path if path is not None and dyn.save(path) else None
    sig = dyn.local.stop_signal()
    dyn.local.stop_ranks = None     # (the signal stays: caught, the next step stops again)
    dyn.log.event({"step": step + 1, "stop": {"ranks": ranks, "checkpoint": where}})
    dyn.log.flush()
    if dyn.rank == 0 or sig:
        got = f"this rank got {signal.Signals(sig).name}" if sig else f"rank(s) {ranks} got a stop signal"
        sys.stderr.write(f"dynamix: rank {dyn.rank} stops after step {step + 1}: {got}; "
                         + (f"checkpoint {where} (resume: dyn.load(path))\n" if where else
                            "no checkpoint written (" + ("its write failed" if path else "no run_dir") + ")\n"))
        sys.stderr.flush()
    raise StopTraining(step + 1, where, ranks)


def check_same_config(comm: Any, config: DynamixConfig, dataset_size: int) -> None:
    """Raise ConfigError on every rank when the ranks run other dynamix_hvd versions or their
    settings or data set sizes differ (two allgathers of hashes, before any collective that
    depends on them; config.RANK0_ONLY lists what may differ). Not under Horovod elastic: a
    worker joining later would wait here alone."""
    if comm.size < 2 or under_horovod_elastic():
        return
    msg = schema_disagreement(comm.allgather_floats(schema_fingerprint()), comm.rank)
    if msg is not None:
        raise ConfigError(msg)
    table = comm.allgather_floats(rank_fingerprint(config, dataset_size))
    msg = disagreement(table, comm.rank, {**config.to_dict(), "dataset_size": dataset_size})
    if msg is not None:
        raise ConfigError(msg)


def start_watchdog(dyn: Any) -> Any:
    """The stall watchdog (watchdog.py) of this rank, or None: ``stall_timeout_s`` is 0, a
    single rank, or Horovod elastic (a worker joining later would deadlock on the address
    exchange, and elastic handles lost workers itself). Collective when it starts."""
    from dynamix_hvd.watchdog import Watchdog

    timeout = float(dyn.config.stall_timeout_s)
    if timeout <= 0 or dyn.world < 2 or under_horovod_elastic():
        return None
    ref = weakref.ref(dyn)        # the thread must not keep the hook alive (close() at collection)

    def step() -> int | None:
        d = ref()
        return None if d is None else d.step_count

    return Watchdog.start(dyn.comm, timeout, step, dyn.comm.abort)


def hook_state(dyn: Any) -> dict[str, Any]:
    """The hook's part of a checkpoint (``Dynamix.state_dict()``)."""
    d = dyn._decider
    return {
        "version": 1, "world_size": dyn.world, "config": ckpt.to_plain(dyn.config.to_dict()),   # a record only
        "sampler": dyn.sampler.state_dict(dyn.local.consumed),
        "noise": dyn.local.gns.estimator.state_dict(),
        "loss_trend": (d.loss_trend if d else Trend()).state_dict(),
        "var_trend": (d.var_trend if d else Trend()).state_dict(), "lr_factor": float(dyn.lr.factor),
        "max_batch": [int(b) for b in dyn.bounds.max_batch],
        "controller": d.state_dict() if d is not None else None,
    }


def restore_hook_state(dyn: Any, state: dict[str, Any], allow_resize: bool) -> None:
    """``Dynamix.load_state_dict``: position, plans, estimators, LR factor, controller."""
    resized = state.get("world_size") != dyn.world
    if resized and not allow_resize:
        raise DynamixError(f"checkpoint was written by {state.get('world_size')} ranks; this job has "
                           f"{dyn.world} (resize through the elastic path instead)")
    dyn.sampler.load_state_dict(state["sampler"])
    dyn.local.consumed = {k: int(state["sampler"][k]) for k in ("epoch", "cursor", "step")}
    dyn.local.gns.estimator.load_state_dict(state["noise"])
    if dyn._decider is not None:
        dyn._decider.loss_trend.load_state_dict(state["loss_trend"])
        dyn._decider.var_trend.load_state_dict(state["var_trend"])
    dyn.lr.factor = float(state["lr_factor"])
    dyn.local.reset()
    if resized:
        adapt_to_world(dyn)
        return
    dyn.bounds = dataclasses.replace(dyn.bounds, max_batch=tuple(state["max_batch"]))
    if dyn._decider is not None and state.get("controller") is not None:
        dyn._decider.update_bounds(dyn.bounds)
        dyn._decider.load_state_dict(state["controller"])


def adapt_to_world(dyn: Any) -> None:
    """Re-plan for the current world size (``Dynamix.adapt_to_world``)."""
    cfg, loc = dyn.config, dyn.local
    dyn.bounds = bounds_for_world(cfg, dyn.world, dyn.model)
    old = dyn.sampler.plans.latest
    sizes = split_global(old.global_batch, [1.0] * dyn.world, dyn.bounds)
    if old.world_size != dyn.world or tuple(sizes) != old.batch_sizes:
        dyn.sampler.plans = PlanLog(Plan(old.version + 1, tuple(sizes), loc.consumed["step"]))
    if dyn.rank == 0 and dyn.log.run_dir is None and cfg.run_dir:
        dyn.log = RunLogger(cfg.run_dir, tensorboard=cfg.tensorboard)
    dyn._decider = dyn._make_decider(None) if dyn.rank == 0 else None
    dyn.progress = loc.progress = EpochProgress(dyn.sampler.dataset_size, enabled=cfg.progress and dyn.rank == 0)
    loc.rank, loc.world = dyn.rank, dyn.world
    loc.gns = GradNoise(dyn.rank, dyn.world, cfg.gns_every, cfg.gns_beta, cfg.gns_samples)
    dyn._rehook()                    # the engine re-attaches its gradient path to the new world
    loc.reset()
    dyn._track()
    if dyn.rank == 0:
        dyn.log.event({"step": loc.consumed["step"], "world_change": {"world_size": dyn.world, "plan": list(sizes)}})


class DeprecatedLoop:
    """``Dynamix``'s calls of the loop before issue 21, kept working as deprecated aliases."""

    def backward(self, loss: torch.Tensor | None, oom: bool = False) -> None:
        """Deprecated: call ``loss.backward()``. Kept working: the weight is applied in Horovod's
        hook either way; an out-of-memory error (from torch, the emulator, or ``oom=True``) is
        caught and reported as ``report(oom=True)``."""
        deprecated("dyn.backward(loss)", "call loss.backward(); the n_i/T weight is applied in Horovod's hook")
        if self.local.current is None:
            raise DynamixError("backward() called before taking a batch from batches()/loader()")
        n = self.local.current[2]
        try:
            if oom:
                raise OutOfMemoryError(self.rank, n)
            if self.emulator is not None:
                self.emulator.before_backward(n, time.perf_counter() - self.local.t_batch)
            if loss is None or n == 0:
                (sum(p.sum() for p in self.local.params) * 0.0).backward()   # Horovod's hooks still fire
            else:
                loss.backward()
        except (OutOfMemoryError, torch.OutOfMemoryError) as exc:
            if not self.config.oom_redo:
                raise
            warnings.warn(f"dynamix: rank {self.rank} out of memory at batch {n} ({exc}); redoing the step",
                          RuntimeWarning, stacklevel=2)
            self.report(oom=True)

    def step(self, loss: torch.Tensor | float | None = None) -> Plan:
        """Deprecated: the step is recorded inside ``optimizer.step()``; pass the loss with
        ``dyn.report(loss=...)``. Kept working: records ``loss`` and returns the plan."""
        deprecated("dyn.step(loss)", "optimizer.step() records the step; use dyn.report(loss=loss)")
        if loss is not None and not self.local.redo:
            self.local.meter.add_loss(loss)
        return self.plan


def save(path: str | os.PathLike[str], rank: int, payload_fn: Callable[[], dict[str, Any]],
         flush: Callable[[], None], barrier: Callable[[], None], hook: Any = None) -> bool:
    """Rank 0 writes the payload atomically (temporary name, fsync, rename); collective.

    With ``hook`` (the ``Dynamix`` instance: its ``comm``, ``config.checkpoint_on_error``, ``log``
    and ``step_count``) rank 0 broadcasts the outcome instead of a plain barrier, so a failed write
    (full disk, quota, I/O error; the previous checkpoint stays intact) is handled alike on every
    rank: ``"stop"`` raises ``CheckpointWriteError`` everywhere (the job ends cleanly, no rank left
    waiting), ``"continue"`` warns on rank 0, logs a ``checkpoint_error`` event and returns False
    (the next checkpoint retries). Returns True when the checkpoint was written."""
    if hook is None:
        if rank == 0:
            ckpt.save(path, payload_fn())
            flush()        # the run log is complete up to the checkpoint
        barrier()
        return True
    err: tuple[str, bool] | None = None
    if rank == 0:
        try:
            ckpt.save(path, payload_fn())
        except ckpt.CheckpointError as exc:    # not written (disk) or not plain data (a producer's bug)
            err = (str(exc), isinstance(exc, ckpt.CheckpointWriteError))
        else:
            flush()
    got = hook.comm.bcast_object(err)      # also the barrier: the file is complete when this returns
    if got is None:
        return True
    err, is_write = got
    if not is_write:
        raise ckpt.CheckpointError(f"{err} (raised on rank {rank}: no checkpoint was written)")
    if hook.config.checkpoint_on_error != "continue":
        raise ckpt.CheckpointWriteError(f"{err} (rank {rank} stops: checkpoint_on_error='stop'; set it to "
                                        "'continue' to train on without this checkpoint)")
    if rank == 0:
        warnings.warn(f"dynamix: {err}; training goes on (checkpoint_on_error='continue'), the next "
                      "checkpoint retries", RuntimeWarning, stacklevel=3)
        hook.log.event({"step": int(hook.step_count), "checkpoint_error": {"path": str(path), "error": err}})
    return False


def load(path: str | os.PathLike[str], rank: int, bcast_object: Callable[[Any], Any]) -> dict[str, Any]:
    """Rank 0 reads the checkpoint and broadcasts it (an unreadable file raises on every rank)."""
    payload: Any = None
    err = None
    if rank == 0:
        try:
            payload = ckpt.load(path)
        except ckpt.CheckpointError as exc:
            err = str(exc)
    err = bcast_object(err)
    if err:
        raise ckpt.CheckpointError(err)
    return bcast_object(payload)


_LOCK = threading.Lock()
_WARNED: set[str] = set()


def deprecated(name: str, instead: str) -> None:
    """One DeprecationWarning per process and name."""
    with _LOCK:
        if name in _WARNED:
            return
        _WARNED.add(name)
    warnings.warn(f"dynamix: {name} is deprecated; {instead}", DeprecationWarning, stacklevel=3)
