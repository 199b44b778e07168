"""The hindsight oracle is never slower than any controller on any seed (same world per seed)."""
from __future__ import annotations

import numpy as np
import pytest

from dynamix_hvd.replay.oracle import candidate_batches, integer_split, run_causal, run_hindsight
from dynamix_hvd.replay.runner import make_world, run_controller
from dynamix_hvd.replay.throughput import equal_time_totals
from dynamix_hvd.traces import shipped_pai

CASES = [("cifar10", "job_3_norm", 4), ("deepspeech2", "none", 8), ("bert", "cov", 6),
         ("ncf", "job_2_norm", 3), ("cifar10", "cov", 16)]


def _trace(t: str) -> str:
    return "none" if t == "none" else (f"cov:{shipped_pai('coefficient_variation')}" if t == "cov" else str(shipped_pai(t)))


@pytest.mark.parametrize("workload,trace,n", CASES)
def test_oracle_never_slower(workload, trace, n):
    world = make_world(workload, _trace(trace), n)
    for seed in range(3):
        oracle = run_hindsight(world.sim, seed)["time_to_target_s"]
        assert oracle is not None
        for name in ("static", "proportional", "goodput", "random"):
            t = run_controller(world.sim, name, seed)["time_to_target_s"]
            assert t is None or oracle <= t * (1 + 1e-9), (workload, trace, n, seed, name, oracle, t)


def test_oracle_never_slower_than_ppo():
    world = make_world("deepspeech2", _trace("job_3_norm"), 4)
    for seed in range(2):
        oracle = run_hindsight(world.sim, seed)["time_to_target_s"]
        t = run_controller(world.sim, "ppo", seed)["time_to_target_s"]
        assert t is None or oracle <= t


