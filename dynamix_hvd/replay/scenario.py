"""A live bench scenario as a replay world (``dynamix replay --scenario FILE --workload DIR``).

The scenario gives the cluster; the workload directory (Pollux format) gives the statistics and
the step times. How each part of the scenario maps:

* **ranks**: N = the scenario's number of ``[[workers]]``; base batch = the scenario's
  ``base_batch`` (when it exceeds the workload's memory cap: the replay's default, with a note);
  per-rank memory = min(the workload's cap, the worker's ``max_batch``); decision interval = the
  scenario's ``interval_steps``.
* **compute speed**: rank i's multiplier on the workload's measured compute time is
  ``per_sample_ms_i(t) / min_j per_sample_ms_j(0)`` (the fastest rank at the start runs the
  measured compute) x its speed-trace value at the step (``emulate.speedtrace``: the same series,
  rows and CoV draw as the live device). The scenario's ``fixed_ms`` and the absolute
  milliseconds do **not** map: the workload's measured compute(b) has its own fixed and per-sample
  parts, and only the ranks' relative marginal speeds are taken (a per-rank ``fixed_ms`` that
  differs between ranks, or an event changing only ``fixed_ms``, is not represented).
* **links**: ``ring`` is ``perfmodel.ring_allreduce_s`` of the scenario's gradient bytes (the
  scenario workload's parameters x 4 + ``grad_mb``) over the links at time t.
  - A workload from elsewhere (Pollux's): the measured sync time is multiplied by
    ``ring(t) / ring_ref``, ``ring_ref`` the same over a uniform cluster (every link at the
    fastest initial bandwidth and the smallest initial latency). A slow link, a degrading link
    and ``grad_mb`` slow the measured sync in the proportion they slow the scenario's own
    allreduce.
  - A workload captured on this very scenario (``capture.json`` in the directory, see
    docs/bench.md): the measured sync already holds the initial links' wire time and the
    engine's fixed cost per allreduce (Horovod's cycle, MPI, Python: 4-5 ms of the 5 ms measured
    on link_degrade, where the wire takes 0.85 ms), so a change of the links *adds* its wire
    time: ``ring(t) - ring(0)``. Multiplying instead charged link_degrade's static run 92.7 s to
    its target against 25.8 s live (session 14: the 10 Mbit/s link multiplied the whole 5 ms by
    65).
* **events** happen at simulated time ``at_s x time_scale``. ``time_scale`` = 1 for a captured
  workload (its seconds are the live bench's); otherwise (``auto``) the replay's static step time
  at the start over the scenario's modelled static step time (``max_i compute_i(base_batch)``
  times the trace values at step 0, plus the ring allreduce): an event then falls at the same
  step of the static plan as live. ``--time-scale X`` overrides it. Within an interval the step in
  which the event time falls still runs at the old speeds; the following ones at the new.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.emulate.scenario import LINK_KEYS, Scenario, WorkerSpec
from dynamix_hvd.emulate.speedtrace import TraceSchedule
from dynamix_hvd.perfmodel import ring_allreduce_s
from dynamix_hvd.replay.throughput import Link

from dynamix_hvd.emulate.capture import CAPTURE_FILE  # noqa: E402  (written by capture-trace)


def gradient_bytes(sc: Scenario) -> float:
    """Bytes allreduced per step in the live bench: the scenario workload's float32 gradients + grad_mb."""
    from dynamix_hvd.emulate.payload import MB
    from dynamix_hvd.workloads import get_workload
    n = sum(p.numel() for p in get_workload(sc.workload).build().parameters())
    return 4.0 * n + sc.grad_mb * MB


def ring_s(nbytes: float, workers: Sequence[WorkerSpec]) -> float:
    return ring_allreduce_s(nbytes, [w.bandwidth_mbit * 1e6 / 8 for w in workers],
                            [w.latency_ms / 1000.0 for w in workers])


