"""Exact-once data partitioning for uneven, changing per-rank batch sizes.

One *step* is one optimizer step. At a step under plan ``b`` (per-rank sizes, global
``B = sum(b)``) with ``k`` gradient-accumulation micro-batches per step, the next ``k*B``
indices of the epoch's permutation are taken; rank ``i`` gets the ``k*b_i`` that start at
``k*offset_i`` and splits them into ``k`` micro-batches. Every rank runs the same pure
function over the same plan log, so all ranks agree on every step's sizes and take the
same number of steps per epoch, whatever the plans.

Tail rule: no rank ever gets more than its planned ``k*b_i`` in a step (so a memory bound at
``b_i`` always holds) and, when fewer than ``k*B + world*k`` indices remain, the last two steps
are split so that every rank gets at least one sample per micro-batch (as long as the dataset
has >= world*k samples): no empty batches.

Nothing here talks to MPI or torch; ``DynamixBatchSampler`` at the bottom adapts it to a
``torch.utils.data.DataLoader``.
"""
from __future__ import annotations

import bisect
import operator
from typing import Any, Iterator, Sequence

import numpy as np

from dynamix_hvd.plan import Plan


class SamplerError(ValueError):
    """Invalid sampler configuration or state."""


class StepSlice(tuple):
    """One optimizer step, seen by every rank identically: (step, epoch, start, sizes,
    plan_version, total), immutable. A tuple rather than a frozen dataclass: one is made per
    training step, and a frozen dataclass's ``__init__`` is a call of ``object.__setattr__`` per
    field."""

    __slots__ = ()

    def __new__(cls, step: int, epoch: int, start: int, sizes: tuple[int, ...], plan_version: int,
                total: int | None = None) -> "StepSlice":
        return tuple.__new__(cls, (step, epoch, start, sizes, plan_version, sum(sizes) if total is None else total))

    step = property(operator.itemgetter(0), doc="global optimizer-step counter (across epochs)")
    epoch = property(operator.itemgetter(1))
    start = property(operator.itemgetter(2), doc="cursor into the epoch's permutation before this step")
    sizes = property(operator.itemgetter(3), doc="samples per rank in this step (sum = total)")
    plan_version = property(operator.itemgetter(4))
    total = property(operator.itemgetter(5))

    @property
    def end(self) -> int:
        return self[2] + self[5]

    def __repr__(self) -> str:
        return (f"StepSlice(step={self[0]}, epoch={self[1]}, start={self[2]}, sizes={self[3]}, "
                f"plan_version={self[4]})")


def proportional_split(total: int, weights: Sequence[int], minimum: int) -> tuple[int, ...]:
    """Split ``total`` over ranks in proportion to ``weights`` with ``minimum`` each,
    largest-remainder rounding; sums exactly to ``total`` (requires total >= n*minimum)."""
    n = len(weights)
    if total < n * minimum:
        # tiny dataset: give one sample to as many ranks as possible, in weight order
        order = sorted(range(n), key=lambda i: -weights[i])
        out = [0] * n
        for j in range(total):
            out[order[j % n]] += 1
        return tuple(out)
    w = np.asarray(weights, dtype=float)
    if w.sum() <= 0:
        w = np.ones(n)
    rest = total - n * minimum
    exact = rest * w / w.sum()
    base = np.floor(exact).astype(int)
    left = rest - int(base.sum())
    order = np.argsort(-(exact - base), kind="stable")
    base[order[:left]] += 1
    return tuple(int(minimum + b) for b in base)


