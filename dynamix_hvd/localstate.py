"""Local state: one rank's position in the data and its step in flight, with no MPI and no
Horovod. Which micro-batch is being trained (and its weight n_i/T), what has been consumed, the
per-step record (step meter, change detector, sampled gradient statistics) and whether a
decision is due. ``Dynamix`` (horovod.py) drives it from ``batches()`` and ``optimizer.step()``.
"""
from __future__ import annotations

import collections
import time
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from dynamix_hvd.apply import rescale_accumulated
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.data import ExactOnceSampler, StepSlice, micro_batches
from dynamix_hvd.errors import DynamixError, StepSkippedError
from dynamix_hvd.measure import GradNoise, StepMeter
from dynamix_hvd.observe import EpochProgress
from dynamix_hvd.plan import Plan
from dynamix_hvd.react import ChangeDetector
from dynamix_hvd.records import WorkerStats
from dynamix_hvd.wire import EPOCH_BIT, REACT_BIT, SKIP_BIT, STOP_BIT, Flagged


class LocalState:
    """One rank's step state (see the module docstring)."""

    def __init__(self, config: DynamixConfig, rank: int, world: int, sampler: ExactOnceSampler,
                 params: Sequence[torch.nn.Parameter], progress: EpochProgress) -> None:
        self.config, self.rank, self.world = config, rank, world
        self.sampler, self.params, self.progress = sampler, list(params), progress
        self.meter = StepMeter(capacity=min(max(256, 2 * config.interval_steps), 8192))
        self.gns = GradNoise(rank, world, config.gns_every, config.gns_beta, config.gns_samples)
        # a change must last a tenth of the decision spacing: shorter bursts are this machine's noise (react.py)
        self.detector = ChangeDetector(tol=config.react_tol, min_run_s=0.1 * config.min_decision_s) if config.react else None
        self.pending: collections.deque[tuple[StepSlice, int, int]] = collections.deque()
        self.current: tuple[StepSlice, int, int] | None = None   # (slice, micro index, n samples)
        self.consumed = sampler.position()     # position after the last *trained* step
        self.t_batch = time.perf_counter()
        self.scale = 1.0            # the weight Horovod's hook applies to the accumulated gradient
        self.uniform = False        # this step: every rank the same batch, one micro-batch (n_i/T = 1/N); set on its last micro-batch
        self.oom_batch = 0          # this rank's batch size that ran out of memory in this step
        self.react_flag = 0         # this rank's detector fired; sent with the next step's flags
        self.react_ranks: list[int] | None = None   # ranks that flagged, known to all: decide early
        self.stop_signal: Callable[[], int] = lambda: 0   # the stop signal this rank got (lifecycle.StopOnSignal)
        self.stop_ranks: list[int] | None = None    # ranks that got one, known to all: checkpoint and stop
        self.skip_flag = 0          # this rank left out its last step's update after the reduction; sent next step
        self.reduced: Callable[[], bool] = lambda: False   # (engine) did this step's gradients go to the reduction?
        self.next_due = config.first_due()  # regular decision after this many steps
        self.warm = True            # the next full step is a warm-up (first of the job or after a restore): not measured
        self.interval_start = self.consumed["step"]   # first step of the current decision interval
        self.redo = False           # the last step ran out of memory somewhere and is redone
        self.on_new_step: Callable[[], None] = lambda: None   # (resets the hook's per-step counter)
        self.on_unstepped: Callable[[], None] = lambda: None  # (core: settle a step left without optimizer.step())
        self.step_plan: Plan = sampler.plans.latest   # set on the last micro-batch of each step
        self.step_full = False

    # ---- data --------------------------------------------------------------------------
    def generate(self, epoch: int, begin: Callable[[], None] | None = None) -> Iterator[np.ndarray]:
        """Micro-batches of this rank for the rest of ``epoch``; records what was generated.
        ``begin`` is called as each one is handed over (``batches()``: the user takes it now; a
        DataLoader's batch sampler runs ahead and passes None)."""
        k, pending = self.config.accumulation, self.pending
        for sl, idx in self.sampler.rank_steps(epoch, self.rank):
            if k == 1:                   # (no array_split for a single micro-batch)
                pending.append((sl, 0, len(idx)))
                if begin is not None:
                    begin()
                yield idx
                continue
            for j, mb in enumerate(micro_batches(idx, k)):
                pending.append((sl, j, len(mb)))
                if begin is not None:
                    begin()
                yield mb

    def check_epoch(self, epoch: int) -> None:
        if self.pending:
            raise DynamixError("a previous epoch's iterator was not consumed to the end")
        if epoch < self.consumed["epoch"]:
            raise DynamixError(f"epoch {epoch} is before the resumed position (epoch {self.consumed['epoch']})")

    def begin_micro(self) -> None:
        """The user takes the next micro-batch: its weight, and on the last micro-batch of a step
        the plan it runs under, whether it is full and uniform, and whether this step's gradient
        statistics are sampled; then (first micro-batch) ``on_new_step``."""
        prev = self.current
        if prev is not None and prev[1] == self.config.accumulation - 1:
            self.on_unstepped()     # the step's update was left out (core: settled, or StepSkippedError)
        cur = self.current = self.pending.popleft()
        sl, j, n = cur
        w = n / sl.total
        k = self.config.accumulation
        if j == 0:
            self.t_batch = time.perf_counter()
            self.redo = False
            self.scale = w if w > 0 else 1.0
        elif w > 0 and w != self.scale:   # micro-batches of unequal size: keep sum_j w_j g_j exact
            rescale_accumulated(self.params, self.scale / w)
            self.scale = w
        if j == k - 1:
            plan = self.step_plan = self.sampler.plans.at(sl.step)      # the plan this step runs under
            sizes = sl.sizes
            if k == 1:
                full = self.step_full = sizes == plan.batch_sizes
                self.uniform = plan.even if full else min(sizes) == max(sizes)
            else:
                full = self.step_full = self.is_full(sl, plan)
            gns = self.gns
            capture = bool(full and self.config.gns and gns.sampled(sl.step, self.next_due, self.interval_start))
            if capture or gns.capturing:
                gns.begin(capture)
        if j == 0:
            self.on_new_step()

    def is_full(self, sl: StepSlice, plan: Plan | None = None) -> bool:
        plan = plan or self.sampler.plans.at(sl.step)
        k = self.config.accumulation
        if k == 1:
            return sl.sizes == plan.batch_sizes
        return all(s == k * b for s, b in zip(sl.sizes, plan.batch_sizes))

    @property
    def plan(self) -> Plan:
        """The plan in force for the next step to be trained."""
        return self.sampler.plans.at(self.consumed["step"])

    # ---- the step ------------------------------------------------------------------------
    def record_step(self, t_entry: float, reduced: Callable[[], list[torch.Tensor]] | None) -> tuple[StepSlice, Plan]:
        """O(1) bookkeeping of a trained step (timings, change detector, sampled statistics,
        position); returns the step and the plan it ran under. ``reduced`` gives the reduced
        gradients (this rank's share of |G|^2 on a sampled step)."""
        now = time.perf_counter()
        sl = self.current[0]  # type: ignore[index]
        before = self.step_plan
        meter = self.meter
        if self.step_full and self.warm:
            self.warm = False       # (allocator, autotuning and lazy initialisation: not this rank's speed)
        elif self.step_full:
            c, m, st = t_entry - self.t_batch, now - t_entry, now - self.t_batch
            meter.add(c, m, st, sl.total)
            if self.detector is not None:
                change = self.detector.add(before.batch_sizes[self.rank], before.global_batch, c, st)
                if change is not None:
                    self.react_flag = 1
                    meter.mark_change(change.steps_since, change.compute)
        meter.samples += sl.total
        if self.gns.capturing:
            self.gns.finish(sl.total, sl.sizes[self.rank], reduced() if reduced is not None else None)
        if self.progress.enabled:
            self.progress.update(sl.epoch, sl.end, sl.total, sl.sizes)
        self._consume(sl)
        return sl, before

    def _consume(self, sl: StepSlice) -> None:
        epoch_end = sl.end >= self.sampler.dataset_size
        self.consumed = {"epoch": sl.epoch + (1 if epoch_end else 0), "cursor": 0 if epoch_end else sl.end,
                         "step": sl.step + 1}
        self.current = None

    def settle_unstepped(self) -> tuple[StepSlice, Plan]:
        """The step's last micro-batch was taken and ``optimizer.step()`` was not called for it
        (the next batch is being taken, or a checkpoint written). After the reduction of its
        gradients that is an update left out on purpose, e.g. ``torch.amp.GradScaler`` on an
        overflow, which decides from the reduced gradients and so the same on every rank: the
        step's samples count as consumed and the next step's flags tell whether every rank left
        it out. Without the reduction this rank alone skipped a step the other ranks are
        reducing: ``StepSkippedError`` (at one rank nothing can go out of step)."""
        sl = self.current[0]  # type: ignore[index]
        if self.world > 1 and not self.reduced():
            raise StepSkippedError(
                f"dynamix: rank {self.rank} of {self.world} took its next batch without calling optimizer.step() "
                f"for the batch of step {sl.step}. Every rank must call optimizer.step() once for every batch it "
                "takes from dyn.batches() / dyn.loader(): the other ranks are reducing step "
                f"{sl.step}'s gradients, and a rank that leaves a step out trains every later step against the "
                "others' next one (misaligned gradients and plans; the job hangs or fails at its end). "
                "A loss that is not finite on this rank: run loss.backward() and optimizer.step() all the same "
                "(the reduced gradient is then not finite on every rank, and every rank can leave that update "
                "out alike, as torch.amp.GradScaler does); an out-of-memory error caught in forward or "
                "backward: dyn.report(oom=True), then optimizer.step()")
        self.gns.cancel()
        self.skip_flag = 1 if self.world > 1 else 0
        self._consume(sl)
        return sl, self.step_plan

    def check_backward(self, passes: int, micro: int) -> None:
        """Before the gradients of this step leave the rank (or before micro-batch ``micro`` + 1
        is taken): ``passes`` backward passes reached the gradients for the step's first
        ``micro`` micro-batches. Fewer, and the missing micro-batches' samples would count as
        trained without being in the gradient (the other ranks cannot see it): ``StepSkippedError``
        at once on this rank. Not after ``report(oom=True)`` (the step is redone) nor at one rank."""
        if passes >= micro or self.world == 1 or self.oom_batch:
            return
        sl = self.current[0]  # type: ignore[index]
        k = self.config.accumulation
        raise StepSkippedError(
            f"dynamix: rank {self.rank} of {self.world} ran loss.backward() for {passes} of the "
            f"{'' if micro == k else 'first '}{micro} micro-batch(es) of step {sl.step} (accumulation={k}): the samples of a micro-batch without "
            "backward would count as trained without being in the step's gradient. Run loss.backward() on every "
            "micro-batch taken from dyn.batches() / dyn.loader() (a loss that is not finite: backward all the "
            "same, and leave the update out on every rank from the reduced gradients, as torch.amp.GradScaler "
            "does; an out-of-memory error: dyn.report(oom=True))")

    def flag_word(self) -> int:
        """This rank's flag word for the step's flags (wire.py): an early decision, a stop
        signal, the previous step's update left out, the first step of an epoch."""
        cur = self.current
        return ((REACT_BIT if self.react_flag else 0) | (STOP_BIT if self.stop_signal() else 0)
                | (SKIP_BIT if self.skip_flag else 0) | (EPOCH_BIT if cur is not None and cur[0][2] == 0 else 0))

    def flags_read(self, flagged: Flagged) -> None:
        """The step's flags of every rank (the same on all ranks): ranks asking for an early
        decision, ranks that got a stop signal; ranks that left out the previous step's update
        and ranks beginning an epoch (all of them, or ``StepSkippedError`` on every rank: the
        models, or the data, would differ)."""
        if flagged.react is not None:
            self.react_ranks = flagged.react
        if flagged.stop is not None:
            self.stop_ranks = flagged.stop
        started = flagged.new_epoch
        if started is not None and len(started) < self.world:
            inside = sorted(set(range(self.world)) - set(started))
            raise StepSkippedError(
                f"dynamix: rank(s) {started} began an epoch at step {self.consumed['step']} while rank(s) {inside} "
                "are in the middle of one: some rank left its epoch early (a break out of the batches on some "
                "ranks only, a time or step budget counted per rank), and from here on the ranks would train "
                "different samples and end the job a different number of steps apart. Take every batch of "
                "an epoch on every rank, or leave the epoch after the same step on every rank")
        skipped = flagged.skipped
        if skipped is not None and len(skipped) < self.world:
            step = self.consumed["step"] - 1
            applied = sorted(set(range(self.world)) - set(skipped))
            raise StepSkippedError(
                f"dynamix: rank(s) {skipped} left out the update of step {step} (no optimizer.step() after its "
                f"gradients were reduced) while rank(s) {applied} applied it: the ranks' models differ from "
                "here on. Leave an update out on every rank or on none, deciding from the reduced gradients, "
                "which are the same on every rank (as torch.amp.GradScaler does on an overflow)")

    def clear_flags(self) -> None:
        """This rank's flags went out with the step's (or there is nowhere to send them)."""
        self.oom_batch = self.react_flag = self.skip_flag = 0

    def due(self, step: int) -> bool:
        """Decide after this step? When ``next_due`` steps are done (rank 0 sets it at each
        decision: ``interval_steps`` or, with short steps, enough for ``min_decision_s``), and at
        once when a rank flagged a change (``react``); the next regular decision then comes a full
        interval later. Every rank computes the same answer (the flags were summed over all ranks,
        ``next_due`` came with the plan)."""
        if step + 1 < self.config.warmup_steps:
            self.react_ranks = None      # a change during warm-up is not decided on
            return False
        return self.react_ranks is not None or step + 1 >= self.next_due

    def worker_stats(self, step: int, max_batch: int) -> WorkerStats:
        """This rank's row of the decision after ``step`` (means per step over the interval)."""
        meter, k = self.meter, self.config.accumulation
        c, m, st = meter.means()
        return WorkerStats(rank=self.rank, batch_size=self.sampler.plans.at(step).batch_sizes[self.rank],
                           max_batch=max_batch, steps=meter.n, compute_s=c / k, step_s=st, comm_s=m,
                           loss=meter.mean_loss(), changed=meter.changed if meter.n else 0,
                           compute_se_s=meter.compute_se() / k)

    def recent_steps(self) -> int | None:
        """On an early decision: the steps since the change (throughput over them only)."""
        m = self.meter
        if self.react_ranks is None or self.detector is None or not m.n:
            return None
        return m.n - m.since if m.since is not None else self.detector.confirm

    def decided(self, first: int) -> None:
        """After a decision: a new interval from step ``first``; a flag raised in this very step
        is answered by it (its row already reports the means since the change), so it is not
        sent on."""
        self.interval_start = first
        self.meter.reset()
        if self.react_ranks is not None and self.detector is not None:
            self.detector.rebase()
        self.react_ranks = None
        self.react_flag = 0

    def reset(self) -> None:
        """Forget the step in flight and the early-decision state (after a restore or a world
        change: the plan in force changed under it; every rank agrees no early decision is pending)."""
        self.pending.clear()
        self.current = None
        self.meter.reset()
        self.gns.cancel()
        self.gns.reset_interval()
        if self.detector is not None:
            self.detector.reset()
        self.react_flag = self.oom_batch = self.skip_flag = 0
        self.react_ranks = None
        self.next_due = self.config.first_due(self.consumed["step"])
        self.warm = True
        self.interval_start = self.consumed["step"]