def test_oracle_split_and_candidates():
    world = make_world("cifar10", "none", 4, speeds=[1, 1, 2, 4])
    sim = world.sim
    sim.reset(0)
    c = candidate_batches(sim)
    b = sim.bounds()
    assert c[0] == b.min_global_batch and c[-1] == b.max_global_batch and sim.B0 in c
    h = sim.hw.astype(float)
    T, cont = equal_time_totals(sim.tp.envelope(h), sim.tp.grid, c)
    assert np.allclose(cont.sum(axis=1), c, rtol=1e-6)
    for m in (0, len(c) // 2, len(c) - 1):
        split = integer_split(sim, h, int(c[m]), cont[m])
        assert split.sum() == c[m] and split.min() >= 1 and split.max() <= sim.tp.cap
        tau = sim.tp.rank_times(h, split)
        # the equal-time split beats the uniform split of the same global batch
        uni = np.full(4, int(c[m]) // 4)
        uni[: int(c[m]) - uni.sum()] += 1
        assert tau.max() <= sim.tp.rank_times(h, uni).max() + 1e-12
        assert split[3] <= split[0]                          # the 4x slower rank gets less


def test_the_causal_oracle_decides_on_the_interval_that_has_ended(monkeypatch):
    # the causal oracle may read the true speeds of steps already run, never of the coming ones
    from dynamix_hvd.replay import oracle
    world = make_world("cifar10", _trace("cov"), 4)
    sim = world.sim
    reads = []
    real = oracle._multipliers

    def spy(s, step0, K):
        reads.append((step0 + K, s.t))
        return real(s, step0, K)

    monkeypatch.setattr(oracle, "_multipliers", spy)
    r = oracle.run_causal(sim, 0)
    assert r["time_to_target_s"] is not None and r["found_by"] == "causal"
    assert len(reads) >= r["decisions"] - 1 > 5
    assert all(end <= now for end, now in reads), [x for x in reads if x[0] > x[1]][:3]
    # the hindsight oracle reads the coming interval (the spy sees it: the check above can fail)
    reads.clear()
    oracle.run_hindsight(sim, 0, n_constant=0)
    assert any(end > now for end, now in reads)


@pytest.mark.parametrize("workload,trace,n", [("cifar10", "job_3_norm", 4), ("deepspeech2", "cov", 8)])
def test_the_causal_oracle_sits_between_static_and_hindsight(workload, trace, n):
    world = make_world(workload, _trace(trace), n)
    for seed in range(2):
        hs = run_hindsight(world.sim, seed)["time_to_target_s"]
        causal = oracle_causal(world.sim, seed)
        static = run_controller(world.sim, "static", seed)["time_to_target_s"]
        # neither oracle is optimal (greedy): the causal one is within a few percent of hindsight
        assert 0.95 * hs <= causal < static, (seed, hs, causal, static)


def oracle_causal(sim, seed):
    from dynamix_hvd.replay.oracle import run_causal
    return run_causal(sim, seed)["time_to_target_s"]


def test_safe_candidates_are_what_the_safety_layer_lets_a_decision_reach():
    from dynamix_hvd.replay.oracle import safe_candidates
    grid = np.array([256, 400, 600, 900, 1400, 2000, 4000, 8000])
    c = safe_candidates(grid, 600.0, True, 0.0, 8000.0)          # stable: 1.5x either way
    assert c.min() == 400 and c.max() == 900 and 600 in c
    assert list(safe_candidates(grid, 600.0, False, 0.0, 8000.0)) == [600]      # unstable, no room: held
    c = safe_candidates(grid, 600.0, False, 700.0, 8000.0)     # unstable with room: growth up to it
    assert c.min() == 600 and c.max() == 700
    c = safe_candidates(grid, 6000.0, True, 0.0, 8000.0)       # never beyond the bounds
    assert c.max() == 8000 and c.min() == 4000


def test_the_causal_oracle_behind_the_safety_layer_moves_as_a_controller_may():
    from dynamix_hvd.replay.oracle import run_causal_safe
    world = make_world("ncf", "none", 8)
    sim = world.sim
    r = run_causal_safe(sim, 0)
    sched = np.array([sim.B0] + r["schedule"], dtype=float)
    step = sched[1:] / sched[:-1]
    assert sched.min() >= sim.B0 and step.max() <= 1.5 + 1e-3 and step.min() >= 1 / 1.5 - 1e-3
    # the estimator needs 4 intervals: the first decisions hold B0 (the unlimited causal oracle
    # jumps to the largest batch at once)
    assert (sched[:4] == sim.B0).all() and run_causal(sim, 0)["schedule"][0] > 4 * sim.B0
    assert r["time_to_target_s"] > run_causal(sim, 0)["time_to_target_s"]


def test_the_blind_causal_oracle_runs_the_static_plan_first():
    # causal_blind knows nothing before its first interval (the static plan, as every controller);
    # causal splits that interval by the true hardware speeds
    from dynamix_hvd.replay import oracle
    world = make_world("cifar10", "none", 4, speeds=[1, 1, 2, 4])
    sim = world.sim
    sim.reset(0)
    assert np.allclose(oracle.last_interval_multipliers(sim, blind=True), 1.0)
    assert np.allclose(oracle.last_interval_multipliers(sim), sim.hw)
    first = []
    real = sim.run_interval

    def spy(b):
        if not first:
            first.append(np.array(b))
        return real(b)

    sim.run_interval = spy
    try:
        r = oracle.run_causal(sim, 0, blind=True)
        assert r["found_by"] == "causal_blind" and np.ptp(first[0]) <= 1      # an even first split
        first.clear()
        t = oracle.run_causal(sim, 0)["time_to_target_s"]
        assert first[0][3] < first[0][0]                                      # the 4x slower rank gets less
    finally:
        del sim.run_interval
    assert t < r["time_to_target_s"]


def test_the_hindsight_oracle_behind_the_safety_layer_moves_as_a_controller_may():
    # every schedule it searches (greedy on the coming interval's speeds, ramps to one batch)
    # moves the global batch only as the safety layer lets a controller: 1.5x per decision, held
    # while the noise-scale estimate is unstable; it is never slower than causal_safe (one of them)
    from dynamix_hvd.replay.oracle import MoveLimits, _safe_episode, run_causal_safe, run_hindsight_safe
    world = make_world("ncf", "job_3_norm", 8)
    sim = world.sim
    grid = candidate_batches(sim)
    for toward in (None, int(grid.max())):
        t, sched = _safe_episode(sim, 1, grid, MoveLimits(), 3, toward, 10_000)
        s = np.array([sim.B0] + sched, dtype=float)
        step = s[1:] / s[:-1]
        assert np.isfinite(t) and step.max() <= 1.5 + 1e-3 and step.min() >= 1 / 1.5 - 1e-3
        assert (s[:4] == sim.B0).all()
    r = run_hindsight_safe(sim, 1)
    assert r["time_to_target_s"] <= run_causal_safe(sim, 1)["time_to_target_s"] + 1e-9
    assert r["time_to_target_s"] > run_hindsight(sim, 1)["time_to_target_s"]


def test_the_beam_search_behind_the_safety_layer_restores_exactly_and_moves_as_a_controller_may():
    from dynamix_hvd.replay.oracle import MoveLimits, _beam_safe, _restore, _snapshot
    world = make_world("ncf", "none", 8)
    sim = world.sim
    sim.reset(2)
    b = np.full(sim.n, sim.base_batch)
    snap = _snapshot(sim)
    outs = []
    for _ in range(2):           # the same interval from the same snapshot: the same observation
        _restore(sim, snap)
        iv = sim.run_interval(b)
        sim.commit(iv)
        outs.append((sim.P, sim.time, sim.observe(b, iv)["noise_scale"], sim.gns.updates))
    assert outs[0] == outs[1] and outs[0][3] == 1
    grid = candidate_batches(sim)
    t, sched = _beam_safe(sim, 2, grid, MoveLimits(), 4, 10_000)
    s = np.array([sim.B0] + sched, dtype=float)
    # within 1.5x either way, to the sample the rounding of the limit adds
    assert np.isfinite(t) and (s[1:] <= 1.5 * s[:-1] + 1).all() and (s[1:] >= s[:-1] / 1.5 - 1).all()
    assert (s[:4] == sim.B0).all()