def step_sizes(remaining: int, plan: Plan, accumulation: int = 1) -> tuple[int, ...]:
    """Per-rank sample counts for the next step given ``remaining`` indices in the epoch.

    Full steps follow the plan. Near the end of the epoch no rank gets more than its planned
    ``k*b_i`` (a memory bound may sit exactly there; the one exception is a global batch
    smaller than twice the world size, where the last step may exceed it by a few samples) and,
    whenever the dataset allows,
    no rank gets fewer than ``k`` (one sample per micro-batch): when what would be left after a
    full step is too small to give every rank a sample, this step is shortened so that the
    last step keeps exactly ``world*k`` samples."""
    k = accumulation
    full = k * plan.global_batch
    floor_ = plan.world_size * k
    if remaining - full >= floor_:
        return plan.batch_sizes if k == 1 else tuple(k * b for b in plan.batch_sizes)
    if remaining > full:                      # full step now would leave < world*k behind
        if remaining - floor_ >= floor_:
            return capped_split(remaining - floor_, plan, k)
        # tiny global batch (B < 2*world): one last step, a few samples above plan
        return proportional_split(remaining, plan.batch_sizes, k)
    return capped_split(remaining, plan, k)


def capped_split(total: int, plan: Plan, k: int) -> tuple[int, ...]:
    """Split ``total <= k*B`` in proportion to the plan, each rank in [k, k*b_i] when possible."""
    if total < plan.world_size * k or min(plan.batch_sizes) < 1:
        return proportional_split(total, plan.batch_sizes, k)
    from dynamix_hvd.plan import PlanBounds, split_global

    bounds = PlanBounds(max_batch=tuple(k * b for b in plan.batch_sizes), min_batch=k, deadband=0.0)
    return tuple(split_global(total, plan.batch_sizes, bounds))


def micro_batches(indices: np.ndarray, accumulation: int) -> list[np.ndarray]:
    """Split one rank's step indices into ``accumulation`` near-equal micro-batches."""
    return [np.asarray(a) for a in np.array_split(indices, accumulation)]


class PlanLog:
    """Plans by the step they take effect at; ``at(step)`` is the plan in force."""

    def __init__(self, first: Plan) -> None:
        self._plans: list[Plan] = [first]

    def add(self, plan: Plan) -> None:
        last = self._plans[-1]
        if plan.version <= last.version:
            raise SamplerError(f"plan version {plan.version} is not newer than {last.version}")
        if plan.start_step < last.start_step:
            raise SamplerError(f"plan start_step {plan.start_step} precedes {last.start_step}")
        if plan.world_size != last.world_size:
            raise SamplerError(f"plan for {plan.world_size} ranks in a world of {last.world_size}")
        self._plans.append(plan)

    def at(self, step: int) -> Plan:
        last = self._plans[-1]
        if step >= last.start_step:          # the common case: the latest plan
            return last
        starts = [p.start_step for p in self._plans]
        i = bisect.bisect_right(starts, step) - 1
        return self._plans[max(i, 0)]

    @property
    def latest(self) -> Plan:
        return self._plans[-1]

    def prune(self, before_step: int) -> None:
        """Drop plans fully superseded before ``before_step`` (keeps memory bounded)."""
        while len(self._plans) > 1 and self._plans[1].start_step <= before_step:
            self._plans.pop(0)

    def to_list(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self._plans]

    @staticmethod
    def from_list(items: Sequence[dict[str, Any]]) -> "PlanLog":
        if not items:
            raise SamplerError("plan log is empty")
        log = PlanLog(Plan.from_dict(items[0]))
        for d in items[1:]:
            log.add(Plan.from_dict(d))
        return log


