"""Env checker, tiny PPO training, PPO controller load/apply on any N, clear errors for bad files."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from stable_baselines3.common.env_checker import check_env  # noqa: E402

from dynamix_hvd.controllers.policy.actions import ActionConfig, proposal_from_action  # noqa: E402
from dynamix_hvd.agent.env import DynamixEnv, EnvConfig  # noqa: E402
from dynamix_hvd.agent.rollout import factory, run_episode  # noqa: E402
from dynamix_hvd.agent.sim import ClusterSim, SimConfig  # noqa: E402
from dynamix_hvd.controllers import make_controller  # noqa: E402
from dynamix_hvd.controllers.ppo import PolicyLoadError  # noqa: E402
from dynamix_hvd.plan import Plan, PlanBounds  # noqa: E402
from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats  # noqa: E402

SMALL = EnvConfig(sim=SimConfig(n_workers=(2, 6), episode_len=8), n_max=6)


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    from dynamix_hvd.agent.train import train
    out = tmp_path_factory.mktemp("pol") / "tiny.zip"
    meta = train(SMALL, 256, 0, out, n_envs=2, hidden=8, verbose=False,
                 ppo_kwargs=dict(n_steps=64, batch_size=64, n_epochs=1))
    assert out.is_file() and meta["timesteps"] == 256
    assert (out.parent / "tiny.json").is_file() and (out.parent / "tiny_curve.csv").is_file()
    return out


def test_env_passes_sb3_checker():
    check_env(DynamixEnv(SMALL), warn=False)


def test_env_episode_and_padding():
    env = DynamixEnv(SMALL)
    obs, info = env.reset(seed=0)
    n = info["n_workers"]
    assert obs.shape == (6, env.observation_space.shape[1]) and obs[:n, 0].sum() == n and obs[n:].sum() == 0
    steps, done = 0, False
    while not done:
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        assert np.isfinite(r) and env.observation_space.contains(obs)
        steps, done = steps + 1, term or trunc
    assert steps == SMALL.sim.episode_len - 1


def test_action_mapping_shifts_split_and_scales_total():
    bounds = PlanBounds(max_batch=(256,) * 3)
    cur = ActionConfig(anchor="current")
    prop, target = proposal_from_action([32, 32, 32], np.array([2, 0, -2]), 1, 96, cur, bounds)
    assert prop.sum() == pytest.approx(96) and prop[0] > prop[1] > prop[2]
    prop, target = proposal_from_action([32, 32, 32], np.zeros(3), 2, 96, cur, bounds)
    assert target == pytest.approx(120) and prop.sum() == pytest.approx(120)


def test_balanced_anchor_zero_action_is_the_equal_time_split():
    """With anchor='balanced' the zero action is the split equalising the *fitted* compute times
    (fixed + per-sample costs), whatever the current plan; levels move from there."""
    from dynamix_hvd.controllers.policy.actions import BalancedAnchor
    from dynamix_hvd.controllers.split import integer_split
    alpha, beta = np.array([0.010, 0.010, 0.004]), np.array([1e-3, 4e-3, 2e-3])
    anchor = BalancedAnchor()
    for sizes in ([32, 32, 32], [48, 20, 20]):          # two sizes per rank, > 25% apart: affine fit identified
        anchor.observe(_timed_state(sizes, alpha + beta * np.array(sizes, dtype=float)))
    bounds = PlanBounds(max_batch=(256,) * 3)
    cfg = ActionConfig(anchor="balanced")
    prop, target = proposal_from_action([48, 20, 20], np.zeros(3), 1, 96, cfg, bounds, anchor)
    fa, fb = anchor.model.fit()
    assert target == pytest.approx(96) and prop.sum() == pytest.approx(96)
    assert np.array_equal(prop, integer_split(fa, fb, 96, bounds))     # integers, rounded by predicted time
    t = alpha + beta * prop
    assert np.ptp(t) <= float(beta.max()) + 1e-9                      # equal to within one sample
    moved, _ = proposal_from_action([48, 20, 20], np.array([0, 0, -2]), 1, 96, cfg, bounds, anchor)
    assert moved[2] < prop[2] and moved.sum() == pytest.approx(96)
    with pytest.raises(ValueError, match="needs an anchor"):
        proposal_from_action([32, 32, 32], np.zeros(3), 1, 96, cfg, bounds)
    with pytest.raises(ValueError, match="anchor"):
        ActionConfig(anchor="plan")


def _timed_state(sizes, compute, noise_scale=float("nan")):
    ws = [WorkerStats(rank=r, batch_size=int(b), max_batch=256, compute_s=float(c), step_s=float(max(compute)) + 0.01,
                      allreduce_p50_s=0.005) for r, (b, c) in enumerate(zip(sizes, compute))]
    return ClusterState(Plan(0, tuple(int(b) for b in sizes)), ws, GlobalStats(noise_scale=noise_scale))


def test_goodput_anchor_zero_action_is_the_goodput_controllers_plan():
    """anchor='goodput': with all levels 0 and the neutral scale the proposal is what the goodput
    controller proposes for the same state sequence; the scales move its global batch."""
    from dynamix_hvd.controllers.policy.actions import GoodputAnchor
    bounds = PlanBounds(max_batch=(256,) * 3, min_global_batch=24)
    alpha, beta = np.array([0.010, 0.010, 0.004]), np.array([1e-3, 4e-3, 2e-3])
    anchor, ctl = GoodputAnchor(bounds, 32), make_controller("goodput", bounds, 32)
    cfg = ActionConfig(anchor="goodput")
    for sizes in ([32, 32, 32], [40, 20, 36], [44, 18, 34]):
        st = _timed_state(sizes, alpha + beta * np.array(sizes, dtype=float), noise_scale=40.0)
        anchor.observe(st)
        want = np.asarray(ctl.decide(st))
        prop, target = proposal_from_action(sizes, np.zeros(3), cfg.noop_global, 96, cfg, bounds, anchor)
        assert np.allclose(prop, want, atol=1.0) and target == pytest.approx(want.sum())   # goodput rounds to integers
    up, t_up = proposal_from_action(sizes, np.zeros(3), len(cfg.global_scales) - 1, 96, cfg, bounds, anchor)
    assert t_up == pytest.approx(want.sum() * cfg.global_scales[-1])


def test_goodput_anchor_scale_does_not_compound():
    """A policy that picks the 0.8 scale at every decision runs at 0.8x the model's global batch;
    it does not ratchet the batch down (0.8^k) through the model's switching threshold."""
    from dynamix_hvd.controllers.policy.actions import GoodputAnchor
    bounds = PlanBounds(max_batch=(256,) * 3, min_global_batch=8)
    alpha, beta = np.array([0.010, 0.010, 0.004]), np.array([1e-3, 4e-3, 2e-3])
    anchor, cfg = GoodputAnchor(bounds, 32), ActionConfig(anchor="goodput")
    sizes, targets = [32, 32, 32], []
    for _ in range(8):
        st = _timed_state(sizes, alpha + beta * np.array(sizes, dtype=float), noise_scale=40.0)
        anchor.observe(st)
        prop, target = proposal_from_action(sizes, np.zeros(3), 0, 96, cfg, bounds, anchor)
        targets.append(target)
        sizes = [max(1, int(round(x))) for x in prop]
    assert cfg.global_scales[0] == 0.8
    assert targets[-1] == pytest.approx(0.8 * anchor.B) and min(targets) > 0.6 * max(targets)


