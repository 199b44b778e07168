"""Measure: what each rank records per step, at O(1) cost and without allocation.

``StepMeter``  per-step compute / comm / step seconds and samples of one decision interval in a
               preallocated ring (one list per column), running sums for the whole interval,
               the loss (kept as a tensor, converted once per decision: no device sync per step),
               and where this rank's change detector placed a change.
``GradNoise``  the gradient noise scale from *sampled* steps: the step right before each
               regular decision and every k-th step before it, k = ``every`` (``gns_every``) or
               less when the decision interval is short, so that each decision gets at least
               ``MIN_SAMPLES`` sampled steps where the interval holds that many (with 5 of 10
               steps, mnist1d_resnet's estimate drifted 15% from the every-step one). On a
               sampled step the squared norm of each local gradient is taken in the engine's
               gradient hook (one reduction over the gradient, no copy); after the allreduce
               each rank takes the squared norm of its share (1/N of the elements) of the
               reduced gradient, so no rank does a full extra pass. Both partial sums travel in
               the decision row. Other steps cost nothing. The per-interval means go through the
               tested estimator ``stats.gns_step_estimates`` and its EMA.
"""
from __future__ import annotations

import math
import time
from typing import Any, Sequence

import numpy as np
import torch

from dynamix_hvd.stats import NoiseScaleEstimator, gns_step_estimates

NAN = float("nan")


class StepMeter:
    """One decision interval's per-step timings (ring of ``capacity`` steps) and running sums."""

    def __init__(self, capacity: int = 256) -> None:
        cap = self._cap = max(int(capacity), 8)
        # compute, comm, step seconds; samples: one preallocated list per column (a store into
        # a list costs a fraction of a numpy row view and four numpy scalar stores)
        self._cols: tuple[list[float], ...] = tuple([0.0] * cap for _ in range(4))
        self.reset()

    def reset(self) -> None:
        self.n = 0                   # full steps recorded in this interval
        self._sum = [0.0, 0.0, 0.0, 0.0]
        self._sum_cc = 0.0           # sum of squared compute seconds (its standard error)
        self.samples = 0             # samples of all steps (full or not) in this interval
        self.since: int | None = None   # index of the first step after a detected change
        self.changed = 0             # 1 if that change was in this rank's own compute time
        self.loss: Any = None        # sum of reported losses (a tensor or a float)
        self.loss_n = 0
        self.t0 = time.perf_counter()

    def add(self, compute_s: float, comm_s: float, step_s: float, total: int) -> None:
        i = self.n % self._cap
        c = self._cols
        c[0][i] = compute_s
        c[1][i] = comm_s
        c[2][i] = step_s
        c[3][i] = total
        s = self._sum
        s[0] += compute_s
        s[1] += comm_s
        s[2] += step_s
        s[3] += total
        self._sum_cc += compute_s * compute_s
        self.n += 1

    def mark_change(self, steps_since: int, compute: bool) -> None:
        self.since = max(self.n - steps_since, 0)
        self.changed = int(compute)

    def add_loss(self, loss: Any) -> None:
        if isinstance(loss, torch.Tensor):
            loss = loss.detach()
            if loss.numel() != 1:
                loss = loss.float().mean()
        self.loss = loss if self.loss is None else self.loss + loss
        self.loss_n += 1

    def mean_loss(self) -> float:
        return float(self.loss) / self.loss_n if self.loss_n else NAN

    def _rows(self, first: int) -> np.ndarray:
        """Ring rows of steps first..n-1 (clipped to what the ring still holds)."""
        cap = self._cap
        first = max(first, self.n - cap)
        idx = [i % cap for i in range(first, self.n)]
        return np.array([[col[i] for i in idx] for col in self._cols], dtype=np.float64).reshape(4, -1).T

    def means(self) -> tuple[float, float, float]:
        """Mean (compute, comm, step) seconds per step over the interval, or over the steps since
        a detected change (a mean mixing both speeds would describe neither)."""
        if self.n == 0:
            return NAN, NAN, NAN
        if self.since is None:
            return self._sum[0] / self.n, self._sum[1] / self.n, self._sum[2] / self.n
        rows = self._rows(self.since)
        if len(rows) == 0:
            return NAN, NAN, NAN
        m = rows[:, :3].mean(axis=0)
        return float(m[0]), float(m[1]), float(m[2])

    def compute_se(self) -> float:
        """Standard error of the mean compute time reported by ``means()`` (per-step scatter /
        sqrt(steps)); NaN below two steps."""
        if self.since is None:
            n = self.n
            if n < 2:
                return NAN
            var = max(self._sum_cc - self._sum[0] * self._sum[0] / n, 0.0) / (n - 1)
            return math.sqrt(var / n)
        rows = self._rows(self.since)
        if len(rows) < 2:
            return NAN
        return float(np.std(rows[:, 0], ddof=1)) / math.sqrt(len(rows))

    def throughput(self, recent: int | None = None) -> float:
        """Samples per second of training steps over the interval (pauses between steps
        excluded), or over the last ``recent`` steps; the wall clock when no full step ran."""
        if self.n:
            if recent is None:
                t, n = self._sum[2], self._sum[3]
            else:
                rows = self._rows(self.n - max(min(recent, self.n), 1))
                t, n = float(rows[:, 2].sum()), float(rows[:, 3].sum())
            if t > 0:
                return n / t
        elapsed = time.perf_counter() - self.t0
        return self.samples / elapsed if elapsed > 0 else NAN


