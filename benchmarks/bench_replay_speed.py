"""Speed of the replay simulator: simulated decisions per second at N ranks.

    flock /tmp/dynamix-cpu.lock .venv/bin/python benchmarks/bench_replay_speed.py --workers 32 \\
        --out docs/replay_speed.json

* ``simulator only``: ``ReplaySim.step`` (one decision interval of ``--interval-steps`` steps with
  the true per-rank times, progress update and the noisy measurements a controller would get),
  plan fixed; episodes restart (``reset``, counted) when the target is reached;
* ``+ static`` / ``+ goodput``: the whole controller loop of ``dynamix replay``: ClusterState
  records, ``decide()``, ``plan.next_plan`` and the step; the difference to simulator-only is the
  records' and the controller's own cost.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from dynamix_hvd.controllers import make_controller
from dynamix_hvd.plan import Plan, next_plan
from dynamix_hvd.replay.runner import make_world


def sim_only(sim, seconds: float) -> float:
    b = np.full(sim.n, sim.base_batch)
    n, seed = 0, 0
    sim.reset(seed)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(100):
            sim.step(b)
            n += 1
            if sim.done:
                seed += 1
                sim.reset(seed)
    return n / (time.perf_counter() - t0)


def with_controller(sim, name: str, seconds: float) -> float:
    n, seed = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sim.reset(seed)
        bounds = sim.bounds()
        ctl = make_controller(name, bounds, sim.base_batch)
        plan = Plan.uniform(sim.n, sim.base_batch)
        out = sim.step(plan.batch_sizes)
        while not sim.done and time.perf_counter() - t0 < seconds:
            plan = next_plan(plan, ctl.decide(sim.cluster_state(plan, out)), bounds, start_step=sim.t)
            out = sim.step(plan.batch_sizes)
            n += 1
        seed += 1
    return n / (time.perf_counter() - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=32)
    p.add_argument("--interval-steps", type=int, default=10)
    p.add_argument("--workloads", default="bert,cifar10,deepspeech2,ncf")
    p.add_argument("--traces", default="none,job_3_norm,cov:coefficient_variation")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    rows = []
    print(f"N={a.workers}, {a.interval_steps} steps per decision; decisions per second")
    print(f"{'workload':>12} {'speed trace':>26} {'simulator only':>15} {'+ static':>10} {'+ goodput':>10}")
    for w in a.workloads.split(","):
        for tr in a.traces.split(","):
            sim = make_world(w, tr, a.workers, interval_steps=a.interval_steps).sim
            r = {"workload": w, "speed_trace": tr, "sim_only": sim_only(sim, a.seconds),
                 "static": with_controller(sim, "static", a.seconds),
                 "goodput": with_controller(sim, "goodput", a.seconds)}
            rows.append(r)
            print(f"{w:>12} {tr:>26} {r['sim_only']:15.0f} {r['static']:10.0f} {r['goodput']:10.0f}", flush=True)
    so = [r["sim_only"] for r in rows]
    st = [r["static"] for r in rows]
    print(f"simulator only: min {min(so):.0f}, median {np.median(so):.0f} decisions/s; "
          f"with the static controller: min {min(st):.0f}, median {np.median(st):.0f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"workers": a.workers, "interval_steps": a.interval_steps, "rows": rows},
                                          indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
