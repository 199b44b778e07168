"""Measured traces from real GPU clusters and their loaders (package data with licences in ``data/``).

* ``load_pollux(dir)``: a workload directory in the Pollux trace format (validation curves per
  global batch, step / sync times per local batch and placement);
* ``load_pai_job(file)``: per-worker mini-batch times of a PAI job; ``load_cov(file)``: the PAI
  coefficient-of-variation table.

``shipped_workload(name)`` / ``shipped_pai(name)`` return the paths of the copies shipped here
(attribution and licences: ``data/README.md``, ``data/*/LICENSE``).
"""
from __future__ import annotations

from pathlib import Path

from dynamix_hvd.traces.csvio import TraceError
from dynamix_hvd.traces.pai import PaiJob, load_cov, load_pai_job
from dynamix_hvd.traces.pollux import Curve, PolluxWorkload, ThroughputTable, load_pollux

DATA_DIR = Path(__file__).resolve().parent / "data"


def shipped_workloads() -> list[str]:
    return sorted(p.name for p in (DATA_DIR / "pollux").iterdir() if p.is_dir())


def shipped_workload(name: str) -> Path:
    p = DATA_DIR / "pollux" / name
    if not p.is_dir():
        raise TraceError(p, f"no shipped workload {name!r}; shipped: {shipped_workloads()}")
    return p


def shipped_pai(name: str) -> Path:
    p = DATA_DIR / "pai" / (name if name.endswith(".csv") else name + ".csv")
    if not p.is_file():
        raise TraceError(p, "no such shipped PAI trace")
    return p


__all__ = ["TraceError", "Curve", "PolluxWorkload", "ThroughputTable", "PaiJob", "load_pollux", "load_pai_job",
           "load_cov", "DATA_DIR", "shipped_workloads", "shipped_workload", "shipped_pai"]