def test_policies_saved_before_the_anchor_keep_moving_the_current_plan():
    assert ActionConfig.from_dict({"n_levels": 5}).anchor == "current"
    assert ActionConfig.from_dict(ActionConfig().to_dict()).anchor == "goodput"


def _state(n, rng):
    ws = [WorkerStats(rank=r, batch_size=32, max_batch=256, compute_s=float(rng.uniform(0.01, 0.05)),
                      step_s=0.08, comm_s=0.03, allreduce_p50_s=0.02) for r in range(n)]
    return ClusterState(Plan.uniform(n, 32), ws, GlobalStats(progress=0.5, noise_scale=500.0))


@pytest.mark.parametrize("n", [3, 100])
def test_ppo_controller_applies_to_any_n(tiny_policy, n):
    ctl = make_controller("ppo", PlanBounds(max_batch=(256,) * n), 32, policy=str(tiny_policy))
    out = ctl.decide(_state(n, np.random.default_rng(n)))
    assert len(out) == n and all(np.isfinite(out)) and all(x > 0 for x in out)
    st = ctl.state_dict()
    ctl2 = make_controller("ppo", PlanBounds(max_batch=(256,) * n), 32, policy=str(tiny_policy))
    ctl2.load_state_dict(st)
    assert ctl2.target_B == ctl.target_B