MIN_SAMPLES = 16   # sampled steps per decision interval, at least (where the interval holds them)
MAX_SAMPLES = 0    # ... and about at most (0: no cap). Measured (session 14, docs/hook_overhead/gns_samples_s14.txt):
                   # a cap of 64 (every 7th of 500 steps) drifted 21% (mnist1d_resnet) and 14% (digits_mlp)
                   # from the every-step estimate, against 9% and 3% with every 2nd step: the cap is off


def _sq_norm_t(t: torch.Tensor) -> torch.Tensor:
    """Sum of squares of a tensor's entries as a 0-d tensor on its device (float32 or wider),
    without a copy where possible (one BLAS dot over a contiguous float32 gradient) and without
    reading it back: on a GPU, a read inside the gradient hook would wait for the backward."""
    if t.dtype == torch.float32 and t.is_contiguous():
        flat = t.view(-1)
        return torch.dot(flat, flat)
    return torch.linalg.vector_norm(t, dtype=torch.float32 if t.dtype != torch.float64 else None) ** 2


def _sq_norm(t: torch.Tensor) -> float | torch.Tensor:
    """``_sq_norm_t``, or on a contiguous CPU float tensor a float from one numpy BLAS dot over a
    view (about 1 us of Python against three torch ops: this runs once per gradient on a sampled
    step, inside Horovod's hook)."""
    if t.is_cpu and t.dtype in _DOT_DTYPES and not t.requires_grad and t.is_contiguous():
        v = t.numpy().reshape(-1)
        return float(np.dot(v, v))
    return _sq_norm_t(t)


_DOT_DTYPES = (torch.float32, torch.float64)


def _total(parts: list[float | torch.Tensor]) -> float:
    """The sum of floats and 0-d tensors, the tensors read back once per device."""
    tensors = [p for p in parts if isinstance(p, torch.Tensor)]
    total = sum(p for p in parts if not isinstance(p, torch.Tensor))
    if not tensors:
        return float(total)
    try:
        return total + float(torch.stack(tensors).sum(dtype=torch.float64))
    except RuntimeError:          # on several devices
        return total + sum(float(p) for p in tensors)