@dataclass
class _State:
    at: float              # simulated seconds from which it holds
    hw: np.ndarray         # (N,) compute multipliers (without the speed trace)
    link: Link             # the links' effect on the measured sync time


class ScenarioDynamics:
    """The scenario's hardware, link and event timeline in simulated seconds, and its speed traces."""

    def __init__(self, sc: Scenario, nbytes: float, captured: bool) -> None:
        self.sc, self.nbytes, self.captured = sc, float(nbytes), bool(captured)
        w0 = sc.workers
        self.ps_ref = min(w.per_sample_ms for w in w0)
        if captured:
            self.ring_ref = ring_s(nbytes, w0)     # (the difference from it is added)
        else:
            bw, lat = max(w.bandwidth_mbit for w in w0), min(w.latency_ms for w in w0)
            self.ring_ref = ring_s(nbytes, [WorkerSpec(1.0, 1.0, bandwidth_mbit=bw, latency_ms=lat)] * len(w0))
        self.traces = TraceSchedule(w0, sc.seed)
        self.time_scale = 1.0
        self._build()

    def _state(self, at: float, workers: Sequence[WorkerSpec]) -> _State:
        hw = np.array([w.per_sample_ms / self.ps_ref for w in workers])
        ring = ring_s(self.nbytes, workers)
        if self.captured:
            return _State(at, hw, Link(1.0, ring - self.ring_ref))
        return _State(at, hw, Link(ring / self.ring_ref if self.ring_ref > 0 else 1.0))

    def _build(self) -> None:
        sc = self.sc
        times = sorted({e.at_s for e in sc.events})
        self.states = [self._state(0.0, sc.workers_at(0.0))]
        for t in times:
            if t > 0:
                self.states.append(self._state(t * self.time_scale, sc.workers_at(t)))

    def set_time_scale(self, scale: float) -> None:
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"time scale {scale}: must be > 0")
        self.time_scale = float(scale)
        self._build()

    def live_static_step_s(self) -> float:
        """The scenario's modelled step of the static plan at the start (emulated compute + ring)."""
        b0 = self.sc.base_batch
        f = self.traces.factors(np.array([0]))[0]
        comp = max(w.compute_s(b0) * f[r] for r, w in enumerate(self.sc.workers))
        return comp + ring_s(self.nbytes, self.sc.workers)

    def state_at(self, time_s: float) -> _State:
        k = 0
        for i, s in enumerate(self.states):
            if s.at <= time_s:
                k = i
        return self.states[k]

    def next_change(self, time_s: float) -> float:
        for s in self.states:
            if s.at > time_s:
                return s.at
        return math.inf

    @property
    def link_events(self) -> bool:
        return any(k in LINK_KEYS for e in self.sc.events for k in e.changes)


def is_captured(workload_dir: Path, sc: Scenario) -> bool:
    """True when ``workload_dir`` was captured on this scenario (``capture.json`` names it)."""
    f = Path(workload_dir) / CAPTURE_FILE
    if not f.is_file():
        return False
    try:
        meta = json.loads(f.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("scenario") == sc.name


def describe(dyn: ScenarioDynamics) -> dict[str, Any]:
    return {"scenario": dyn.sc.name, "source": dyn.sc.source, "captured": dyn.captured,
            "time_scale": round(dyn.time_scale, 6), "gradient_bytes": dyn.nbytes,
            "hardware_factors": [round(float(x), 4) for x in dyn.states[0].hw],
            "sync_multiplier_start": round(dyn.states[0].link.mult, 4),
            "sync_added_ms": [round(1e3 * s.link.add, 3) for s in dyn.states],
            "events_at_sim_s": [round(s.at, 4) for s in dyn.states[1:]],
            "speed_traces": [bool(s) for s in dyn.traces.series]}


__all__ = ["ScenarioDynamics", "gradient_bytes", "ring_s", "is_captured", "describe", "CAPTURE_FILE"]
