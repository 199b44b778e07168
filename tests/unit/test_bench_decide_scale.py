"""benchmarks/bench_decide_scale.py times the real decision path of ``dynamix replay``."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np

from dynamix_hvd.replay.runner import run_controller
from dynamix_hvd.replay.worlds import WorldSpec, build_sim

_spec = importlib.util.spec_from_file_location(
    "bench_decide_scale", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_decide_scale.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_timed_loop_is_the_replay_loop():
    """One full episode through the benchmark's loop ends where ``run_controller`` ends (same
    decisions, move limits included), and every decision is timed once."""
    ref = run_controller(build_sim(WorldSpec("cifar10", 6, "job_3_norm", 3)), "ppo", 3)
    n_dec = len(ref["schedule"]) - 1
    ticks = iter(range(10**6))
    times, cpu, ends = bench.time_decisions("cifar10", "job_3_norm", 6, 3, "ppo", n_dec + 2,
                                            clock=lambda: float(next(ticks)))
    assert ref["time_to_target_s"] is not None
    assert ends == [ref["time_to_target_s"]]
    assert times.shape == cpu.shape == (n_dec + 2,) and np.all(times == 1.0) and np.all(cpu >= 0)


def test_fill_system_fills_only_the_missing_metrics():
    sim = build_sim(WorldSpec("bert", 5, "none", 0))
    sim.reset(0)
    from dynamix_hvd.plan import Plan
    plan = Plan.uniform(5, sim.base_batch)
    st = sim.cluster_state(plan, sim.step(plan.batch_sizes))
    filled = bench.fill_system(st, np.random.default_rng(0))
    for a, b in zip(st.workers, filled.workers):
        assert math.isnan(a.cpu_util) and 0 < b.cpu_util <= 1 and 0 < b.mem_headroom < 1 and b.nic_tx_Bps > 0
        assert (a.compute_s, a.step_s, a.batch_size) == (b.compute_s, b.step_s, b.batch_size)
    assert filled.glob is st.glob and filled.plan is st.plan
