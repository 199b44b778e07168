"""Noise-scale estimate from sampled steps against the every-step estimate, on the shipped workloads.

    mpirun --allow-run-as-root --oversubscribe -np 4 .venv/bin/python -m mpi4py \
        benchmarks/bench_gns_sampling.py [--workloads mnist1d_mlp,...] [--steps 400] [--every 2,5,10]

One real Horovod training run per workload (the hook, static controller, per-rank batch 32, Adam at
the workload's LR, a decision every ``--interval`` steps) with gradient statistics taken on every
step (``gns_every=1``); each step's per-rank |weighted local gradient|^2 and |G|^2 (the sum of
the ranks' shares) are recorded. The training does not depend on the statistics, so sampling
them as the hook does with ``gns_every=k`` (every k-th step, or more often when an interval
would hold fewer than ``measure.MIN_SAMPLES`` samples, plus the last step of each decision
interval) can be replayed exactly from the same record: per interval the mean of ``stats.gns_step_estimates`` over the
steps taken, into the same EMA (``NoiseScaleEstimator``). Prints, per workload and k, the
relative difference of the sampled noise scale to the every-step one at each decision after the
first ``--skip`` (median and max) and at the end.
"""
from __future__ import annotations

import argparse
import math
import statistics

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix, workloads
from dynamix_hvd.measure import MAX_SAMPLES, MIN_SAMPLES, GradNoise
from dynamix_hvd.stats import NoiseScaleEstimator, gns_step_estimates


def record(name: str, steps: int, interval: int, batch: int) -> list[tuple[int, int, list[float], float]]:
    """(step, T, per-rank c_i = (T/n_i)|weighted local|^2, |G|^2) per step, on rank 0 (|G|^2: the
    sum of the ranks' shares)."""
    model, data = workloads.build(name, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=workloads.get_workload(name).lr)
    dyn = Dynamix(model, opt, dataset_size=len(data), base_batch=batch, interval_steps=interval, gns_every=1, gns_samples=0,
                  collector=False, bn_min_batch=1)
    rows: list[tuple[int, int, float, float]] = []
    gns = dyn.gns
    orig = gns.finish

    def finish(total: int, n_local: int, reduced: object) -> None:
        # the hook's own statistics of this step: c_i = d(sum_tc) / T, this rank's share of
        # |G|^2 = d(sum_tg) / T
        tc, tg = gns.sum_tc, gns.sum_tg
        orig(total, n_local, reduced)
        c = (gns.sum_tc - tc) / total if gns.sum_tc != tc else math.nan
        g = (gns.sum_tg - tg) / total if gns.sum_tc != tc else math.nan
        rows.append((dyn.step_count, total, c, g))

    gns.finish = finish  # type: ignore[method-assign]
    epoch = 0
    while dyn.step_count < steps:
        for idx in dyn.batches(epoch):
            loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
            dyn.optimizer.zero_grad()
            loss.backward()
            dyn.optimizer.step()
            if dyn.step_count >= steps:
                break
        epoch += 1
    dyn._pending.clear()   # noqa: SLF001 - the epoch's iterator is abandoned on purpose
    dyn.close()
    mine = torch.tensor([[r[0], r[1], r[2], r[3]] for r in rows], dtype=torch.float64)
    allr = hvd.allgather(mine.unsqueeze(0), name=f"gns.{name}")   # (world, steps, 4)
    out = []
    for t in range(allr.shape[1]):
        step, T = int(allr[0, t, 0]), int(allr[0, t, 1])
        out.append((step, T, [float(allr[r, t, 2]) for r in range(allr.shape[0])], float(allr[:, t, 3].sum())))
    return out