class ExactOnceSampler:
    """Walks epochs of a dataset in steps of the current plan; pure and deterministic.

    ``next_step()`` returns the next StepSlice and advances; ``indices(slice, rank)`` gives a
    rank's indices for it. Position = (epoch, cursor, step)."""

    def __init__(self, dataset_size: int, plan: Plan, *, seed: int = 0, shuffle: bool = True,
                 accumulation: int = 1) -> None:
        if dataset_size < 1:
            raise SamplerError(f"dataset_size={dataset_size}: must be >= 1")
        if accumulation < 1:
            raise SamplerError(f"accumulation={accumulation}: must be >= 1")
        self.dataset_size = int(dataset_size)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        self.accumulation = int(accumulation)
        self.plans = PlanLog(plan)
        self.epoch = 0
        self.cursor = 0
        self.step = 0
        self._perm_epoch = -1
        self._perm = np.arange(0)

    # -- index maths ---------------------------------------------------------------------
    def permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            if self.shuffle:
                rng = np.random.default_rng([self.seed, epoch])
                self._perm = rng.permutation(self.dataset_size)
            else:
                self._perm = np.arange(self.dataset_size)
            self._perm_epoch = epoch
        return self._perm

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning unless we are already inside it."""
        if epoch != self.epoch:
            self.epoch = int(epoch)
            self.cursor = 0

    def epoch_done(self) -> bool:
        return self.cursor >= self.dataset_size

    def next_step(self) -> StepSlice:
        if self.epoch_done():
            raise StopIteration
        plan = self.plans.at(self.step)
        sizes = step_sizes(self.dataset_size - self.cursor, plan, self.accumulation)
        sl = StepSlice(self.step, self.epoch, self.cursor, sizes, plan.version)
        self.cursor += sl.total
        self.step += 1
        return sl

    def indices(self, sl: StepSlice, rank: int) -> np.ndarray:
        perm = self.permutation(sl.epoch)
        lo = sl.start + sum(sl.sizes[:rank])
        return perm[lo: lo + sl.sizes[rank]]

    def rank_micro_batches(self, sl: StepSlice, rank: int) -> list[np.ndarray]:
        return micro_batches(self.indices(sl, rank), self.accumulation)

    def rank_steps(self, epoch: int, rank: int) -> Iterator[tuple[StepSlice, np.ndarray]]:
        """``iter_epoch`` and ``indices(slice, rank)`` in one pass: (slice, this rank's ``k*b``
        indices) for the rest of ``epoch``. The per-step path of a training loop: a full step
        under the plan in force takes the plan's sizes and this rank's offset, computed once per
        plan; a step near the epoch's end goes through ``next_step`` (the tail rule). Yields the
        same slices and indices as the two separate calls."""
        self.set_epoch(epoch)
        n, k = self.dataset_size, self.accumulation
        plan: Plan | None = None
        full = floor_ = lo = mine = 0
        sizes: tuple[int, ...] = ()
        while self.cursor < n:
            p = self.plans.at(self.step)
            if p is not plan:
                plan, full, floor_ = p, k * p.global_batch, p.world_size * k
                sizes = p.batch_sizes if k == 1 else tuple(k * b for b in p.batch_sizes)
                lo, mine = sum(sizes[:rank]), sizes[rank]
            cur, e = self.cursor, self.epoch
            if n - cur - full >= floor_:
                sl = StepSlice(self.step, e, cur, sizes, p.version, full)
                self.cursor, self.step = cur + full, self.step + 1
                a = cur + lo
                yield sl, self.permutation(e)[a:a + mine]
            else:
                sl = self.next_step()
                yield sl, self.indices(sl, rank)
        # leave the position at the start of the next epoch
        self.epoch = epoch + 1
        self.cursor = 0

    def iter_epoch(self, epoch: int) -> Iterator[StepSlice]:
        """Step slices for the rest of ``epoch`` (resumes mid-epoch after load_state_dict)."""
        self.set_epoch(epoch)
        while not self.epoch_done():
            yield self.next_step()
        # leave the position at the start of the next epoch
        self.epoch = epoch + 1
        self.cursor = 0

    # -- checkpoint ------------------------------------------------------------------------
    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor, "step": self.step}

    def state_dict(self, position: dict[str, int] | None = None) -> dict[str, Any]:
        pos = position if position is not None else self.position()
        return {"dataset_size": self.dataset_size, "seed": self.seed, "shuffle": self.shuffle,
                "accumulation": self.accumulation, "plans": self.plans.to_list(), **pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("dataset_size", "seed", "shuffle", "accumulation"):
            if state[key] != getattr(self, key):
                raise SamplerError(
                    f"checkpoint sampler {key}={state[key]!r} differs from this job's {getattr(self, key)!r}")
        self.plans = PlanLog.from_list(state["plans"])
        self.epoch, self.cursor, self.step = int(state["epoch"]), int(state["cursor"]), int(state["step"])
        if not 0 <= self.cursor <= self.dataset_size:
            raise SamplerError(f"checkpoint cursor={self.cursor} outside [0, {self.dataset_size}]")
