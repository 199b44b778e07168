"""Issue 19, session 24: is goodput's gap to the oracles the traces' run-to-run noise?

Each Pollux workload has one training run per batch size, so the replay's samples-to-level
curves carry that run's noise: in places a larger batch needs *fewer* samples for a segment
(bert's segments 1-3 at B = 384: 1.68x fewer than at 12), which an oracle can exploit and no
controller can know. This check projects every segment's log samples against log B onto slopes
in [0, 1] (least squares: a larger batch never needs fewer samples, never more steps) and runs
the baselines, the shipped policy and the oracles in both worlds, same seeds.

    .venv/bin/python benchmarks/truth_monotone.py --seeds 4            # the projected truth
    .venv/bin/python benchmarks/truth_monotone.py --seeds 4 --mono 0   # the replay's own
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def fit_slopes(x: np.ndarray, y: np.ndarray, lo: float = 0.0, hi: float = 1.0, iters: int = 20000) -> np.ndarray:
    """Least squares z ~ y with every slope (z[j+1] - z[j]) / (x[j+1] - x[j]) in [lo, hi]
    (accelerated projected gradient on the increments; the offset is eliminated)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    m = x.size
    if m < 2:
        return y.copy()
    dx = np.diff(x)
    A = np.tril(np.ones((m, m - 1)), -1)             # z = z0 + A d
    Ac, yc = A - A.mean(axis=0), y - y.mean()
    L = np.linalg.norm(Ac, 2) ** 2
    d = np.clip(np.diff(y), lo * dx, hi * dx)
    v, t = d.copy(), 1.0
    for _ in range(iters):
        dn = np.clip(v - Ac.T @ (Ac @ v - yc) / L, lo * dx, hi * dx)
        tn = (1 + math.sqrt(1 + 4 * t * t)) / 2
        v, d, t = dn + (t - 1) / tn * (dn - d), dn, tn
    return float(np.mean(y - A @ d)) + A @ d


def monotone_cum(batches: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """Per segment between metric levels, finite points only."""
    x = np.log(batches)
    seg = np.diff(cum, axis=1)
    out = seg.copy()
    for k in range(seg.shape[1]):
        ok = np.isfinite(seg[:, k]) & (seg[:, k] > 0)
        if ok.sum() >= 2:
            out[ok, k] = np.exp(fit_slopes(x[ok], np.log(seg[ok, k])))
    return np.concatenate([np.zeros((cum.shape[0], 1)), np.cumsum(out, axis=1)], axis=1)


def main(argv=None) -> int:
    import dynamix_hvd.replay.worlds as W
    from dynamix_hvd.replay.runner import run_one
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mono", type=int, default=1)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--workers", default="8,32")
    p.add_argument("--traces", default="none,job_3_norm")
    p.add_argument("--controllers", default="goodput,proportional,ppo,causal4,hindsight")
    a = p.parse_args(argv)
    if a.mono:
        orig = W._workload.__wrapped__

        @functools.lru_cache(maxsize=16)
        def projected(name):
            wl, pm = orig(name)
            return wl, dataclasses.replace(pm, cum=monotone_cum(pm.batches, pm.cum))
        W._workload = projected
    ctls = a.controllers.split(",")
    t0, rows = time.time(), []
    for wl in ("bert", "cifar10", "deepspeech2", "ncf"):
        for tr in a.traces.split(","):
            for n in map(int, a.workers.split(",")):
                r = {c: [] for c in ctls}
                for s in range(a.seeds):
                    sim = W.build_sim(W.WorldSpec(wl, n, tr, 5 + s))
                    for c in ctls:
                        t = run_one(sim, c, 5 + s)["time_to_target_s"]
                        r[c].append(math.inf if t is None else t)
                m = {c: float(np.median(v)) for c, v in r.items()}
                rows.append(m)
                print(f"{wl:12s} {tr:12s} N={n:3d} " + " ".join(f"{c} {m[c] / m['goodput']:.3f}" for c in ctls),
                      flush=True)
    print("geomean vs goodput: " + " ".join(
        f"{c} {np.exp(np.mean([math.log(m[c] / m['goodput']) for m in rows])):.3f}" for c in ctls)
        + f" ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