def replay(rows: list[tuple[int, int, list[float], float]], interval: int, every: int, beta: float,
           samples: int = 0, min_samples: int = MIN_SAMPLES, max_samples: int = MAX_SAMPLES) -> list[float]:
    """The noise scale after each decision when statistics are taken on the sampled steps: the
    hook's rule (``GradNoise.sampled``): every k-th step (k = ``every``, or less on short
    intervals) of the last ``k x samples`` before each decision, and the step before it
    (``samples`` = 0: every k-th step)."""
    est = NoiseScaleEstimator(beta=beta)
    gn = GradNoise(0, 2, every, beta, samples)
    gn.min_samples, gn.max_samples = min_samples, max_samples
    out, s_acc, g_acc, n = [], 0.0, 0.0, 0
    for step, T, cs, g in rows:
        due = (step // interval + 1) * interval
        if gn.sampled(step, due, due - interval):
            s, g2 = gns_step_estimates(sum(cs), g, T, len(cs))
            if math.isfinite(s):
                s_acc, g_acc, n = s_acc + s, g_acc + g2, n + 1
        if (step + 1) % interval == 0:
            if n:
                est.update(s_acc / n, g_acc / n)
            out.append(est.noise_scale)
            s_acc, g_acc, n = 0.0, 0.0, 0
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default=",".join(workloads.WORKLOADS))
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--interval", type=int, default=10, help="the hook's decision interval while recording")
    p.add_argument("--intervals", default="10,50",
                   help="decision intervals replayed (the static controller's training does not depend on them; "
                        "with min_decision_s the hook's intervals are longer than interval_steps when steps are short)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--every", default="2,5,10")
    p.add_argument("--samples", default="0", help="sampled steps per decision (comma-separated; 0 = no limit)")
    p.add_argument("--skip", type=int, default=5, help="decisions before the EMA has settled, not compared")
    p.add_argument("--min-samples", default=str(MIN_SAMPLES),
                   help="sampled steps per interval at least (comma-separated; 1 = plain every k-th step)")
    p.add_argument("--max-samples", default=str(MAX_SAMPLES),
                   help="sampled steps per interval about at most (comma-separated; 0 = no limit, the rule "
                        "before session 14)")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    if hvd.rank() == 0:
        print(f"ranks {hvd.size()}, {args.steps} steps, decision every {args.interval}, per-rank batch {args.batch}")
    for name in args.workloads.split(","):
        rows = record(name, args.steps, args.interval, args.batch)
        if hvd.rank() != 0:
            continue
        for iv in (int(i) for i in args.intervals.split(",")):
            full = replay(rows, iv, 1, 0.9, 0, MIN_SAMPLES, 0)      # every step, however long the interval
            skip = max(1, args.skip * args.interval // iv)
            for k, m, ms, mx in ((int(e), int(m), int(q), int(x)) for e in args.every.split(",")
                                 for m in args.samples.split(",") for q in args.min_samples.split(",")
                                 for x in args.max_samples.split(",")):
                samp = replay(rows, iv, k, 0.9, m, ms, mx)
                rel = [abs(a / b - 1.0) for a, b in zip(samp[skip:], full[skip:])
                       if math.isfinite(a) and math.isfinite(b) and b > 0]
                if not rel:
                    print(f"{name:16s} interval {iv:3d} every {k:2d} samples {m:2d}: no finite estimates")
                    continue
                g = GradNoise(0, 2, k, 0.9)
                g.min_samples, g.max_samples = ms, mx
                print(f"{name:16s} interval {iv:3d} every {k:2d} min_samples {ms:2d} max_samples {mx:2d} "
                      f"(stride {g.stride(iv)}) "
                      f"samples {m:2d}: "
                      f"|sampled/every-step - 1| median "
                      f"{statistics.median(rel):.3f} max {max(rel):.3f} over {len(rel)} decisions; final "
                      f"{samp[-1]:.1f} vs {full[-1]:.1f} ({samp[-1] / full[-1] - 1:+.3f})", flush=True)
    if hvd.rank() == 0:
        print("reproduce: mpirun --allow-run-as-root --oversubscribe -np 4 .venv/bin/python -m mpi4py "
              "benchmarks/bench_gns_sampling.py")


if __name__ == "__main__":
    main()
