"""The replay's sync models (``replay/throughput.py``, session 76): "rank" charges each rank the sync
measured at its own local batch; "collective" charges every rank the sync measured where the compute
lasts as long as the slowest rank's (an allreduce leaves at the pacing rank's pace)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dynamix_hvd.agent.replay_eval import episode_key
from dynamix_hvd.replay.runner import make_world, run_one
from dynamix_hvd.replay.throughput import build_throughput
from dynamix_hvd.replay.worlds import WorldSpec, build_sim
from dynamix_hvd.traces import load_pollux, shipped_workload


def _models(workload: str, n: int):
    rank = build_throughput(load_pollux(shipped_workload(workload)).throughput, n)
    return rank, replace(rank, sync_model="collective")


@pytest.mark.parametrize("workload", ["cifar10", "deepspeech2", "bert", "ncf"])
def test_a_homogeneous_step_is_the_measured_one_in_both_models(workload):
    # at h = 1 and equal batches both models give the measured step time (compute + sync at b), on
    # the grid and between its points; also where the measured compute is not monotone in b (ncf)
    for n in (2, 8, 64):
        rank, coll = _models(workload, n)
        for b in list(rank.grid.astype(int)) + [int(x) for x in (rank.grid[1:] + rank.grid[:-1]) // 2]:
            bb = np.full(n, max(1, b))
            assert coll.rank_times(np.ones(n), bb).max() == pytest.approx(rank.rank_times(np.ones(n), bb).max(), rel=1e-9)


def test_a_slow_rank_hides_the_allreduce_behind_its_own_long_compute():
    # cifar10 at 8 ranks: the sync measured at 32 samples per rank is 150 ms, at 257 39 ms. A rank 4x
    # slower at 32 samples computes as long as a fast rank at ~210: the collective charges the
    # exposure of that compute time, the rank model the 150 ms of a fast rank's short backward
    rank, coll = _models("cifar10", 8)
    h = np.array([1.0] * 7 + [4.0])
    b = np.full(8, 32)
    comp = coll.compute_times(h, b)
    t_coll, t_rank = coll.rank_times(h, b), rank.rank_times(h, b)
    s_slow = float(coll.exposed(comp, b)[0])
    assert s_slow < 0.5 * rank.sync_at(np.array([32]))[0]
    assert t_coll.max() == pytest.approx(comp.max() + s_slow)
    assert t_rank.max() > 1.3 * t_coll.max()
    # the exposure is every rank's: the pacing rank's compute decides it
    assert np.allclose(t_coll - comp, s_slow)
    # and it is the homogeneous exposure at the batch whose h = 1 compute takes as long
    b_eq = float(np.interp(comp.max(), rank.compute, rank.grid))
    assert s_slow == pytest.approx(float(np.interp(b_eq, rank.grid, rank.sync)))


def test_the_collective_equal_time_split_equalises_compute_and_its_time_is_the_step():
    _, coll = _models("cifar10", 8)
    h = np.array([1.0, 1.0, 1.5, 2.0, 2.0, 3.0, 4.0, 4.0])
    totals = np.array([800.0, 2000.0, 4000.0])     # no rank at the smallest batch (its compute floor)
    T, cont = coll.equal_time(h, totals)
    assert np.allclose(cont.sum(axis=1), totals, rtol=1e-6)
    for t, row in zip(T, cont):
        b = np.round(row).astype(np.int64)
        comp = coll.compute_times(h, b)
        assert comp.max() / comp.min() < 1.1                 # equal compute, up to rounding
        assert coll.rank_times(h, b).max() == pytest.approx(t, rel=0.05)


def test_the_collective_world_reports_one_exposure_for_every_rank_and_runs_every_controller():
    sim = build_sim(WorldSpec("cifar10", 8, "none", 5, sync_model="collective"))
    sim.reset(5)
    out = sim.step(np.full(8, sim.base_batch))
    comp = sim.tp.compute_times(sim.hw, np.full(8, sim.base_batch))
    s = float(sim.tp.exposed(comp, np.full(8, sim.base_batch))[0])
    # what each rank measures as its allreduce: the same exposure, up to the timing noise
    assert out["raw"][:, 5] == pytest.approx(np.full(8, s), rel=0.2)
    assert np.ptp(out["raw"][:, 5]) < 0.2 * s
    w = make_world("cifar10", "none", 8, sync_model="collective")
    t = {c: run_one(w.sim, c, 5, guard=False)["time_to_target_s"] for c in ("static", "goodput", "causal_safe")}
    assert all(v is not None and v > 0 for v in t.values())
    assert t["goodput"] < t["static"]


def test_the_sync_model_is_checked_and_keeps_the_rank_worlds_keys():
    with pytest.raises(ValueError, match="sync_model='shared'"):
        WorldSpec("cifar10", 8, "none", 0, sync_model="shared")
    with pytest.raises(ValueError, match="sync_model='x'"):
        replace(build_throughput(load_pollux(shipped_workload("ncf")).throughput, 4), sync_model="x")
    assert episode_key("bert", "none", 8, 5, "goodput") == "bert|none|8|5|goodput"
    assert episode_key("bert", "none", 8, 5, "goodput", sync_model="collective") == "bert|none|8|5|goodput|sync=collective"
    assert WorldSpec("bert", 8, "none", 0).key() != WorldSpec("bert", 8, "none", 0, sync_model="collective").key()


def test_a_policy_trained_in_the_collective_world_draws_and_records_it():
    from dynamix_hvd.agent.imitate import draw_worlds
    from dynamix_hvd.agent.replay_env import ReplayEnvConfig
    from dynamix_hvd.agent.support_fit import training_world_specs
    cfg = ReplayEnvConfig(sync_model="collective")
    assert {w.sync_model for w in draw_worlds(cfg, np.random.default_rng(0), 4)} == {"collective"}
    d = cfg.to_dict()
    assert d["sync_model"] == "collective"
    # the support's rollouts run in the worlds the policy was trained in (its file's dynamix_config)
    assert {w.sync_model for w in training_world_specs(d, 2, 1)} == {"collective"}
    # a rank-world policy's configuration is as before (its file unchanged: no new key)
    assert "sync_model" not in ReplayEnvConfig().to_dict()
    with pytest.raises(ValueError, match="sync_model='own'"):
        ReplayEnvConfig(sync_model="own")
