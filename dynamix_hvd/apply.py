"""Apply: what every rank does to its training step under a plan.

``Weighting``   the loss weight n_i/T, applied in Horovod's own gradient hook: a compression
                wrapper whose ``compress`` runs right before each gradient's allreduce. On a
                step whose plan is uniform (every rank the same batch, no accumulation: n_i/T =
                1/N on every rank) it leaves the gradient alone and Horovod averages it
                (``op=Average``: the 1/N is applied by Horovod's background thread, as in a
                plain Horovod job); otherwise it scales ``p.grad`` in place (the rank's own
                accumulated buffer, which Horovod then sums in place). Horovod cannot take the
                weight as a ``prescale_factor``: it requires the factors to match across ranks.
                It takes the local norm on sampled steps and, for the probe gradient, lets
                ``FlagProbe`` keep its first element and poison it when this rank has a flag.
                Micro-batches of one step with different weights: before micro-batch j > 0
                the gradient accumulated so far is rescaled by w_{j-1}/w_j (only when they
                differ), so the single scale at the end gives sum_j w_j g_j exactly.
``FlagProbe``   the per-step flags (a rank ran out of memory; a rank's detector saw a change)
                with no collective of their own: a rank with a flag writes NaN into the first
                element of one gradient (the probe: the first parameter, whose gradient
                backward produces last) before Horovod reduces it. Every rank reads that one
                element of the reduced gradient in ``optimizer.step()``; the reduced values are
                the same on every rank, so every rank takes the same branch. Only when it is
                not finite (a flag, or a gradient that really is not finite) do the ranks
                allgather their flags and the probe element's local values, and the element is
                restored to its exact sum: an early decision costs nothing else, an
                out-of-memory step is discarded anyway. Per step: a one-element copy and a
                one-element read (on a GPU a 4-byte device-to-host copy after the allreduce).
                Needs an elementwise compression (none or fp16); with another the flags go as
                ``StepFlags``.
                On a step whose compression is the user's own (see ``Weighting.for_step``) the
                element is kept and poisoned from the probe parameter's post-accumulate-grad
                hook instead, which autograd runs right before Horovod's own hook submits the
                gradient: one Python call per step, whatever the number of parameters.
``StepFlags``   the fallback: the flag vector reduced with ``hvd.allreduce_async_`` beside the
                gradients and with their op, so Horovod fuses it into the gradients' allreduce;
                a Horovod tensor of its own every step (measured: 3-7% of a 2-3 ms step).
``oom_replan``  lower the caps of the ranks that ran out of memory and re-split the same step.
``apply_lr``    the LR rule for the plan in force.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from dynamix_hvd.data import PlanLog, StepSlice
from dynamix_hvd.errors import DynamixError
from dynamix_hvd.lr import LRScaler, lr_factor
from dynamix_hvd.plan import Plan, PlanBounds, split_global
from dynamix_hvd.wire import Flagged, flag_slots, read_flags, set_flags


class StepFlags:
    """The per-step flag vector (wire.py layout), allreduced beside the gradients with the same
    op as the gradients of the step (Sum, or Average on a uniform step): Horovod fuses only
    tensors with equal pre/postscale factors, so with the gradients' op the flags travel inside
    the gradients' fused allreduce instead of an MPI allreduce of their own. Averaged flags are
    multiplied back by the world size (small integers: exact after rounding)."""

    def __init__(self, hvd: Any, rank: int, world: int) -> None:
        self.hvd, self.rank, self.world = hvd, rank, world
        self._tensor = torch.zeros(flag_slots(world), dtype=torch.float32)
        self._np = self._tensor.numpy()
        self._handle: Any = None
        self._averaged = False

    @property
    def pending(self) -> bool:
        return self._handle is not None

    def submit(self, oom_batch: int, word: int, average: bool = False) -> None:
        if self._handle is not None:
            return
        set_flags(self._np, self.rank, self.world, oom_batch, word)
        self._averaged = average
        self._handle = self.hvd.allreduce_async_(self._tensor, name="dynamix.flags",
                                                 op=self.hvd.Average if average else self.hvd.Sum)

    def wait(self) -> tuple[np.ndarray | None, Flagged]:
        """(oom batch per rank or None, the ranks with each flag bit: wire.Flagged)."""
        if self._handle is None:
            raise RuntimeError("dynamix: the step's flags were never submitted")
        self.hvd.synchronize(self._handle)
        self._handle = None
        if not self._np.any():              # the common case: nothing to report
            return None, Flagged()
        return read_flags(self._np * self.world if self._averaged else self._np, self.world)


class FlagProbe:
    """One gradient element that carries the step's flags (see the module docstring). On a CPU
    tensor the element is read and written through a numpy view (about 1 us, against 2-3 us
    for each tensor indexing op), made once per step in ``compressing`` and read again by
    ``raised`` when the reduced gradient is the same tensor on the same storage (Horovod reduces
    it in place without a compression; fp16's decompression gives it a new storage); on
    a GPU through tensor ops (asynchronous until ``raised`` reads the reduced element back)."""

    def __init__(self, param: torch.nn.Parameter) -> None:
        self.param = param
        self.sent = False                          # its gradient was handed to Horovod in this step
        self.armed = False                         # this step the hook below keeps/poisons (no wrapper does)
        self._flagged: Callable[[], bool] = lambda: False
        self._submits: Callable[[], bool] = lambda: True
        self._handle: Any = None
        self._index = (0,) * param.dim()           # its first element, whatever the strides
        self._saved: torch.Tensor | float | None = None   # that element before the allreduce
        self._tensor: torch.Tensor | None = None   # the gradient handed over, and its numpy view
        self._view: np.ndarray | None = None
        self._ptr = 0

    def reset(self) -> None:
        self.sent = False

    def attach(self, flagged: Callable[[], bool], submits: Callable[[], bool]) -> None:
        """Keep and poison the element from the parameter's post-accumulate-grad hook on armed
        steps. ``flagged``: does this rank raise a flag; ``submits``: will Horovod's hook, which
        autograd runs right after this one, hand the gradient to the allreduce (the last
        backward of the step)."""
        self.detach()
        self._flagged, self._submits = flagged, submits
        self._handle = self.param.register_post_accumulate_grad_hook(self._on_grad)

    def detach(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _on_grad(self, param: torch.nn.Parameter) -> None:
        if self.armed and not self.sent and self._submits():
            self.compressing(param.grad, self._flagged())

    def submit_missing(self) -> None:
        """Before Horovod's ``synchronize`` submits the gradients backward did not produce: on
        an armed step whose probe gradient was not produced (an unused first parameter, a rank
        that ran out of memory before backward), keep and poison it as Horovod's zero gradient."""
        if self.armed and not self.sent:
            p = self.param
            if p.grad is None:
                p.grad = torch.zeros_like(p)       # what Horovod would submit for it
            self.compressing(p.grad, self._flagged())

    def _host(self, t: torch.Tensor) -> np.ndarray | None:
        """A numpy view of a CPU tensor with a numpy dtype (None: use tensor ops)."""
        if t.is_cpu and t.dtype in _NUMPY_FLOATS:
            return (t.detach() if t.requires_grad else t).numpy()
        return None

    def compressing(self, tensor: torch.Tensor, flag: bool) -> None:
        """The probe's gradient, weighted, is about to be reduced: keep the element (a copy on
        the tensor's device, no synchronisation) and poison it when this rank has a flag."""
        if tensor.is_cpu and tensor.dtype in _NUMPY_FLOATS and not tensor.requires_grad:
            host: np.ndarray | None = tensor.numpy()
        else:
            host = None
        self._tensor, self._view, self._ptr = tensor, host, tensor.data_ptr()
        if host is not None:
            self._saved = float(host[self._index])
            if flag:
                host[self._index] = math.nan
        else:
            self._saved = tensor[self._index].clone()
            if flag:
                tensor[self._index] = math.nan
        self.sent = True

    def raised(self) -> bool:
        """After the allreduce: is the reduced element not finite (some rank flagged)?"""
        g = self.param.grad
        if g is None:
            return False
        if g is self._tensor and g.data_ptr() == self._ptr and self._view is not None:
            # the view made in ``compressing`` (fp16's decompression set_()s a new storage)
            return not math.isfinite(self._view[self._index])
        host = self._host(g)
        return not math.isfinite(float(host[self._index] if host is not None else g[self._index]))

    def local_value(self) -> float:
        return float(self._saved) if self._saved is not None else 0.0

    def restore(self, values: np.ndarray, average: bool) -> None:
        """The element's exact reduction from every rank's kept value (sum, or mean on a
        uniform step)."""
        total = float(np.sum(values, dtype=np.float64))
        self.param.grad[self._index] = total / len(values) if average else total


_NUMPY_FLOATS = (torch.float32, torch.float64, torch.float16)


class Weighting:
    """Horovod compression wrapper applying the n_i/T weight (see the module docstring)."""

    def __init__(self, inner: Any, n_params: int, scale: Callable[[], float],
                 on_local: Callable[[torch.Tensor], None] | None, last: Callable[[], None] | None,
                 probe: FlagProbe | None = None, flagged: Callable[[], bool] | None = None) -> None:
        self.inner = inner            # the user's compression (Compression.none by default)
        self.n_params = n_params      # gradients Horovod reduces per step
        self.scale = scale            # the weight to apply now (float)
        self.on_local = on_local      # sampled-step norm capture, or None
        self.last = last              # called once all gradients of the step are submitted
        self.seen = 0                 # gradients handed to Horovod in this step
        self.average = False          # this step: Horovod averages (uniform plan), no weight here
        self.probe = probe            # the gradient element that carries the flags, or None
        self.flagged = flagged        # does this rank have a flag to raise in this step?

    def reset(self, average: bool = False) -> None:
        self.seen = 0
        self.average = average
        if self.probe is not None:
            self.probe.reset()

    def for_step(self, capturing: bool) -> Any:
        """The compression object for this step (after ``reset``): this wrapper when it has a
        weight to apply, statistics to take or a flag tensor to send after the last gradient;
        else the user's compression itself, with the probe (if any) armed to keep and poison its
        element from its gradient hook. Horovod looks its ``_compression`` up per gradient, so
        the engine installs the one returned."""
        whole = not self.average or capturing or self.last is not None
        if self.probe is not None:
            self.probe.armed = not whole
        return self if whole else self.inner

    def compress(self, tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        if not self.average:
            w = self.scale()
            if w != 1.0:
                tensor.mul_(w)
        if self.on_local is not None:
            self.on_local(tensor)
        probe = self.probe
        if probe is not None and tensor is probe.param.grad:
            probe.compressing(tensor, bool(self.flagged and self.flagged()))
        self.seen += 1
        if self.seen == self.n_params and self.last is not None:
            self.last()
        return self.inner.compress(tensor)

    def decompress(self, tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return self.inner.decompress(tensor, ctx)


def rescale_accumulated(params: list[torch.nn.Parameter], factor: float) -> None:
    """Gradient accumulation with micro-batches of different weights (see the module docstring)."""
    grads = [p.grad for p in params if p.grad is not None]
    if grads and factor != 1.0:
        torch._foreach_mul_(grads, factor)


def scale_local(params: list[torch.nn.Parameter], w: float) -> None:
    """One rank without Horovod's hooks (world size 1): apply the weight before the update."""
    rescale_accumulated(params, w)


def horovod_optimizer(hvd: Any, optimizer: Any, cfg: Any, named_parameters: Any, compression: Any) -> Any:
    """Horovod's DistributedOptimizer summing gradients (``op=hvd.Sum``: each rank's gradient
    carries its n_i/T weight); a user-wrapped one is accepted if it sums and accumulates alike."""
    if not (hasattr(optimizer, "_allreduce_delay") and hasattr(optimizer, "synchronize")):
        return hvd.DistributedOptimizer(optimizer, named_parameters=list(named_parameters),
                                        compression=compression or hvd.Compression.none, op=hvd.Sum,
                                        backward_passes_per_step=cfg.accumulation)
    if getattr(optimizer, "op", None) != hvd.Sum:
        raise DynamixError(
            "the optimizer was wrapped with hvd.DistributedOptimizer(op=Average) (or Adasum); dynamix "
            "weights each rank's gradient by n_i/T and needs op=hvd.Sum. Pass the plain optimizer and "
            "dynamix wraps it, or wrap it with op=hvd.Sum.")
    if optimizer.backward_passes_per_step != cfg.accumulation:
        raise DynamixError(f"optimizer backward_passes_per_step={optimizer.backward_passes_per_step} but "
                           f"config accumulation={cfg.accumulation}; they must match")
    return optimizer


def horovod_backward_passes(optimizer: Any, hint: Any = None) -> tuple[int, Any]:
    """How many backward passes of this step reached Horovod's hooks before ``synchronize()``:
    Horovod counts each parameter down from ``backward_passes_per_step`` and submits it at 0,
    so the most-used parameter's count is the number of passes (a parameter some micro-batches
    leave unused counts fewer, and none counts more: Horovod raises first). Returns it with the
    parameter that gave it, checked first next time (O(1) per step when it counted them all)."""
    delay, k = optimizer._allreduce_delay, optimizer.backward_passes_per_step   # noqa: SLF001
    if hint is not None and delay.get(hint) == 0:
        return k, hint
    best = min(optimizer._requires_update, key=delay.__getitem__, default=None)  # noqa: SLF001
    return (k, None) if best is None else (k - delay[best], best)


def oom_replan(oom: np.ndarray, bounds: PlanBounds, plans: PlanLog, sl: StepSlice,
               quantum: int) -> tuple[PlanBounds, Plan]:
    """Caps of the ranks that ran out of memory lowered 10% (at least a quantum) below the
    batch that failed; the same step re-split under the new caps, same global batch where
    they allow. Pure."""
    for r in np.flatnonzero(oom > 0):
        b = int(oom[r])
        lowered = ((b - max(quantum, int(np.ceil(0.1 * b)))) // quantum) * quantum
        bounds = bounds.with_max(int(r), min(bounds.max_batch[r], lowered))
    old = plans.at(sl.step)
    sizes = split_global(old.global_batch, old.batch_sizes, bounds)
    return bounds, Plan(plans.latest.version + 1, tuple(sizes), sl.step)


def hvd_synchronize(inner: Any) -> None:
    """Horovod's own ``synchronize`` of its optimizer (the instance's is the hook's,
    ``horovod.guard_optimizer``)."""
    type(inner).synchronize(inner)


def skip_and_replan(dyn: Any, oom: np.ndarray) -> None:
    """``optimizer.step()`` when some rank ran out of memory (Horovod engine): Horovod's
    allreduces of the discarded gradients drained, the update skipped, then the engine-neutral
    re-plan (``DynamixCore._replan_after_oom``: caps lowered, the same step re-split and redone)."""
    inner = dyn.hvd_optimizer
    if not inner._synchronized:              # noqa: SLF001 - drain Horovod's allreduces of the discarded gradients
        hvd_synchronize(inner)
    inner._synchronized = False              # noqa: SLF001 - the step is skipped, not taken later
    inner.zero_grad()
    dyn._replan_after_oom(oom)


def apply_lr(scaler: LRScaler, optimizer: Any, rule: str, plan: Plan, base_global_batch: int,
             s_ema: float, g2_ema: float) -> None:
    scaler.apply(optimizer, lr_factor(rule, plan.global_batch, base_global_batch, s_ema, g2_ema))
