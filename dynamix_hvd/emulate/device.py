"""Emulated device: a rank's compute speed and memory limit, and the scenario's timed events.

``EmulatedDevice.before_backward(b, elapsed_s)`` is called by the hook after the real forward
pass and before backward (Horovod starts the allreduce inside backward, so the padding must
come first). It sleeps until the compute phase has lasted ``fixed_ms + per_sample_ms * b``,
so speed ratios do not depend on this host's cores, and raises ``EmulatedOOM`` when
``b > max_batch``, as a GPU would.

A worker with a ``speed_trace`` (``emulate/speedtrace.py``) has its compute time multiplied by
the trace's value at the current training step: ``(fixed_ms + per_sample_ms * b) x f_r(step)``,
``f_r(step)`` = row ``(speed_trace_offset + step // speed_trace_steps_per_row) mod T`` of its
normalised series. ``step`` counts the optimizer steps taken so far (``after_step`` advances it;
every rank takes the same steps, so every device knows every rank's multiplier: ``true_speeds``).

Timed events are applied on the training clock (evaluation pauses it): compute keys change
this rank's speed; link keys re-shape this rank's link with ``tc`` (if a ``Link`` is given).
Where the kernel has no ``sch_netem`` the link latency is emulated here instead:
``after_step()`` sleeps the latency a ring allreduce would pay, 2(n-1) rounds of the slowest
hop (hop i -> i+1 costs latency_i + latency_{i+1}).
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Sequence

from dynamix_hvd.perfmodel import ring_allreduce_s
from dynamix_hvd.emulate.scenario import LINK_KEYS, Event, Scenario, WorkerSpec
from dynamix_hvd.emulate.speedtrace import TraceSchedule


try:  # the hook's error type, so its out-of-memory handling catches ours
    from dynamix_hvd.errors import OutOfMemoryError as _OOMBase
except ImportError:  # pragma: no cover - before the hook's errors module exists
    class _OOMBase(RuntimeError):  # type: ignore[no-redef]
        def __init__(self, rank: int, batch_size: int, limit: int | None = None) -> None:
            self.rank, self.batch_size, self.limit = rank, batch_size, limit
            super().__init__(f"rank {rank}: out of memory at local batch size {batch_size} (limit {limit})")


class EmulatedOOM(_OOMBase):
    """The emulated device ran out of memory: batch size above the rank's ``max_batch``."""

    def __init__(self, rank: int, batch_size: int, max_batch: int) -> None:
        super().__init__(rank, batch_size, max_batch)
        self.max_batch = max_batch


class TrainingClock:
    """Seconds of training time: a monotonic clock that can be paused (for evaluation)."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now
        self._start = now()
        self._paused_at: float | None = None
        self._paused_total = 0.0

    def __call__(self) -> float:
        t = self._paused_at if self._paused_at is not None else self._now()
        return t - self._start - self._paused_total

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = self._now()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._paused_total += self._now() - self._paused_at
            self._paused_at = None

    def restart(self) -> None:
        self._start = self._now()
        self._paused_at = None
        self._paused_total = 0.0

    @property
    def paused(self) -> bool:
        return self._paused_at is not None


def ring_latency_s(latencies_ms: Sequence[float]) -> float:
    """Latency cost of one ring allreduce (``perfmodel.ring_allreduce_s`` without payload)."""
    return ring_allreduce_s(0.0, [1.0] * len(latencies_ms), [x / 1000.0 for x in latencies_ms])


class EmulatedDevice:
    """The emulator object handed to the hook (``before_backward``) and the worker loop."""

    def __init__(self, scenario: Scenario, rank: int, clock: Callable[[], float] | None = None,
                 link: object | None = None, emulate_latency: bool = True,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not 0 <= rank < scenario.world_size:
            raise ValueError(f"rank {rank} outside the scenario's {scenario.world_size} workers")
        self.scenario = scenario
        self.rank = rank
        self.clock = clock or TrainingClock()
        self.link = link                       # netns.Link or None (network-free)
        self.emulate_latency = emulate_latency  # True when tc cannot add the delay itself
        self._sleep = sleep
        self.workers: list[WorkerSpec] = list(scenario.workers)
        self._pending: list[Event] = sorted(scenario.events, key=lambda e: e.at_s)
        self.applied: list[tuple[float, Event]] = []   # (training time, event)
        self.traces = TraceSchedule(scenario.workers, scenario.seed)
        self.steps = 0                         # optimizer steps taken (the speed traces' clock)
        self.padding_s = 0.0                   # total time slept to emulate compute
        self.latency_s = 0.0                   # total time slept to emulate link latency

    @property
    def spec(self) -> WorkerSpec:
        return self.workers[self.rank]

    def poll_events(self) -> list[Event]:
        """Apply every event due by now; returns those applied."""
        now = self.clock()
        due = []
        while self._pending and self._pending[0].at_s <= now:
            ev = self._pending.pop(0)
            self.workers[ev.rank] = replace(self.workers[ev.rank], **ev.changes)
            if ev.rank == self.rank and ev.touches_link and self.link is not None:
                w = self.workers[ev.rank]
                self.link.shape(w.bandwidth_mbit, w.latency_ms)  # type: ignore[attr-defined]
            self.applied.append((now, ev))
            due.append(ev)
        return due

    def factor(self, rank: int | None = None) -> float:
        """Rank's speed-trace multiplier at the current step (1 without a trace)."""
        return self.traces.factor(self.rank if rank is None else rank, self.steps)

    def compute_s(self, batch_size: int) -> float:
        """This rank's emulated compute time for ``batch_size`` samples at the current step."""
        return self.spec.compute_s(batch_size) * self.factor()

    def check_memory(self, batch_size: int) -> None:
        if batch_size > self.spec.max_batch:
            raise EmulatedOOM(self.rank, batch_size, self.spec.max_batch)

    def before_backward(self, batch_size: int, elapsed_s: float) -> None:
        """Raise EmulatedOOM if the batch does not fit, else sleep the compute padding."""
        self.poll_events()
        self.check_memory(batch_size)
        pad = self.compute_s(batch_size) - elapsed_s
        if pad > 0:
            self._sleep(pad)
            self.padding_s += pad

    def after_step(self) -> None:
        """End of an optimizer step: advance the step count (speed traces); sleep the emulated link
        latency of this step's allreduce (only without netem)."""
        self.steps += 1
        if not self.emulate_latency or self.scenario.world_size < 2:
            return
        lat = ring_latency_s([w.latency_ms for w in self.workers])
        if lat > 0:
            self._sleep(lat)
            self.latency_s += lat

    def true_speeds(self) -> list[float]:
        """Every rank's current true samples/s (marginal, speed trace included): the oracle's ``speed_fn``."""
        return [w.samples_per_s / self.factor(r) for r, w in enumerate(self.workers)]

    def max_batches(self) -> list[int]:
        return [w.max_batch for w in self.workers]


__all__ = ["EmulatedDevice", "EmulatedOOM", "TrainingClock", "ring_latency_s", "LINK_KEYS"]
