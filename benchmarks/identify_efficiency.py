"""How many epochs a job would need to measure its own efficiency ratio from the validation metric
(issue 19; session 32).

A controller that does not know the workload's curves could measure how progress depends on the
batch by running two batches and comparing the metric's slope. Per measured run (validation-B.csv):
the metric's epoch-to-epoch scatter ``sigma`` (second differences: 1.4826 x median |d2| / sqrt(6),
robust to the curve's bend), its mean progress per epoch ``r`` over the middle half of the run, and
the epochs ``n`` each of the two batches must run for the ratio of their slopes to have a relative
standard error of 5% (least-squares slope over n equally spaced points: s.e. = sigma sqrt(12 / n^3);
two independent slopes: x sqrt 2), against the run's own length in epochs.

    PYTHONPATH=. .venv/bin/python benchmarks/identify_efficiency.py \\
        --workloads bert,cifar10,deepspeech2,ncf,benchmarks/heldout_workloads/yolov3,benchmarks/heldout_workloads/imagenet
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from dynamix_hvd.replay.runner import resolve_workload
from dynamix_hvd.traces import load_pollux


def epochs_needed(metric: np.ndarray, rel_se: float = 0.05) -> tuple[float, float, float]:
    """(sigma, mean |progress| per epoch over the middle half, epochs for ``rel_se`` on a slope ratio)."""
    m = np.asarray(metric, dtype=float)
    if m.size < 3:
        return math.nan, math.nan, math.nan          # no second difference: the scatter is not measurable
    sigma = 1.4826 * float(np.median(np.abs(np.diff(m, 2)))) / math.sqrt(6.0)
    lo, hi = m.size // 4, max(m.size // 4 + 2, 3 * m.size // 4)
    r = abs(float(m[hi - 1] - m[lo])) / max(hi - 1 - lo, 1)
    if r <= 0:
        return sigma, r, math.inf
    n = (math.sqrt(24.0) * sigma / (rel_se * r)) ** (2.0 / 3.0)
    return sigma, r, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="bert,cifar10,deepspeech2,ncf")
    ap.add_argument("--rel-se", type=float, default=0.05)
    a = ap.parse_args()
    print(f"{'workload':12s} {'B':>6s} {'epochs':>6s} {'sigma':>9s} {'r/epoch':>9s} {'needed':>7s} {'needed/run':>10s}")
    for w in a.workloads.split(","):
        wl = load_pollux(resolve_workload(w))
        name = w.rstrip("/").split("/")[-1]
        fr = []
        for c in wl.curves:
            s, r, n = epochs_needed(c.metric, a.rel_se)
            fr.append(n / c.metric.size)
            print(f"{name:12s} {c.batch:6d} {c.metric.size:6d} {s:9.4f} {r:9.4f} {n:7.1f} {n / c.metric.size:10.2f}")
        fr = [x for x in fr if math.isfinite(x)]
        print(f"{name:12s} median epochs needed per batch / epochs run: "
              + (f"{np.median(fr):.2f} (two batches: {2 * np.median(fr):.2f})" if fr else "n/a (fewer than 3 epochs per run)"))


if __name__ == "__main__":
    main()
