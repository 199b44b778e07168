"""Samples per second gained by growing every local batch 1.6x, at 3-60% of the memory cap, on the replay's
measured step times (``replay.throughput``; equal ranks, no stragglers): the gain (b2 / t(b2)) / (b / t(b))."""
import numpy as np

from dynamix_hvd.replay.runner import resolve_workload
from dynamix_hvd.replay.throughput import build_throughput
from dynamix_hvd.traces.pollux import load_pollux

WORKLOADS = ("bert", "cifar10", "deepspeech2", "ncf",
             "benchmarks/heldout_workloads/yolov3", "benchmarks/heldout_workloads/imagenet")

for w in WORKLOADS:
    wl = load_pollux(resolve_workload(w))
    for n in (8, 32):
        tp = build_throughput(wl.throughput, n)
        step = lambda b: tp.rank_times(np.ones(n), np.full(n, b)).max()
        row = []
        for f in (0.03, 0.1, 0.2, 0.4, 0.6):
            b = max(2, int(f * tp.cap))
            b2 = min(tp.cap, int(round(b * 1.6)))
            row.append(f"{f:.2f}:{(b2 / step(b2)) / (b / step(b)):.2f}")
        print(f"{w.split('/')[-1]:12s} N={n:2d} cap={tp.cap:5d}", " ".join(row))
