"""Per-rank fluctuation replayed from a measured trace: the loaded source (``SpeedTrace``) and one
realisation's multipliers (``Fluctuation``). Shared by the replay simulator (``replay/speeds.py``,
``replay/sim.py``) and the emulated cluster's speed traces (``emulate/speedtrace.py``), so both
use one loader, one normalisation and one CoV generator.

* ``none``: 1;
* a PAI per-worker file: each worker's mini-batch time divided by the job-wide median (so the
  measured stable imbalance between workers and their stragglers are kept; ``norm="worker"``
  divides by each worker's own median instead). Rank r replays worker ``r mod W``; one trace
  sample holds for ``stride`` steps (the file's sampling interval, 10 iterations); the series
  starts at a per-seed random sample, ranks that share a worker (N > W) are shifted by
  ``T / ceil(N / W)`` samples from each other, and the series wraps around at its end;
* ``cov:FILE`` (the CoV table): per seed one job row is drawn; at sample k its coefficient of
  variation c_k sets ``sigma_k = sqrt(log(1 + c_k^2))`` and rank r's multiplier is
  ``exp(sigma_k z_r - sigma_k^2 / 2)`` with z_r ~ N(0, 1) drawn once per seed (the same ranks stay
  the stragglers, the spread follows the job's measured CoV). One CoV column holds for 10 steps
  (the per-worker files' sampling; the table does not say), starting at a random column, wrapping;
* ``schedule``: a live scenario's per-rank series (``emulate.speedtrace.TraceSchedule``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dynamix_hvd.traces.pai import PaiJob, load_cov, load_pai_job

COV_STRIDE = 10


@dataclass
class SpeedTrace:
    """A loaded fluctuation source (shared across seeds)."""

    kind: str                         # "none", "pai", "cov"
    label: str
    series: np.ndarray | None = None  # pai: (T, W) relative times
    cov: list[np.ndarray] | None = None
    stride: int = 1
    workers: tuple[int, ...] = ()    # pai: the file's worker ids, one per column of ``series``
    schedule: object = None          # schedule: a scenario's ``emulate.speedtrace.TraceSchedule``


def load_speed_trace(spec: str, norm: str = "job") -> SpeedTrace:
    """``none``, a PAI per-worker CSV, or ``cov:FILE`` (the CoV table)."""
    if spec.lower() == "none":
        return SpeedTrace("none", "none")
    if spec.startswith("cov:"):
        path = spec[4:]
        return SpeedTrace("cov", f"cov:{path}", cov=load_cov(path), stride=COV_STRIDE)
    job: PaiJob = load_pai_job(spec)
    return SpeedTrace("pai", spec, series=job.normalised(norm), stride=job.stride, workers=job.workers)


class Fluctuation:
    """One seed's realisation: multipliers for any range of steps, in chunks of constant value."""

    def __init__(self, trace: SpeedTrace, n: int, rng: np.random.Generator) -> None:
        self.trace, self.n = trace, n
        self.stride = max(1, int(trace.stride))
        if trace.kind == "pai":
            T, W = trace.series.shape
            reps = math.ceil(n / W)
            self.cols = np.arange(n) % W
            self.off = int(rng.integers(T)) + (np.arange(n) // W) * (T // reps)
            self.T = T
        elif trace.kind == "schedule":
            pass                      # deterministic: the scenario fixes files, rows and draws
        elif trace.kind == "cov":
            c = trace.cov[int(rng.integers(len(trace.cov)))]
            self.sig = np.sqrt(np.log1p(c * c))
            self.T = c.size
            self.off0 = int(rng.integers(self.T))
            self.z = rng.standard_normal(n)

    def rows(self, k: np.ndarray) -> np.ndarray:
        """(len(k), N) multipliers of trace samples k (sample index = step // stride)."""
        if self.trace.kind == "none":
            return np.ones((k.size, self.n))
        if self.trace.kind == "schedule":
            return self.trace.schedule.factors(np.asarray(k) * self.stride)  # type: ignore[attr-defined]
        if self.trace.kind == "pai":
            return self.trace.series[(k[:, None] + self.off[None, :]) % self.T, self.cols[None, :]]
        s = self.sig[(k + self.off0) % self.T][:, None]
        return np.exp(s * self.z[None, :] - 0.5 * s * s)

    def chunks(self, step0: int, nsteps: int) -> tuple[np.ndarray, np.ndarray]:
        """(lengths (C,), multipliers (C, N)) for steps step0 .. step0 + nsteps - 1."""
        if self.trace.kind == "none":
            return np.array([float(nsteps)]), np.ones((1, self.n))
        st = self.stride
        k0, k1 = step0 // st, (step0 + nsteps - 1) // st
        if k0 == k1:
            return np.array([float(nsteps)]), self.rows(np.array([k0]))
        k = np.arange(k0, k1 + 1)
        starts = np.maximum(k * st, step0)
        ends = np.minimum((k + 1) * st, step0 + nsteps)
        return (ends - starts).astype(float), self.rows(k)
