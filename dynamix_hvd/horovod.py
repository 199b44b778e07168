"""The hook a user adds to a Horovod PyTorch script: the loop stays as Horovod's.

    hvd.init()
    dyn = Dynamix(model, optimizer, dataset_size=len(train_set), base_batch=32, controller="proportional")
    optimizer = dyn.optimizer                              # instead of hvd.DistributedOptimizer(...)
    for epoch in range(epochs):
        for idx in dyn.batches(epoch):                     # this rank's b_i sample indices
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            optimizer.zero_grad(); loss.backward(); optimizer.step()
            dyn.report(loss=loss)                          # optional: the loss trend

``Dynamix`` is the Horovod engine over the engine-neutral core (core.py: batches, step
bookkeeping, decisions, checkpoints; shared with the DDP engine, ddp.py) and the stage modules:
  measure.py    step meter (ring buffers) and the noise scale from sampled steps
  apply.py      the n_i/T weight in Horovod's gradient hook, the per-step flags beside the
                gradient allreduce, the out-of-memory re-plan, the LR rule
  localstate.py this rank's position, step in flight, per-step record, whether a decision is due
  decide.py     rank 0: controller, guards, next plan (no MPI)
  wire.py       row, plan and flag formats; comm.py moves them
  lifecycle.py  bounds, BatchNorm floor, collector, excepthook, stop signals, checkpoints
Per step (inside ``optimizer.step()``, ``guard_optimizer``): read the flags that rode on the gradients (a probe element),
apply the update, record the step in O(1); every ``interval_steps`` steps, at least
``min_decision_s`` apart (or at once when a rank's detector flags a change), gather the rows,
decide on rank 0, broadcast the plan with the step of the next decision; after a step whose
flags say some rank got a stop signal, checkpoint and raise StopTraining on every rank.

Why the weight: Horovod sums gradients (``op=hvd.Sum``); rank i's loss is its mean over n_i
samples and its gradient is multiplied by n_i/T (T: the step's samples over all ranks), so the
summed gradient is exactly the mean gradient over all T samples, the one big batch's update.
"""
from __future__ import annotations

import time
import types
from typing import Any, Callable, Iterable

import numpy as np
import torch

from dynamix_hvd import lifecycle
from dynamix_hvd.apply import (FlagProbe, StepFlags, Weighting, horovod_backward_passes, horovod_optimizer,
                               hvd_synchronize, rescale_accumulated, skip_and_replan)
from dynamix_hvd.comm import make_comm
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.controllers import Controller
from dynamix_hvd.core import DynamixCore, load_config
from dynamix_hvd.errors import DynamixError
from dynamix_hvd.records import WorkerStats
from dynamix_hvd.wire import Flagged, flag_ranks