def reduced_shares(sizes: Sequence[int], world: int) -> list[list[tuple[int, int, int]]]:
    """The reduced gradient split over the ranks for |G|^2: rank r takes elements
    [r E / N, (r+1) E / N) of the tensors laid end to end (E elements in all), as (tensor index,
    start, end) segments of the flattened tensors. The same on every rank. Pure."""
    total = sum(sizes)
    bounds = [total * r // world for r in range(world + 1)]
    shares: list[list[tuple[int, int, int]]] = [[] for _ in range(world)]
    offset = 0
    for i, n in enumerate(sizes):
        for r in range(world):
            a, b = max(bounds[r], offset), min(bounds[r + 1], offset + n)
            if a < b:
                shares[r].append((i, a - offset, b - offset))
        offset += n
    return shares


class GradNoise:
    """Gradient noise scale from sampled steps (see the module docstring)."""

    def __init__(self, rank: int, world: int, every: int, beta: float, samples: int = 0) -> None:
        self.rank, self.world = rank, world
        self.every = max(int(every), 1)
        self.samples = max(int(samples), 0)
        self.min_samples = MIN_SAMPLES
        self.max_samples = MAX_SAMPLES      # 0: no limit (every ``every``-th step however long the interval)
        self.estimator = NoiseScaleEstimator(beta=beta)
        self.capturing = False
        self.local_scale = 1.0   # factor from the captured local gradients to the weighted ones
        self._sq: list[float | torch.Tensor] = []   # this step's captured squared norms of the local gradients
        self._n_captured = 0
        self._share: list[tuple[int, int, int]] | None = None   # this rank's part of the reduced gradients
        self._share_key: tuple[int, ...] = ()
        self.reset_interval()

    def reset_interval(self) -> None:
        self.sum_tc = 0.0    # sum_t T_t c_i,t over sampled steps (this rank)
        self.sum_tg = 0.0    # sum_t T_t |G_t share|^2, this rank's share of the reduced gradient
        self.sum_t = 0.0     # sum_t T_t   (the same on every rank)
        self.steps = 0

    def stride(self, interval: int) -> int:
        """Steps between samples in a decision interval of ``interval`` steps: ``every``, or less
        so that the interval holds at least ``min_samples`` (``MIN_SAMPLES``) sampled steps
        where it can, or more so that it holds about ``max_samples`` (``MAX_SAMPLES``, up to
        2x) at most. Short steps make long intervals (``min_decision_s``: 0.5 s is ~200 steps
        of 2.5 ms), and every 2nd step of those was a per-step cost of the statistics
        (issue 25); spread evenly over the interval, max_samples to 2 x max_samples feed the same
        EMA. Off by default: the estimate drifts past 10% of the every-step one with 64 samples
        per interval (see ``MAX_SAMPLES``)."""
        k = min(self.every, max(1, interval // self.min_samples))
        if self.max_samples > 0:
            k = max(k, interval // self.max_samples)
        return max(k, 1)

    def sampled(self, step: int, next_due: int, start: int = 0) -> bool:
        """Take gradient statistics on this step (of the interval from step ``start`` to the
        decision after ``next_due`` steps)? The last step before the decision and every
        ``stride``-th step, of those only the last ``samples`` before the decision (``samples``
        = 0: all): a fixed cost per decision, however many steps the interval holds. Never with
        a single rank (the estimator needs N >= 2)."""
        if self.world < 2:
            return False
        s = step + 1
        if s == next_due:
            return True
        k = self.stride(next_due - start)
        if s % k:
            return False
        return self.samples == 0 or next_due - s < k * self.samples

    def begin(self, capture: bool) -> None:
        self.capturing = capture
        self._sq = []
        self._n_captured = 0

    def on_local(self, grad: torch.Tensor) -> None:
        """The engine's gradient hook: this rank's local gradient, ``local_scale`` x the weighted
        one (1, or n_i/T on a uniform step, where Horovod averages and the weight is never
        applied here)."""
        self._sq.append(_sq_norm(grad))
        self._n_captured += 1

    def cancel(self) -> None:
        self.capturing = False
        self._sq = []
        self._n_captured = 0

    def _my_share(self, reduced: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        key = tuple(t.numel() for t in reduced)
        if self._share is None or key != self._share_key:
            self._share = reduced_shares(key, self.world)[self.rank]
            self._share_key = key
        out = []
        for i, a, b in self._share:
            t = reduced[i]
            flat = t.view(-1) if t.is_contiguous() else t.reshape(-1)
            out.append(flat if b - a == flat.numel() else flat[a:b])
        return out

    def finish(self, total: int, n_local: int, reduced: Sequence[torch.Tensor] | None) -> None:
        """After the allreduce of a sampled step: accumulate c_i = (T/n_i)|weighted local|^2 and
        this rank's share of |G|^2 (``reduced`` = the reduced gradients, the same on every rank;
        None: no share taken here)."""
        if not self.capturing or not self._n_captured or n_local <= 0:
            self.cancel()
            return
        c = (total / n_local) * _total(self._sq) * self.local_scale ** 2
        self.sum_tc += total * c
        if reduced is not None:
            g = _total([_sq_norm(part) for part in self._my_share(reduced)])
            self.sum_tg += total * g
        self.sum_t += total
        self.steps += 1
        self.cancel()

    def take_interval(self) -> tuple[float, int]:
        """The interval's (sum_t T_t, sampled steps), the same on every rank, and a new interval
        (a decision gathered this rank's sums: ``sum_tc``, ``sum_tg`` in its row)."""
        totals = (self.sum_t, self.steps)
        self.reset_interval()
        return totals

    def update(self, sum_tc_all: np.ndarray, sum_tg_all: np.ndarray, totals: tuple[float, int]) -> None:
        """Rank 0 at a decision, with every rank's sums from the decision rows and the interval's
        ``totals`` (``take_interval``, when the rows were built): the interval's mean S and |G|^2
        estimates into the EMA. With A_t = sum_i c_i,t both are linear in (A_t, |G_t|^2), so
        their means over the sampled steps are ``gns_step_estimates`` at the T-weighted means of
        A and |G|^2 (|G_t|^2: the sum of the ranks' shares)."""
        sum_t, steps = totals
        if steps and sum_t > 0 and self.world >= 2:
            a = float(np.sum(sum_tc_all)) / sum_t
            g = float(np.sum(sum_tg_all)) / sum_t
            s, g2 = gns_step_estimates(a, g, sum_t / steps, self.world)
            if math.isfinite(s):
                self.estimator.update(s, g2)
