"""Decision latency of the shipped policy at scale, on replayed cluster states (issue 19: <= 20 ms at
1024 simulated workers).

    nice -n 19 flock /tmp/dynamix-cpu.lock .venv/bin/python benchmarks/bench_decide_scale.py \\
        [--workers 4,64,256,1024] [--decisions 60] [--policy PATH] [--workload bert] \\
        [--trace cov:coefficient_variation] [--seed 0]

What is timed: ``decide.decide_plan`` (the live decision step: ``PPOController.decide`` = the
observation, the shared-row network, the goodput-model anchor and the evidence gate, then the
per-decision move limits ``safety.limit_proposal`` with the default ``MoveLimits``, then
``plan.next_plan``), on every decision of a replay-world episode at N workers, exactly as
``dynamix replay`` runs it (``replay.runner.run_controller``'s loop, one controller per episode).
The states are the replay simulator's ``ClusterState`` (measured step/compute/allreduce times with
measurement noise, a speed trace, drawn hardware, the noise-scale estimator); the NIC, CPU and
memory fields the traces lack are filled per rank (``fill_system``) so that the network and
system features are computed from numbers, as live. Not timed: the simulator's interval and the
building of the state (live: the Gather of the rows). One torch thread, as the hook sets, and one
OpenBLAS thread (``OPENBLAS_NUM_THREADS=1`` unless set: ``dynamix bench``'s ranks run with
``OMP_NUM_THREADS=1``). Measured on the 2-core shared machine: with OpenBLAS's default threads the
policy's numpy forward at 1024 rows took 23 ms wall instead of 0.6 ms (threads spinning for a
core another process holds).

Prints per N: decisions timed, wall p50 / p90 / max ms, the calling thread's CPU time p50 / p90
(what the decision costs without other processes' share of the core), and the first decision of
the run (lazy initialisation) separately.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time
from typing import Callable

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # before numpy: as the bench's ranks (OMP_NUM_THREADS=1)
import numpy as np  # noqa: E402

from dynamix_hvd.decide import decide_plan
from dynamix_hvd.plan import Plan
from dynamix_hvd.records import ClusterState
from dynamix_hvd.replay.runner import build_controller
from dynamix_hvd.replay.worlds import WorldSpec, build_sim
from dynamix_hvd.safety import MoveLimits


def fill_system(state: ClusterState, rng: np.random.Generator) -> ClusterState:
    """The state with the NaN NIC / CPU / GPU / memory fields replaced by plausible per-rank values."""
    ws = []
    for w in state.workers:
        ws.append(dataclasses.replace(
            w, nic_tx_Bps=float(rng.uniform(5e7, 1e9)), nic_rx_Bps=float(rng.uniform(5e7, 1e9)),
            link_capacity_Bps=1.25e9, cpu_util=float(rng.uniform(0.3, 1.0)), gpu_util=float(rng.uniform(0.3, 1.0)),
            mem_headroom=float(rng.uniform(0.1, 0.9)), allreduce_bytes=4e7))
    return dataclasses.replace(state, workers=ws)


def time_decisions(workload: str, trace: str, n: int, seed: int, controller: str, decisions: int,
                   transform: Callable[[ClusterState], ClusterState] | None = None,
                   clock: Callable[[], float] = time.perf_counter,
                   cpu_clock: Callable[[], float] = time.thread_time) -> tuple[np.ndarray, np.ndarray, list[float | None]]:
    """Run replay episodes of ``workload`` / ``trace`` at ``n`` workers (seeds ``seed``, ``seed``+1, ...)
    with ``controller`` through ``run_controller``'s loop until ``decisions`` decisions were timed.
    Returns (wall seconds per ``decide_plan`` call in order, the calling thread's CPU seconds per
    call, time to target of each finished episode or None when it ended without reaching it; the
    last, cut-off episode is not listed)."""
    times: list[float] = []
    cpu: list[float] = []
    ends: list[float | None] = []
    s = seed
    limits = MoveLimits()
    while len(times) < decisions:
        sim = build_sim(WorldSpec(workload, n, trace, s))
        sim.reset(s)
        ctl = build_controller(controller, sim, s)
        bounds = sim.bounds()
        plan = Plan.uniform(sim.n, sim.base_batch)
        out = sim.step(plan.batch_sizes)
        while not sim.done and len(times) < decisions:
            state = sim.cluster_state(plan, out)
            if transform is not None:
                state = transform(state)
            t0, c0 = clock(), cpu_clock()
            plan = decide_plan(ctl, state, bounds, sim.t, limits)[0]
            times.append(clock() - t0)
            cpu.append(cpu_clock() - c0)
            out = sim.step(plan.batch_sizes)
        if sim.done:
            ends.append(sim.time if sim.reached else None)
        s += 1
    return np.asarray(times), np.asarray(cpu), ends


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default="4,64,256,1024")
    p.add_argument("--decisions", type=int, default=60, help="decisions timed per N")
    p.add_argument("--policy", default="", help="policy file (default: the shipped default)")
    p.add_argument("--workload", default="bert")
    p.add_argument("--trace", default="cov:coefficient_variation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-fill", action="store_true", help="leave the NIC/CPU/memory fields NaN (as the replay has)")
    args = p.parse_args()
    import torch
    torch.set_num_threads(1)
    ctl = f"ppo:{args.policy}" if args.policy else "ppo"
    print(f"host: {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, "
          f"load avg {open('/proc/loadavg').read().split()[0]}; {args.workload} / {args.trace}, policy "
          f"{args.policy or 'shipped default'}, system fields {'NaN' if args.no_fill else 'filled'}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    print("| workers | decisions | first ms | wall p50 ms | wall p90 ms | wall max ms | CPU p50 ms | CPU p90 ms |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|")
    for n in [int(x) for x in args.workers.split(",") if x]:
        rng = np.random.default_rng(args.seed)
        tf = None if args.no_fill else (lambda st: fill_system(st, rng))
        t, c, _ = time_decisions(args.workload, args.trace, n, args.seed, ctl, args.decisions + 1, tf)
        ms, rest, cpu = t * 1e3, t[1:] * 1e3, c[1:] * 1e3
        print(f"| {n} | {rest.size} | {ms[0]:.2f} | {np.median(rest):.2f} | {np.percentile(rest, 90):.2f} | "
              f"{rest.max():.2f} | {np.median(cpu):.2f} | {np.percentile(cpu, 90):.2f} |", flush=True)
    print(f"load avg after: {open('/proc/loadavg').read().split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
