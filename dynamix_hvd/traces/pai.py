"""Loaders for the PAI mini-batch-time traces (Alibaba cluster-trace-gpu-v2020), any file in the format.

* Per-worker file (``job_2_norm.csv``): columns ``worker``, ``time`` (iteration, strictly increasing
  within each worker) and ``batch_time_norm`` (that worker's mini-batch time); other columns (the
  unnamed index, ``gpu``) are ignored. A row repeating the worker's previous row exactly (same
  time and value) is dropped; any other repeated or decreasing time is an error. Workers may miss
  some sampled iterations: the matrix is built on the union of iterations within the range every
  worker covers, and each worker's gaps are filled by linear interpolation in iteration.
* CoV file (``coefficient_variation.csv``): a header, then one row per job: a label, then the
  coefficient of variation of the job's workers at each iteration. A job's series ends at its first
  empty cell; a number after an empty cell is an error.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from dynamix_hvd.traces.csvio import TraceError, check_positive, parse_float, read_columns, read_rows


@dataclass(frozen=True)
class PaiJob:
    """Per-worker mini-batch times of one job on a common iteration axis."""

    path: str
    iterations: np.ndarray      # (T,) sampled iterations, increasing
    times: np.ndarray           # (T, W) mini-batch time of each worker (trace units)
    workers: tuple[int, ...]

    @property
    def stride(self) -> int:
        """Iterations between two samples (median spacing; 1 for a single sample)."""
        if self.iterations.size < 2:
            return 1
        return max(1, int(round(float(np.median(np.diff(self.iterations))))))

    def normalised(self, mode: str = "job") -> np.ndarray:
        """Relative times: divided by the job-wide median (``job``: keeps the stable imbalance between
        workers) or by each worker's own median (``worker``: temporal fluctuation only)."""
        if mode == "job":
            return self.times / float(np.median(self.times))
        if mode == "worker":
            return self.times / np.median(self.times, axis=0, keepdims=True)
        raise ValueError(f"mode={mode!r}: choose 'job' or 'worker'")


def load_pai_job(path: str | os.PathLike) -> PaiJob:
    cols = read_columns(path, ("worker", "time", "batch_time_norm"))
    worker = np.asarray(cols["worker"])
    it = np.asarray(cols["time"])
    bt = np.asarray(cols["batch_time_norm"])
    check_positive(path, bt, "batch_time_norm")
    check_positive(path, it, "time", allow_zero=True)
    if np.any(worker != np.round(worker)) or np.any(worker < 0):
        k = int(np.nonzero((worker != np.round(worker)) | (worker < 0))[0][0])
        raise TraceError(path, f"worker id {worker[k]:g} must be an integer >= 0", k + 2, "worker")
    ids = sorted({int(w) for w in worker})
    grid = np.unique(it)
    mat = np.empty((grid.size, len(ids)))
    spans: list[tuple[float, float]] = []
    for j, w in enumerate(ids):
        rows = np.nonzero(worker == w)[0]
        t, v = it[rows], bt[rows]
        dup = np.nonzero((np.diff(t) == 0) & (np.diff(v) == 0))[0] + 1   # an exact repeat of the row above
        keep = np.setdiff1d(np.arange(t.size), dup)
        rows, t, v = rows[keep], t[keep], v[keep]
        bad = np.nonzero(np.diff(t) <= 0)[0]
        if bad.size:
            k = int(bad[0]) + 1
            raise TraceError(path, f"time is not increasing for worker {w} ({t[k - 1]:g} then {t[k]:g})",
                             int(rows[k]) + 2, "time")
        spans.append((t[0], t[-1]))
        mat[:, j] = np.interp(grid, t, v)
    lo, hi = max(s[0] for s in spans), min(s[1] for s in spans)
    inside = (grid >= lo) & (grid <= hi)
    if not inside.any():
        raise TraceError(path, f"the workers' iteration ranges do not overlap (common range {lo:g}..{hi:g})",
                         column="time")
    return PaiJob(str(path), grid[inside], mat[inside], tuple(ids))


def load_cov(path: str | os.PathLike) -> list[np.ndarray]:
    """One array of coefficients of variation (>= 0) per job row."""
    header, rows = read_rows(path)
    jobs: list[np.ndarray] = []
    for k, r in enumerate(rows):
        rownum = k + 2
        vals: list[float] = []
        ended_at: int | None = None
        for j, cell in enumerate(r[1:], start=1):
            col = header[j] if j < len(header) else f"#{j + 1}"
            if not cell.strip():
                ended_at = j if ended_at is None else ended_at
                continue
            if ended_at is not None:
                raise TraceError(path, f"value {cell.strip()!r} after an empty cell (column "
                                       f"{header[ended_at] if ended_at < len(header) else ended_at!r})", rownum, col)
            v = parse_float(path, cell, rownum, col)
            if v < 0:
                raise TraceError(path, f"coefficient of variation {v:g} must be >= 0", rownum, col)
            vals.append(v)
        if not vals:
            raise TraceError(path, "job row has no values", rownum, header[1] if len(header) > 1 else None)
        jobs.append(np.asarray(vals))
    return jobs
