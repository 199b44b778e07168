"""Policy inference latency and simulator speed.

    .venv/bin/python benchmarks/bench_policy.py [--policy PATH] [--repeats 200]

Prints, per world size, the median and p95 latency of
  * forward: the shared-row actor on an (N, F) observation (torch, 1 thread), and
  * decide:  PPOController.decide on a ClusterState (build observation + forward + action -> sizes),
and the simulator's raw decisions/s and the gym env's steps/s. Targets (issue 6): decide <= 2 ms at
4 workers and <= 20 ms at 1024 workers; simulator >= 10,000 decisions/s.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch

from dynamix_hvd.agent.env import DynamixEnv, EnvConfig
from dynamix_hvd.agent.sim import ClusterSim, SimConfig
from dynamix_hvd.controllers import make_controller
from dynamix_hvd.plan import Plan, PlanBounds
from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats


def _state(n: int, rng: np.random.Generator) -> ClusterState:
    ws = [WorkerStats(rank=r, batch_size=32, max_batch=256, compute_s=float(rng.uniform(0.01, 0.05)), step_s=0.08,
                      comm_s=0.03, allreduce_p50_s=0.02, nic_tx_Bps=1e8, nic_rx_Bps=1e8, link_capacity_Bps=1.25e9,
                      cpu_util=0.7, mem_headroom=0.5) for r in range(n)]
    return ClusterState(Plan.uniform(n, 32), ws, GlobalStats(progress=0.5, noise_scale=500.0, loss_trend=-0.01,
                                                             grad_var_trend=0.0))


def _pct(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs) * 1e3
    return float(np.median(a)), float(np.percentile(a, 95))


def bench_inference(policy: str | None, sizes: list[int], repeats: int) -> list[tuple[int, float, float, float, float]]:
    rows = []
    rng = np.random.default_rng(0)
    for n in sizes:
        ctl = make_controller("ppo", PlanBounds(max_batch=(256,) * n), 32, policy=policy)
        st = _state(n, rng)
        obs = ctl.observe(st)
        for _ in range(10):
            ctl.net.act_rows(obs)
            ctl.decide(st)
        fw, dc = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            ctl.net.act_rows(obs)
            fw.append(time.perf_counter() - t)
            t = time.perf_counter()
            ctl.decide(st)
            dc.append(time.perf_counter() - t)
        rows.append((n, *_pct(fw), *_pct(dc)))
    return rows


def bench_sim(seconds: float = 3.0) -> tuple[float, float]:
    sim = ClusterSim(SimConfig(), seed=0)
    n, t0 = 0, time.perf_counter()
    s = 0
    while time.perf_counter() - t0 < seconds:
        sim.reset(s)
        s += 1
        b = [sim.cluster.base_batch] * sim.cluster.n
        while not sim.done:
            sim.step(b)
            n += 1
    sim_rate = n / (time.perf_counter() - t0)
    env = DynamixEnv(EnvConfig())
    env.reset(seed=0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        n += 1
        if term or trunc:
            env.reset()
    return sim_rate, n / (time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default=None)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--sizes", default="4,32,256,1024")
    args = p.parse_args()
    torch.set_num_threads(1)
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"host: {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, "
          f"load avg {open('/proc/loadavg').read().split()[0]}")
    print("| workers | forward p50 ms | forward p95 ms | decide p50 ms | decide p95 ms |")
    print("|--------:|---------------:|---------------:|--------------:|--------------:|")
    for n, f50, f95, d50, d95 in bench_inference(args.policy, sizes, args.repeats):
        print(f"| {n:7d} | {f50:14.3f} | {f95:14.3f} | {d50:13.3f} | {d95:13.3f} |")
    sim_rate, env_rate = bench_sim()
    print(f"simulator: {sim_rate:,.0f} decisions/s (physics + arrays, workers 2..64 log-uniform); "
          f"gym env incl. observation + reward: {env_rate:,.0f} steps/s")
    print("reproduce: .venv/bin/python benchmarks/bench_policy.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
