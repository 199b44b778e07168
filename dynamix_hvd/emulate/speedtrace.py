"""Per-worker speed traces of a scenario: which multiplier a rank's compute time has at each step.

A worker with ``speed_trace`` replays a measured series of relative mini-batch times. The files
are read by the replay simulator's loader (``traces.fluctuation.load_speed_trace``, itself on
``traces.pai``): one parser, one normalisation, one CoV generator for the live bench and the replay.

* ``speed_trace = "FILE"`` (a PAI per-worker file, ``job_2_norm.csv`` format) with
  ``speed_trace_worker = K`` (the id in the file's ``worker`` column): the multiplier of trace row
  k is worker K's mini-batch time at row k divided by the **job-wide** median (the replay's
  default ``norm="job"``: a worker that was slower than the others stays slower).
* ``speed_trace = "cov:FILE"`` (the CoV table, ``coefficient_variation.csv`` format) with
  ``speed_trace_seed = S`` (default: the scenario's ``seed``): the replay world's generator
  (``traces.fluctuation.Fluctuation``) drawn with ``numpy.random.default_rng(S)`` for the scenario's
  N ranks (one job row, one start column, one z_r per rank); rank r takes column r. Every worker
  naming the same file and seed shares that one draw, as the ranks of one replay world do.

Rows to steps: training step s (0-based, counted by the device after every optimizer step,
the same on every rank) uses trace row ``(speed_trace_offset + s // speed_trace_steps_per_row)
mod T`` (T rows; the series wraps). ``speed_trace_steps_per_row`` defaults to the file's sampling
interval (``PaiJob.stride``: 10 iterations for the shipped PAI files; 10 for the CoV table,
``traces.fluctuation.COV_STRIDE``), so by default one training step stands for one measured iteration.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from dynamix_hvd.traces.fluctuation import Fluctuation, SpeedTrace, load_speed_trace


@functools.lru_cache(maxsize=32)
def load_trace(spec: str) -> SpeedTrace:
    """The loaded trace of ``spec`` (an absolute path, or ``cov:`` + an absolute path); cached."""
    return load_speed_trace(spec)


def worker_ids(spec: str) -> tuple[int, ...]:
    """Worker ids (the file's ``worker`` column) of a PAI per-worker file, in column order."""
    return load_trace(spec).workers


def n_rows(spec: str) -> int:
    tr = load_trace(spec)
    return int(tr.series.shape[0]) if tr.kind == "pai" else min(int(c.size) for c in tr.cov)  # type: ignore[union-attr]


def default_steps_per_row(spec: str) -> int:
    return max(1, int(load_trace(spec).stride))


class RankSeries:
    """One rank's multiplier per training step (``factor(step)``)."""

    def __init__(self, values: np.ndarray, steps_per_row: int, offset: int) -> None:
        self.values = np.asarray(values, dtype=float)
        self.steps_per_row, self.offset = int(steps_per_row), int(offset)

    def row(self, step: int) -> int:
        return (self.offset + int(step) // self.steps_per_row) % self.values.size

    def factor(self, step: int) -> float:
        return float(self.values[self.row(step)])

    def factors(self, steps: np.ndarray) -> np.ndarray:
        k = (self.offset + np.asarray(steps, dtype=np.int64) // self.steps_per_row) % self.values.size
        return self.values[k]


def rank_series(workers: Sequence[object], seed: int) -> list[RankSeries | None]:
    """Per rank the ``RankSeries`` of its speed trace (None: no trace, multiplier 1).
    ``workers``: the scenario's ``WorkerSpec``s (fields ``speed_trace``, ``speed_trace_worker``,
    ``speed_trace_steps_per_row``, ``speed_trace_offset``, ``speed_trace_seed``)."""
    n = len(workers)
    draws: dict[tuple[str, int], np.ndarray] = {}
    out: list[RankSeries | None] = []
    for r, w in enumerate(workers):
        spec = getattr(w, "speed_trace", "")
        if not spec:
            out.append(None)
            continue
        tr = load_trace(spec)
        spr = getattr(w, "speed_trace_steps_per_row", None) or default_steps_per_row(spec)
        off = getattr(w, "speed_trace_offset", 0) or 0
        if tr.kind == "pai":
            col = tr.workers.index(int(w.speed_trace_worker))  # type: ignore[attr-defined]
            values = tr.series[:, col]  # type: ignore[index]
        else:
            s = getattr(w, "speed_trace_seed", None)
            key = (spec, int(seed if s is None else s))
            if key not in draws:
                fl = Fluctuation(tr, n, np.random.default_rng(key[1]))
                draws[key] = fl.rows(np.arange(fl.T))          # (T, N): the replay world's draw
            values = draws[key][:, r]
        out.append(RankSeries(values, spr, off))
    return out


class TraceSchedule:
    """Every rank's trace multipliers (1 where a rank has no trace): what every device knows."""

    def __init__(self, workers: Sequence[object], seed: int) -> None:
        self.series = rank_series(workers, seed)
        self.n = len(self.series)

    @property
    def active(self) -> bool:
        return any(s is not None for s in self.series)

    def factor(self, rank: int, step: int) -> float:
        s = self.series[rank]
        return 1.0 if s is None else s.factor(step)

    def factors(self, steps: np.ndarray) -> np.ndarray:
        """(len(steps), N) multipliers."""
        steps = np.asarray(steps, dtype=np.int64)
        out = np.ones((steps.size, self.n))
        for r, s in enumerate(self.series):
            if s is not None:
                out[:, r] = s.factors(steps)
        return out


__all__ = ["TraceSchedule", "RankSeries", "rank_series", "load_trace", "n_rows", "default_steps_per_row",
           "worker_ids"]
