"""Loader for a workload directory in the Pollux trace format (any directory, any workload).

A directory holds
* ``validation-B.csv`` (one or more; ``B`` = the run's global batch, an integer): columns
  ``iteration`` (optimizer steps so far, strictly increasing), ``metric`` (validation metric after
  that epoch), ``grad_sqr`` and ``grad_var`` (gradient statistics of that epoch); other columns
  (e.g. ``progress``) are ignored;
* ``placements.csv`` (``placement,local_bsz,step_time,sync_time``; a placement is one digit per
  node = GPUs used on it) and/or ``scalability.csv``
  (``num_nodes,num_replicas,local_bsz,step_time,sync_time``): measured seconds per step and the part
  spent synchronising. At least one of the two is needed.

Samples processed at a row are ``iteration x B`` (the runs are at a fixed global batch).
Everything raises ``TraceError`` naming the file, row and column of the problem.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dynamix_hvd.traces.csvio import TraceError, check_at_least, check_increasing, check_positive, read_columns

VALIDATION_RE = re.compile(r"^validation-(.+)\.csv$")


@dataclass(frozen=True)
class Curve:
    """One measured training run at a fixed global batch."""

    batch: int
    iteration: np.ndarray
    metric: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray
    path: str

    @property
    def samples(self) -> np.ndarray:
        return self.iteration * float(self.batch)


@dataclass(frozen=True)
class ThroughputTable:
    """All measured (placement, local batch) rows, from placements.csv and scalability.csv."""

    num_nodes: np.ndarray
    num_replicas: np.ndarray
    local_bsz: np.ndarray
    step_time: np.ndarray
    sync_time: np.ndarray


@dataclass(frozen=True)
class PolluxWorkload:
    name: str
    path: str
    curves: tuple[Curve, ...]           # sorted by batch
    throughput: ThroughputTable

    @property
    def batches(self) -> np.ndarray:
        return np.array([c.batch for c in self.curves], dtype=float)


def load_curve(path: str | os.PathLike, batch: int) -> Curve:
    cols = read_columns(path, ("iteration", "metric", "grad_sqr", "grad_var"))
    it = np.asarray(cols["iteration"])
    check_positive(path, it, "iteration")
    check_increasing(path, it, "iteration")
    check_positive(path, np.asarray(cols["grad_sqr"]), "grad_sqr", allow_zero=True)
    check_positive(path, np.asarray(cols["grad_var"]), "grad_var", allow_zero=True)
    return Curve(batch, it, np.asarray(cols["metric"]), np.asarray(cols["grad_sqr"]), np.asarray(cols["grad_var"]),
                 str(path))


def _placement_shape(path: Path, text: list[str]) -> tuple[np.ndarray, np.ndarray]:
    nodes, reps = [], []
    for k, p in enumerate(text):
        p = p.strip()
        if p.endswith(".0"):
            p = p[:-2]
        if not p.isdigit() or "0" in p:
            raise TraceError(path, f"placement {p!r} must be digits 1-9 (GPUs used on each node)", k + 2, "placement")
        nodes.append(len(p))
        reps.append(sum(int(c) for c in p))
    return np.asarray(nodes, dtype=float), np.asarray(reps, dtype=float)


def _check_times(path: Path, cols: dict) -> None:
    # a fraction of a sample per replica is no measurement (a unit or scale error)
    check_at_least(path, np.asarray(cols["local_bsz"]), "local_bsz", 1.0, "one sample per replica")
    check_positive(path, np.asarray(cols["step_time"]), "step_time")
    check_positive(path, np.asarray(cols["sync_time"]), "sync_time", allow_zero=True)


def load_throughput(directory: str | os.PathLike) -> ThroughputTable:
    d = Path(directory)
    parts: list[tuple[np.ndarray, ...]] = []
    pl, sc = d / "placements.csv", d / "scalability.csv"
    if pl.is_file():
        cols = read_columns(pl, ("placement", "local_bsz", "step_time", "sync_time"), text_columns=("placement",))
        _check_times(pl, cols)
        nodes, reps = _placement_shape(pl, list(cols["placement"]))
        parts.append((nodes, reps, cols["local_bsz"], cols["step_time"], cols["sync_time"]))
    if sc.is_file():
        cols = read_columns(sc, ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"))
        _check_times(sc, cols)
        check_positive(sc, np.asarray(cols["num_nodes"]), "num_nodes")
        check_positive(sc, np.asarray(cols["num_replicas"]), "num_replicas")
        bad = np.nonzero(np.asarray(cols["num_replicas"]) < np.asarray(cols["num_nodes"]))[0]
        if bad.size:
            raise TraceError(sc, "num_replicas is smaller than num_nodes", int(bad[0]) + 2, "num_replicas")
        parts.append((cols["num_nodes"], cols["num_replicas"], cols["local_bsz"], cols["step_time"], cols["sync_time"]))
    if not parts:
        raise TraceError(d, "no placements.csv or scalability.csv: step and sync times are needed")
    arrs = [np.concatenate([np.asarray(p[i], dtype=float) for p in parts]) for i in range(5)]
    return ThroughputTable(*arrs)


def load_pollux(directory: str | os.PathLike) -> PolluxWorkload:
    """Load every ``validation-B.csv`` and the throughput tables of one workload directory."""
    d = Path(directory)
    if not d.is_dir():
        raise TraceError(d, "workload directory not found")
    curves = []
    for f in sorted(d.iterdir()):
        m = VALIDATION_RE.match(f.name)
        if not m:
            continue
        if not m.group(1).isdigit() or int(m.group(1)) < 1:
            raise TraceError(f, f"file name must be validation-B.csv with B the global batch (an integer >= 1), "
                                f"got {m.group(1)!r}")
        curves.append(load_curve(f, int(m.group(1))))
    if not curves:
        raise TraceError(d, "no validation-B.csv files (one per measured global batch B)")
    curves.sort(key=lambda c: c.batch)
    return PolluxWorkload(d.name, str(d), tuple(curves), load_throughput(d))
