"""Observation building: shapes, normalisation, missing data, groups, sim/records equivalence."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dynamix_hvd.agent.sim import ClusterSim, SimConfig
from dynamix_hvd.plan import Plan
from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats
from dynamix_hvd.state import (FEATURE_GROUPS, FEATURE_NAMES, N_FEATURES, ObsConfig, ObservationError,
                               build_observation, observation_from_arrays, pad_rows, raw_worker_matrix)


def _state(n=4, scale=1.0, nan_net=False):
    ws = []
    for r in range(n):
        nan = float("nan")
        ws.append(WorkerStats(rank=r, batch_size=16 * (r + 1), max_batch=128, compute_s=scale * 0.01 * (r + 1),
                              step_s=scale * 0.05, comm_s=scale * (0.05 - 0.01 * (r + 1)),
                              allreduce_p50_s=nan if nan_net else scale * 0.01,
                              nic_tx_Bps=nan if nan_net else 1e8, nic_rx_Bps=nan if nan_net else 1e8,
                              link_capacity_Bps=nan if nan_net else 1.25e9, cpu_util=0.5, mem_headroom=0.4))
    return ClusterState(Plan(0, tuple(w.batch_size for w in ws)), ws,
                        GlobalStats(progress=0.3, noise_scale=100.0, loss_trend=-0.01, grad_var_trend=0.0))


def test_shape_finite_and_bounded():
    obs = build_observation(_state())
    assert obs.shape == (4, N_FEATURES) and obs.dtype == np.float32
    assert np.all(np.isfinite(obs)) and np.all(np.abs(obs) <= 4.0)
    assert len(FEATURE_NAMES) == N_FEATURES


def test_missing_metrics_become_zero_with_indicator():
    obs = build_observation(_state(nan_net=True))
    col = FEATURE_NAMES.index
    assert np.all(obs[:, col("net_missing")] == 1.0)
    assert np.all(obs[:, col("nic_util")] == 0.0)
    assert np.all(obs[:, col("gpu_util")] == 0.0) and np.all(obs[:, col("sys_missing")] == 1.0)
    full = build_observation(_state())
    assert np.all(full[:, col("net_missing")] == 0.0)


def test_statistics_missing_flag():
    s = _state()
    s.glob = GlobalStats()
    obs = build_observation(s)
    assert np.all(obs[:, FEATURE_NAMES.index("stat_missing")] == 1.0)
    assert np.all(np.isfinite(obs))


def test_time_unit_invariance():
    """A cluster 10x slower in every timing looks the same (transfer across model sizes)."""
    a, b = build_observation(_state(scale=1.0)), build_observation(_state(scale=10.0))
    log_ar = FEATURE_NAMES.index("log_allreduce_s")
    mask = np.ones(N_FEATURES, bool)
    mask[log_ar] = False
    assert np.allclose(a[:, mask], b[:, mask], atol=1e-5)


def test_faster_worker_gets_positive_speed_over_share():
    obs = build_observation(_state())
    col = FEATURE_NAMES.index("log_speed_over_share")
    # all ranks have the same time per sample, so batch shares 1..4 -> smaller ranks are "underloaded"
    assert obs[0, col] > 0 > obs[3, col]


@pytest.mark.parametrize("group", ["network", "statistical"])
def test_disabled_group_is_zeroed_and_shape_kept(group):
    obs = build_observation(_state(), config=ObsConfig(frozenset({group})))
    cols = [i for i, n in enumerate(FEATURE_NAMES) if FEATURE_GROUPS[n] == group]
    assert cols and obs.shape == (4, N_FEATURES) and np.all(obs[:, cols] == 0.0)


def test_unknown_group_is_an_error():
    with pytest.raises(ObservationError, match="unknown groups"):
        ObsConfig(frozenset({"bogus"}))


def test_an_enabled_feature_survives_its_disabled_group():
    cfg = ObsConfig(frozenset({"network", "system"}), enabled_features=frozenset({"mean_comm_frac"}))
    obs = build_observation(_state(), config=cfg)
    full = build_observation(_state())
    j = FEATURE_NAMES.index("mean_comm_frac")
    others = [i for i, n in enumerate(FEATURE_NAMES) if FEATURE_GROUPS[n] == "network" and i != j]
    assert full[0, j] > 0 and np.all(obs[:, j] == full[:, j]) and np.all(obs[:, others] == 0.0)
    back = ObsConfig.from_dict(cfg.to_dict())
    assert back == cfg and back.with_levels(7).enabled_features == cfg.enabled_features
    assert "enabled_features" not in ObsConfig(frozenset({"network"})).to_dict()   # old files unchanged
    assert ObsConfig.from_lists("network,system", "mean_comm_frac") == cfg        # train-policy --disable / --enable
    assert ObsConfig.from_lists("") == ObsConfig()


@pytest.mark.parametrize("features, match", [({"bogus"}, "unknown features"),
                                             ({"mean_comm_frac"}, "not disabled")])
def test_enabled_features_are_checked(features, match):
    with pytest.raises(ObservationError, match=match):
        ObsConfig(frozenset({"statistical"}), enabled_features=frozenset(features))


def test_bad_batch_sizes_raise():
    with pytest.raises(ObservationError):
        observation_from_arrays(np.zeros((2, 3)), noise_scale=1, loss_trend=0, grad_var_trend=0,
                                val_loss_trend=0, progress=0, ref_global_batch=1)


def test_sim_arrays_path_equals_records_path():
    sim = ClusterSim(SimConfig(), seed=0)
    for seed in range(5):
        sim.reset(seed)
        cl = sim.cluster
        plan = Plan.uniform(cl.n, cl.base_batch)
        out = sim.step(plan.batch_sizes)
        last = np.arange(cl.n) % 3 - 1.0
        a = observation_from_arrays(out["raw"], noise_scale=out["noise_scale"], loss_trend=out["loss_trend"],
                                    grad_var_trend=out["grad_var_trend"], val_loss_trend=out["val_loss_trend"],
                                    progress=out["progress"], ref_global_batch=cl.ref_global_batch,
                                    last_action=last, last_global_action=0.5)
        state = sim.cluster_state(plan, out, last_action=last)
        b = build_observation(state, ref_global_batch=cl.ref_global_batch, last_global_action=0.5)
        assert np.array_equal(a, b)
        assert np.allclose(raw_worker_matrix(state), out["raw"], equal_nan=True)


def test_pad_rows():
    obs = build_observation(_state())
    p = pad_rows(obs, 8)
    assert p.shape == (8, N_FEATURES + 1) and p[:4, 0].sum() == 4 and p[4:].sum() == 0
    with pytest.raises(ObservationError):
        pad_rows(obs, 3)
    assert math.isclose(float(p[0, 1]), float(obs[0, 0]))