def test_numpy_actor_matches_torch_and_follows_weight_updates():
    import torch
    from dynamix_hvd.controllers.policy.net import RowNet
    torch.manual_seed(0)
    net = RowNet(n_features=29, n_rows=8, n_levels=5, n_global=3, hidden=16)
    rng = np.random.default_rng(0)

    def torch_logits(obs):
        x = torch.cat([torch.ones(obs.shape[0], 1), torch.as_tensor(obs)], dim=1).unsqueeze(0)
        with torch.no_grad():
            row, glob = net.actor_logits(x)
        return row[0].numpy(), glob[0].numpy()

    for n in (1, 3, 8, 64):
        obs = rng.standard_normal((n, 28)).astype(np.float32)
        (rt, gt), (rn, gn) = torch_logits(obs), net.actor_logits_numpy(obs)
        assert np.allclose(rt, rn, atol=1e-5) and np.allclose(gt, gn, atol=1e-5)
        idx, gidx = net.act_rows(obs)
        assert np.array_equal(idx, rt.argmax(-1)) and gidx == int(gt.argmax())
    # an optimizer step changes the weights in place: the numpy copy must follow
    obs = rng.standard_normal((4, 28)).astype(np.float32)
    before = net.actor_logits_numpy(obs)[0].copy()
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    x = torch.cat([torch.ones(4, 1), torch.as_tensor(obs)], dim=1).unsqueeze(0)
    net.actor_logits(x)[0].sum().backward()
    opt.step()
    after = net.actor_logits_numpy(obs)[0]
    assert not np.allclose(before, after)
    assert np.allclose(after, torch_logits(obs)[0], atol=1e-5)


def test_ppo_controller_runs_in_rollout(tiny_policy):
    res = run_episode(ClusterSim(SMALL.sim), factory("ppo", policy=str(tiny_policy)), seed=1)
    assert np.isfinite(res.ret) and res.decisions == SMALL.sim.episode_len - 1


def test_missing_policy_file_is_a_clear_error(tmp_path):
    with pytest.raises(PolicyLoadError, match="not found"):
        make_controller("ppo", PlanBounds(max_batch=(64,) * 2), 32, policy=str(tmp_path / "nope.zip"))


def test_corrupt_policy_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"this is not a zip")
    with pytest.raises(PolicyLoadError, match="not a stable-baselines3 zip"):
        make_controller("ppo", PlanBounds(max_batch=(64,) * 2), 32, policy=str(bad))
    import zipfile
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as z:
        z.writestr("hello.txt", "x")
    with pytest.raises(PolicyLoadError, match="not a stable-baselines3 zip"):
        make_controller("ppo", PlanBounds(max_batch=(64,) * 2), 32, policy=str(tmp_path / "empty.zip"))


def test_wrong_observation_shape_is_a_clear_error(tiny_policy):
    ctl = make_controller("ppo", PlanBounds(max_batch=(64,) * 2), 32, policy=str(tiny_policy))
    with pytest.raises(PolicyLoadError, match="expects"):
        ctl.act(np.zeros((2, 5), dtype=np.float32))


def test_shipped_default_policy_loads_and_acts_only_inside_its_training_support():
    from dynamix_hvd.controllers.policy import DEFAULT_POLICY
    assert DEFAULT_POLICY.is_file(), f"the shipped policy {DEFAULT_POLICY} is package data"
    ctl = make_controller("ppo", PlanBounds(max_batch=(256,) * 4), 32)
    assert len(ctl.decide(_state(4, np.random.default_rng(0)))) == 4
    # since session 35 the default is a policy with its recorded training support (default.json; pass_only_s1 since 52,
    # its box alone since 53, pass_only_s0 with its box since 56, mem_use_s0 with its box since 74)
    assert ctl.supports[0] is not None and ctl.supports[0].columns


def test_env_and_controller_rollout_agree(tiny_policy):
    """The env (training) and the PPO controller on ClusterState records (live path) see the same
    observations and get the same return for the same simulated episode."""
    ctl = make_controller("ppo", PlanBounds(max_batch=(64,) * 2), 32, policy=str(tiny_policy))
    env = DynamixEnv(SMALL)
    obs, info = env.reset(seed=0, options={"sim_seed": 5})
    n, ret, done = info["n_workers"], 0.0, False
    while not done:
        idx, g = ctl.net.act_rows(obs[:n, 1:])
        action = np.concatenate([idx, np.full(SMALL.n_max - n, 2), [g]])
        obs, r, term, trunc, _ = env.step(action)
        ret, done = ret + r, term or trunc
    res = run_episode(ClusterSim(SMALL.sim), factory("ppo", policy=str(tiny_policy)), seed=5)
    assert res.ret == pytest.approx(ret, rel=1e-9)


def test_training_is_reproducible(tmp_path, tiny_policy):
    """Same seed, same config -> the same weights (the shipped policy can be rebuilt exactly)."""
    import torch

    from dynamix_hvd.agent.train import train
    out = tmp_path / "again.zip"
    train(SMALL, 256, 0, out, n_envs=2, hidden=8, verbose=False, ppo_kwargs=dict(n_steps=64, batch_size=64, n_epochs=1))
    from dynamix_hvd.controllers.ppo import load_policy
    a, _ = load_policy(tiny_policy)
    b, _ = load_policy(out)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), ka