class Dynamix(DynamixCore):
    """Dynamic per-rank batch sizes for a Horovod PyTorch job. Create after ``hvd.init()``."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, dataset_size: int,
                 config: DynamixConfig | None = None, *, controller: Controller | str | None = None,
                 emulator: Any = None, comm: Any = None, named_parameters: Iterable | None = None,
                 compression: Any = None, broadcast_initial_state: bool | None = None,
                 metrics_fn: Callable[[WorkerStats], None] | None = None, **config_kwargs: Any) -> None:
        import horovod.torch as hvd

        if not hvd.is_initialized():
            raise DynamixError("call hvd.init() before creating Dynamix(...)")
        self.hvd = hvd
        config, controller = load_config(config, controller, config_kwargs)
        comm = make_comm(comm)
        if comm.size != hvd.size():
            raise DynamixError(f"the MPI communicator has {comm.size} ranks but Horovod has {hvd.size()}; "
                               "pass comm= the communicator given to hvd.init(comm=...)")
        cfg = config.validate(comm.size)
        self.hvd_optimizer = inner = horovod_optimizer(hvd, optimizer, cfg, named_parameters or model.named_parameters(),
                                                       compression)
        if broadcast_initial_state is None:
            # Horovod elastic workers (HOROVOD_ELASTIC=1): state.sync() broadcasts instead; a worker
            # joining later would deadlock on these broadcasts while the others are in sync()
            broadcast_initial_state = not lifecycle.under_horovod_elastic()
        if broadcast_initial_state:
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(inner, root_rank=0)
        self.optimizer = guard_optimizer(inner, self)
        params = [p for g in inner.param_groups for p in g["params"] if p.requires_grad]
        self._setup(model, dataset_size, cfg, comm, params, controller, emulator, metrics_fn)
        # the n_i/T weight, sampled gradient norms and the step's flags: in Horovod's own hook
        self._weighting = Weighting(inner._compression, len(inner._requires_update),  # noqa: SLF001
                                    scale=lambda: self.local.scale,
                                    on_local=self._on_local if self.config.gns else None, last=self._submit_flags,
                                    flagged=lambda: bool(self.local.oom_batch or self.local.flag_word()))
        inner._compression = self._compression = self._weighting     # noqa: SLF001 - installed per step
        self.local.on_new_step = self._new_step
        self.local.reduced = lambda: self._flags_read is not False   # (set once the step's gradients were reduced)
        self._averaging = False     # Horovod's op is Average (uniform step) rather than Sum
        self._flags_read: np.ndarray | None | bool = False    # this step's flags: not read yet
        self._counted: Any = None   # the parameter that counted every backward pass of the last step
        self._rehook()

    def _rehook(self) -> None:
        """Horovod's hooks and the step's flags for the current world (also after a resize):
        a probe gradient element (``FlagProbe``) when the compression is elementwise, else the
        flag tensor (``StepFlags``)."""
        inner = self.hvd_optimizer
        self._hooked = bool(inner._requires_update)   # noqa: SLF001 - Horovod registered its hooks
        self._flags: StepFlags | None = None
        if self._weighting.probe is not None:
            self._weighting.probe.detach()
        self._weighting.probe = None
        self._weighting.last = None
        if not (self.world > 1 and self._hooked and self.config.step_flags):
            return
        if self._weighting.inner in (self.hvd.Compression.none, self.hvd.Compression.fp16):
            reduced = inner._requires_update     # noqa: SLF001
            first = next(p for g in inner.param_groups for p in g["params"] if p in reduced)
            probe = self._weighting.probe = FlagProbe(first)
            delay = inner._allreduce_delay       # noqa: SLF001 - Horovod's hook submits when it reaches 0
            probe.attach(self._weighting.flagged or (lambda: False),
                         (lambda: True) if self.config.accumulation == 1 else (lambda: delay[first] == 1))
        else:
            self._flags = StepFlags(self.hvd, self.rank, self.world)
            self._weighting.last = self._submit_flags    # the flag tensor goes after the last gradient

    # =====================================================================================
    # the step: inside optimizer.step()
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
        w = self._weighting
        w.reset(avg)
        comp = w.for_step(loc.gns.capturing)   # only what this step needs in Horovod's hook
        if comp is not self._compression:
            self.hvd_optimizer._compression = self._compression = comp   # noqa: SLF001
        self._flags_read = False

    def _submit_flags(self) -> None:
        if self._flags is not None:
            self._flags.submit(self.local.oom_batch, self.local.flag_word(), self._averaging)

    def _optimizer_step(self, closure: Any = None) -> Any:
        t_entry = time.perf_counter()
        inner = self.hvd_optimizer
        self._check_step_call()
        probe = self._weighting.probe
        if (probe is not None or self._flags is not None) and not inner._synchronized:  # noqa: SLF001
            self._hvd_synchronize()             # submits what backward did not
        oom = self._read_flags()
        if oom is not None:
            skip_and_replan(self, oom)
            return None
        self._weigh_locally()
        hvd_step = type(inner).step              # Horovod's (the instance's step is this method, maybe wrapped)
        if inner._synchronized:                  # noqa: SLF001 - Horovod's skip_synchronize(), without a context manager
            inner._should_synchronize = False    # noqa: SLF001
            try:
                out = hvd_step(inner, closure)
            finally:
                inner._should_synchronize = True  # noqa: SLF001
        else:
            out = hvd_step(inner, closure)       # (calls the instance's synchronize: ``_synchronize``)
        self._after_update(t_entry)
        return out

    def _read_flags(self) -> np.ndarray | None:
        """Once per step, after the gradients' allreduce (from ``optimizer.step()``, or from
        ``optimizer.synchronize()`` so that a user clipping the gradients sees the restored
        probe): the out-of-memory batch per rank when some rank ran out of memory, else None;
        sets ``local.react_ranks`` when some rank asks for an early decision."""
        if self._flags_read is not False:
            return self._flags_read
        loc = self.local
        oom: np.ndarray | None = None
        probe = self._weighting.probe
        if probe is not None:
            if not probe.raised():               # the same answer on every rank: a reduced value
                loc.clear_flags()
                self._flags_read = None          # the common case: no flag anywhere
                return None
            oom = self._exchange_flags(probe)
        elif self._flags is not None:
            self._submit_flags()                 # no-op: normally sent with the last gradient
            oom, flagged = self._flags.wait()
            loc.flags_read(flagged)
        else:
            if loc.react_flag:
                loc.react_ranks = [self.rank]
            if loc.stop_signal() and self.world == 1:    # (several ranks without a flag transport: not seen)
                loc.stop_ranks = [self.rank]
            if loc.oom_batch:
                oom = np.zeros(self.world, dtype=np.int64)
                oom[self.rank] = loc.oom_batch
        loc.clear_flags()
        self._flags_read = oom if oom is not None and np.any(oom > 0) else None
        return self._flags_read

    def _exchange_flags(self, probe: FlagProbe) -> np.ndarray | None:
        """The probe came back not finite: every rank's flags and kept probe value (one small
        allgather, only on such steps). With an early-decision flag and no out-of-memory one
        the probe element is restored exactly and the step goes on; returns the out-of-memory
        batch per rank (None when no rank ran out of memory)."""
        loc = self.local
        got = self.comm.allgather_floats([float(loc.oom_batch), float(loc.flag_word()), probe.local_value()])
        oom = np.rint(got[:, 0]).astype(np.int64)
        flagged = flag_ranks(got[:, 1])
        if np.any(oom > 0):
            loc.flags_read(flagged._replace(react=None))      # (the step is redone: no early decision on it)
            return oom
        if flagged != Flagged():
            loc.flags_read(flagged)
            probe.restore(got[:, 2], self._averaging)
        return None     # no flag: the gradient itself is not finite, as the user's model made it

    def _oom_signal_sent(self) -> bool:
        probe = self._weighting.probe
        return (probe is not None and probe.sent) or (self._flags is not None and self._flags.pending)

    def _synchronize(self) -> None:
        """``optimizer.synchronize()``: Horovod's, then (one rank without hooks) the weight."""
        self._hvd_synchronize()
        if self.local.current is not None:
            self._read_flags()
        self._weigh_locally()

    def _hvd_synchronize(self) -> None:
        """Horovod's own synchronize; first a rank that left a micro-batch without backward
        stops (``LocalState.check_backward``: Horovod would submit the gradient all the same),
        and the probe's element goes out if backward did not submit it (an unused probe
        parameter: Horovod would submit its gradient without the flags)."""
        inner, probe = self.hvd_optimizer, self._weighting.probe
        if not inner._synchronized:              # noqa: SLF001
            if self._hooked and self.local.current is not None:   # every micro-batch's backward reached the hooks
                passes, self._counted = horovod_backward_passes(inner, self._counted)
                self.local.check_backward(passes, self.config.accumulation)
            if probe is not None:
                probe.submit_missing()
        hvd_synchronize(inner)

    def _weigh_locally(self) -> None:
        """One rank without Horovod's hooks (no allreduce to hook into): apply the weight here."""
        if not self._hooked and self.local.scale != 1.0:
            rescale_accumulated(self.local.params, self.local.scale)
            self.local.scale = 1.0

    # =====================================================================================
    # checkpoint, resizing, shutdown (lifecycle.py)
    def reconnect(self) -> None:
        """After Horovod was re-initialised (elastic reset): a communicator for the new world."""
        if self._watchdog is not None:
            self._watchdog.close()
        self.comm.free()
        self.comm = make_comm()
        self.rank, self.world = self.comm.rank, self.comm.size
        self._watchdog = lifecycle.start_watchdog(self)
        self._track()

    def close(self) -> None:
        """The probe's gradient hook removed, then the core's ``close``."""
        weighting = getattr(self, "_weighting", None)
        if weighting is not None and weighting.probe is not None:
            weighting.probe.detach()
        super().close()


def guard_optimizer(inner: Any, dyn: Dynamix) -> Any:
    """``dyn.optimizer``: Horovod's DistributedOptimizer itself (a ``torch.optim.Optimizer`` of the
    user's class, so LR schedulers, checkpoints and ``isinstance`` work), whose ``step()`` also
    reads the step's flags (an out-of-memory rank: the update is skipped and the step redone),
    records the step and takes the decision when one is due, and whose ``synchronize()`` also
    reads the flags (a user clipping gradients sees the restored probe element). Both are set on
    the instance: a scheduler that wraps ``step`` rebinds the same function to the same object,
    and Horovod's own class (its ``step`` calls ``super(self.__class__, self)``) is unchanged."""

    def step(opt: Any, closure: Any = None) -> Any:
        return dyn._optimizer_step(closure)

    def synchronize(opt: Any) -> None:
        dyn._synchronize()

    step.__doc__ = f"Horovod's step with dynamix's per-step work. {type(inner).step.__doc__ or ''}".strip()
    inner.step = types.MethodType(step, inner)
    inner.synchronize = types.MethodType(synchronize, inner)
    return inner
