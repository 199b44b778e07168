"""The replay-world gym env, its worlds, curriculum, training and evaluation (issue 19)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from dynamix_hvd.controllers.policy.actions import ActionConfig
from dynamix_hvd.agent.curriculum import WorldPool
from dynamix_hvd.controllers.policy.history import N_HISTORY, WorkerHistory
from dynamix_hvd.agent.replay_env import ReplayEnv, ReplayEnvConfig
from dynamix_hvd.agent.replay_eval import summarise
from dynamix_hvd.replay.paired import geomean_interval, ratio_interval
from dynamix_hvd.replay.worlds import (Perturbation, WorldDraw, WorldSpec, _throughput, _workload, build_sim,
                                      perturb_progress, synthetic_trace, with_cap)
from dynamix_hvd.state import N_FEATURES

SMALL = ReplayEnvConfig(workloads=("cifar10",), traces=("none", "synthetic"), n_range=(2, 4), n_max=8)


def _noop(env: ReplayEnv) -> np.ndarray:
    a = np.full(env.action_space.shape, env.cfg.action.k)
    a[-1] = env.cfg.action.noop_global
    return a


def _episode(env: ReplayEnv, options: dict, policy=None) -> tuple[list[np.ndarray], list[float], dict]:
    obs, _ = env.reset(options=options)
    seen, rewards = [obs], []
    while True:
        if policy is None:
            a = _noop(env)
        else:
            n = env.sim.n
            idx, g = policy.mlp_extractor.act_rows(obs[:n, 1:], deterministic=True)
            a = np.concatenate([idx, np.full(env.cfg.n_max - n, env.cfg.action.k), [g]])
        obs, r, term, trunc, info = env.step(a)
        seen.append(obs)
        rewards.append(r)
        if term or trunc:
            return seen, rewards, info


def test_spaces_and_shapes():
    env = ReplayEnv(SMALL, pool_seed=3)
    obs, info = env.reset(seed=0)
    assert obs.shape == (8, N_FEATURES + N_HISTORY + 1) == env.observation_space.shape
    assert env.observation_space.contains(obs)
    n = env.sim.n
    assert obs[:n, 0].sum() == n and not obs[n:].any()          # mask column, padded rows zero
    obs2, r, term, trunc, _ = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs2) and math.isfinite(r)
    no_hist = ReplayEnv(ReplayEnvConfig(workloads=("cifar10",), n_range=(2, 4), n_max=8, history=0), pool_seed=3)
    assert no_hist.observation_space.shape == (8, N_FEATURES + 1)


def test_deterministic_per_seed_and_return_is_time_vs_goodput():
    spec = WorldSpec("cifar10", 4, "synthetic", 12, Perturbation(sample_scale=0.5, sync_scale=2.0))
    a = _episode(ReplayEnv(SMALL, pool_seed=0), {"spec": spec, "goodput_s": 400.0})
    b = _episode(ReplayEnv(SMALL, pool_seed=1), {"spec": spec, "goodput_s": 400.0})
    assert len(a[0]) == len(b[0]) and all(np.array_equal(x, y) for x, y in zip(a[0], b[0]))
    assert a[1] == b[1]
    info = a[2]
    assert info["reached"]
    # undiscounted return = scale x (1 - T / T_goodput) when the target is reached
    assert sum(a[1]) == pytest.approx(SMALL.reward_scale * (1.0 - info["time_s"] / 400.0), rel=1e-6, abs=1e-6)
    # the same pool seed draws the same worlds
    p1, p2 = WorldPool(WorldDraw(("cifar10", "bert")), seed=5, min_size=1), WorldPool(WorldDraw(("cifar10", "bert")), seed=5, min_size=1)
    assert p1.new_entry().spec == p2.new_entry().spec


def test_loss_penalty_charges_only_a_slower_finish():
    from dataclasses import replace
    spec = WorldSpec("cifar10", 4, "synthetic", 12, Perturbation(sample_scale=0.5, sync_scale=2.0))
    pen = replace(SMALL, loss_penalty=3.0)
    base = _episode(ReplayEnv(SMALL, pool_seed=0), {"spec": spec, "goodput_s": 400.0})
    T = base[2]["time_s"]
    for ref in (0.5 * T, 2.0 * T):        # the same episode, once slower than the reference, once faster
        plain = _episode(ReplayEnv(SMALL, pool_seed=0), {"spec": spec, "goodput_s": ref})
        charged = _episode(ReplayEnv(pen, pool_seed=0), {"spec": spec, "goodput_s": ref})
        assert charged[2]["time_s"] == plain[2]["time_s"] == T
        extra = pen.reward_scale * 3.0 * max(0.0, T / ref - 1.0)
        assert sum(charged[1]) == pytest.approx(sum(plain[1]) - extra, rel=1e-9, abs=1e-9)
        assert charged[1][:-1] == plain[1][:-1]            # only the last step pays
    assert extra == 0.0                                    # the faster case (last loop) paid nothing
    assert pen.to_dict()["replay_reward"]["loss_penalty"] == 3.0
    with pytest.raises(ValueError, match="loss_penalty"):
        replace(SMALL, loss_penalty=-1.0)


def _untrained_policy(tmp_path, cfg: ReplayEnvConfig, seed: int = 0, hidden: int = 16, noop_bias: float = 0.0):
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv
    from dynamix_hvd.controllers.policy.net import SharedRowPolicy
    from dynamix_hvd.controllers.policy.io import load_policy
    env = DummyVecEnv([lambda: ReplayEnv(cfg, pool_seed=seed)])
    model = PPO(SharedRowPolicy, env, seed=seed, n_steps=8, batch_size=8, device="cpu",
                policy_kwargs=dict(hidden=hidden, dynamix_config=cfg.to_dict(), noop_bias=noop_bias))
    path = tmp_path / "p.zip"
    model.save(path)
    return path, load_policy(path)[0]


def test_env_acts_exactly_as_the_live_controller(tmp_path):
    """An env episode driven by a policy = `dynamix replay` with that policy file (same seed), the
    deployment guards off as in the env (no support recorded; ``refute=0`` and ``warmup=0``: the env
    trains the policy without the departure guard of sessions 40 and 42)."""
    from dynamix_hvd.replay.runner import run_controller
    cfg = ReplayEnvConfig(workloads=("cifar10",), n_range=(2, 8), n_max=8)
    path, policy = _untrained_policy(tmp_path, cfg)
    for spec in (WorldSpec("cifar10", 8, "job_3_norm", 3), WorldSpec("bert", 5, "synthetic", 4)):
        opts = {"spec": spec, "goodput_s": 1e9, "goodput_decisions": 10 ** 6}   # never truncated: run to the target
        _, _, info = _episode(ReplayEnv(cfg, pool_seed=0), opts, policy)
        live = run_controller(build_sim(spec), f"ppo:{path}?refute=0&warmup=0", spec.seed)
        assert live["time_to_target_s"] == pytest.approx(info["time_s"], rel=1e-12)


def test_the_noop_policy_is_the_goodput_controller():
    """The anchored policy's no-op is goodput's choice: an episode that always picks it ends
    exactly where the goodput controller's does. (Until session 28 the anchor's switching
    threshold compared against its own previous choice, not the plan the safety layer let
    through: on this world 4,551 s against goodput's 3,988 s.)"""
    from dynamix_hvd.replay.runner import run_controller
    cfg = ReplayEnvConfig(history=0)
    for spec in (WorldSpec("bert", 8, "none", 10), WorldSpec("cifar10", 8, "job_3_norm", 6)):
        g = run_controller(build_sim(spec), "goodput", spec.seed)
        _, _, info = _episode(ReplayEnv(cfg), {"spec": spec, "goodput_s": 1e9, "goodput_decisions": 10 ** 6})
        assert info["reached"] and info["time_s"] == pytest.approx(g["time_to_target_s"], rel=1e-12)


def test_history_features_tell_lasting_from_transient():
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats

    def state(times):
        return ClusterState(Plan.uniform(3, 10), [WorkerStats(rank=r, batch_size=10, max_batch=64, compute_s=t)
                                                  for r, t in enumerate(times)], GlobalStats())
    h = WorkerHistory(window=4)
    for _ in range(4):
        f = h.features(state([1.0, 1.0, 2.0]))      # rank 2 lastingly 2x slower
    assert f[2, 0] > 0.4 and f[2, 3] == 1.0 and abs(f[2, 2]) < 1e-6
    s = state([1.0, 3.0, 2.0])                      # rank 1 just slowed down
    f = h.features(s)
    assert f[1, 2] > 0.25 and f[1, 3] == 0.25 and f[1, 2] > f[2, 2] and f[2, 0] > f[1, 0]
    assert h.features(s) is f                       # the same state is added once
    assert len(h.rows) == 4


def test_worlds_perturbations():
    _, pm = _workload("deepspeech2")
    assert perturb_progress(pm, Perturbation()) is pm
    p2 = perturb_progress(pm, Perturbation(sample_scale=2.0))
    fin = np.isfinite(pm.cum)
    assert np.allclose(p2.cum[fin], 2 * pm.cum[fin]) and not np.isnan(p2.cum).any()
    warped = perturb_progress(pm, Perturbation(batch_warp=(0.2, 0.0)))
    assert warped.cum[-1, -1] > pm.cum[-1, -1] and warped.cum[0, -1] == pm.cum[0, -1]
    tp = _throughput("cifar10", 8)
    small = with_cap(tp, 200)
    assert small.cap <= 200 < tp.cap and small.idx.size == small.cap + 1
    assert np.allclose(small.rank_times(np.ones(2), np.array([32, 64])), tp.rank_times(np.ones(2), np.array([32, 64])))
    tr = synthetic_trace(6, np.random.default_rng(0))
    assert tr.series.shape[1] == 6 and (tr.series > 0).all()
    rng = np.random.default_rng(1)
    for _ in range(10):   # every drawn world builds and runs an interval
        spec = WorldDraw(("bert", "cifar10", "deepspeech2", "ncf"), n_range=(2, 16)).draw(rng)
        sim = build_sim(spec)
        sim.reset(spec.seed)
        sim.step(np.full(spec.n, sim.base_batch))
        assert spec.seed >= 1_000_000


def test_training_worlds_carry_the_noise_scale_model():
    # train-policy --gns-model continuous: every world a training run draws (DAgger's worlds, the
    # PPO pool's) is built with that model, and the policy's config records it
    from dynamix_hvd.agent.imitate import draw_worlds
    cfg = ReplayEnvConfig(n_range=(2, 8), n_max=8, gns_model="continuous")
    specs = draw_worlds(cfg, np.random.default_rng(0), 4)
    specs.append(WorldPool(WorldDraw(("ncf",), n_range=(2, 4), gns_model="continuous")).new_entry().spec)
    for spec in specs:
        assert spec.gns_model == "continuous" and build_sim(spec).gns_model == "continuous"
        assert spec.key() != WorldSpec(spec.workload, spec.n, spec.trace, spec.seed, spec.pert).key()
    assert cfg.to_dict()["gns_model"] == "continuous"
    import argparse
    from dynamix_hvd.agent.replay_train import config_from_args
    from dynamix_hvd.agent.train import add_arguments
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--world", "replay", "--workers", "2,8", "--gns-model", "continuous"])
    assert config_from_args(args).gns_model == "continuous"
    assert config_from_args(parser.parse_args(["--world", "replay", "--workers", "2,8"])).gns_model == "run"
    assert build_sim(WorldDraw(("ncf",), n_range=(2, 4)).draw(np.random.default_rng(0))).gns_model == "run"
    with pytest.raises(ValueError, match="gns_model='smooth'"):
        WorldSpec("ncf", 4, "none", 0, gns_model="smooth")


def test_training_worlds_can_draw_the_loss_trends_noise():
    """train-policy --loss-noise LO,HI: every training world (DAgger's, the PPO pool's, the support's)
    draws its loss-trend noise log-uniform in the range, after every other draw, so without it the worlds
    are those of earlier sessions; the policy's config records it; evaluation worlds keep 0.005."""
    import argparse
    from dynamix_hvd.agent.imitate import draw_worlds
    from dynamix_hvd.agent.replay_train import config_from_args
    from dynamix_hvd.agent.train import add_arguments
    from dynamix_hvd.replay.sim import LOSS_NOISE
    cfg = ReplayEnvConfig(n_range=(2, 8), n_max=8, loss_noise=(0.01, 0.05))
    plain = draw_worlds(ReplayEnvConfig(n_range=(2, 8), n_max=8), np.random.default_rng(3), 6)
    noisy = draw_worlds(cfg, np.random.default_rng(3), 6)
    noisy.append(WorldPool(WorldDraw(("ncf",), n_range=(2, 4), loss_noise=(0.01, 0.05))).new_entry().spec)
    assert all(p.loss_noise == LOSS_NOISE for p in plain)
    # the first world is the same but for its noise; the extra draw moves the next ones (the draws without
    # the option are those of earlier sessions: the shipped default's support is re-recorded byte for byte
    # by test_the_shipped_default_is_its_policy_with_the_support_the_command_records)
    assert replace(noisy[0], loss_noise=LOSS_NOISE) == plain[0] and noisy[1].seed != plain[1].seed
    for spec in noisy:
        assert 0.01 <= spec.loss_noise <= 0.05 and build_sim(spec).loss_noise == spec.loss_noise
        assert spec.key() != replace(spec, loss_noise=LOSS_NOISE).key() and "loss_noise=" in spec.label()
    assert len({s.loss_noise for s in noisy}) == len(noisy)
    assert cfg.to_dict()["loss_noise"] == [0.01, 0.05] and "loss_noise" not in ReplayEnvConfig().to_dict()
    # the noise is what separates the loss trend of two otherwise identical worlds
    trends = []
    for noise in (0.0, 0.05, 0.0):
        sim = build_sim(WorldSpec("cifar10", 4, "none", 5, loss_noise=noise))
        sim.reset(5)
        outs = [sim.step(np.full(4, sim.base_batch)) for _ in range(5)]
        trends.append([o["loss_trend"] for o in outs])
    assert trends[0] == trends[2] and trends[1] != trends[0]
    assert max(abs(a - b) for a, b in zip(trends[0], trends[1])) < 0.05 * 5
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args(["--world", "replay", "--workers", "2,8", "--loss-noise",
                                               "0.005,0.06"])).loss_noise == (0.005, 0.06)
    assert config_from_args(parser.parse_args(["--world", "replay", "--workers", "2,8"])).loss_noise is None
    for bad in ("0.06,0.005", "0,0.1", "x", "0.1"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--world", "replay", "--loss-noise", bad])
    with pytest.raises(ValueError, match="loss_noise"):
        ReplayEnvConfig(loss_noise=(0.1, 0.01))
    with pytest.raises(ValueError, match="loss_noise=-1"):
        build_sim(WorldSpec("ncf", 4, "none", 0, loss_noise=-1.0))


def test_training_smoke_learns_and_runs_live(tmp_path):
    """A few PPO updates in the replay world; the saved file loads into the live controller and
    its weights moved (a broken gradient path or a wrong dynamix_config fails here)."""
    from dynamix_hvd.controllers.policy.io import load_policy
    from dynamix_hvd.agent.replay_train import train_replay
    from dynamix_hvd.replay.runner import run_controller
    # deepspeech2 at 6-8 ranks: about 200 decisions an episode at the hook's 10 steps per decision
    # (cifar10 at 2-3 ranks takes thousands since the replay decides at the hook's cadence)
    cfg = ReplayEnvConfig(workloads=("deepspeech2",), traces=("none",), n_range=(6, 8), n_max=8, perturb_prob=0.0,
                          action=ActionConfig(global_scales=(0.8, 1.0, 1.25)))
    _, before = _untrained_policy(tmp_path, cfg, seed=1, hidden=64, noop_bias=2.0)   # train_replay's initial weights
    w0 = before.mlp_extractor.embed_pi[0].weight.detach().numpy().copy()
    out = tmp_path / "trained.zip"
    # 640 steps, 2 envs: 320 decisions each
    meta = train_replay(cfg, 640, 1, out, n_envs=2, hidden=64, verbose=False)
    assert meta["episodes"] >= 1 and (tmp_path / "trained.json").is_file()
    pol, dyn = load_policy(out)
    assert dyn["history"] == {"window": 8} and dyn["world"] == "replay"
    assert pol.mlp_extractor.n_features == N_FEATURES + N_HISTORY + 1
    w1 = pol.mlp_extractor.embed_pi[0].weight.detach().numpy()
    assert w1.shape == w0.shape and np.abs(w1 - w0).max() > 1e-5
    r = run_controller(build_sim(WorldSpec("deepspeech2", 6, "none", 0)), f"ppo:{out}", 0)
    assert r["time_to_target_s"] is not None


def test_eval_summary_statistics():
    cells = [{"workload": "a", "trace": "none", "workers": 32,
              "median": {"static": 400.0, "goodput": 200.0, "hindsight": 100.0, "ppo": 150.0}},
             {"workload": "b", "trace": "none", "workers": 8,
              "median": {"static": 100.0, "goodput": 100.0, "hindsight": 95.0, "ppo": 101.0}}]
    s = summarise(cells, "ppo")
    assert s["geomean_vs_goodput"] == pytest.approx(math.sqrt(0.75 * 1.01))
    assert s["cells_gap_ge_1.15"] == 1 and s["geomean_vs_goodput_in_gap_cells"] == pytest.approx(0.75)
    assert s["max_vs_goodput"] == pytest.approx(1.01)
    assert s["gap_closed_mean"] == pytest.approx((0.5 + (-0.2)) / 2)
    assert s["vs_static_at_32"] == pytest.approx(150 / 400)


def test_ratio_interval_is_a_paired_bootstrap_of_the_ratio_of_medians():
    """The interval of median(policy) / median(goodput) resamples seeds as pairs: a policy 1.2x
    goodput on every seed has the point interval 1.2 however widely the worlds' times spread;
    unpaired draws would not. A cell whose times spread widely gets a wide interval around its
    ratio; a miss is infinitely slow; the same seed gives the same interval; bad input is named."""
    rng = np.random.default_rng(3)
    g = list(rng.uniform(5000, 11000, size=20))
    lo, hi = ratio_interval([1.2 * x for x in g], g)
    assert lo == pytest.approx(1.2) and hi == pytest.approx(1.2)
    assert ratio_interval(g, g) == (pytest.approx(1.0), pytest.approx(1.0))
    noisy = [x * f for x, f in zip(g, rng.uniform(0.85, 1.25, size=20))]
    lo, hi = ratio_interval(noisy, g)
    point = float(np.median(noisy) / np.median(g))
    assert lo < point < hi and hi - lo > 0.05
    assert ratio_interval(noisy, g) == (lo, hi)
    lo, hi = ratio_interval([None] * 20, g)
    assert lo == hi == math.inf
    with pytest.raises(ValueError, match="one per seed"):
        ratio_interval(g[:19], g)
    with pytest.raises(ValueError, match="level"):
        ratio_interval(g, g, level=1.5)
    cells = [{"workload": "a", "trace": "none", "workers": 8, "median": {"goodput": 100.0, "hindsight": 90.0,
              "static": 200.0, "ppo": 110.0}, "interval": {"ppo": (1.05, 1.2)}},
             {"workload": "a", "trace": "none", "workers": 32, "median": {"goodput": 100.0, "hindsight": 90.0,
              "static": 200.0, "ppo": 104.0}, "interval": {"ppo": (0.95, 1.1)}}]
    assert summarise(cells, "ppo")["cells_interval_above_1.03"] == 1



def test_geomean_interval_resamples_every_cells_seeds_as_pairs():
    """The interval of the geometric mean over cells of the ratio of medians: cells where A is 1.1x
    and 0.9x B on every seed give the point sqrt(0.99) however widely the worlds spread; noise
    within a cell widens it around the point; a miss is infinitely slow; bad input is named."""
    rng = np.random.default_rng(4)
    g1, g2 = list(rng.uniform(500, 900, size=20)), list(rng.uniform(30, 60, size=20))
    lo, hi = geomean_interval([([1.1 * x for x in g1], g1), ([0.9 * x for x in g2], g2)])
    assert lo == pytest.approx(math.sqrt(0.99)) and hi == pytest.approx(math.sqrt(0.99))
    noisy = [x * f for x, f in zip(g1, rng.uniform(0.95, 1.25, size=20))]
    point = math.sqrt(float(np.median(noisy) / np.median(g1)) * 0.9)
    lo, hi = geomean_interval([(noisy, g1), ([0.9 * x for x in g2], g2)])
    assert lo < point < hi and hi - lo > 0.02
    assert geomean_interval([(noisy, g1), ([0.9 * x for x in g2], g2)]) == (lo, hi)
    assert geomean_interval([([None] * 20, g1)]) == (math.inf, math.inf)
    with pytest.raises(ValueError, match="cell 1"):
        geomean_interval([(g1, g1), (g2[:19], g2)])
    with pytest.raises(ValueError, match="no cells"):
        geomean_interval([])

def test_trust_keeps_the_policy_to_departures_the_goodput_model_calls_near_ties():
    """PPO with ``trust`` takes a global scale other than the no-op only where the goodput model
    predicts at most that relative loss for it: on a world where the lookahead policy departs
    from goodput, a tiny trust refuses its departures (named in the decision's reason) and the
    run ends elsewhere than with trust off; bad options are refused by name."""
    from dynamix_hvd.controllers.ppo import PPOController
    from dynamix_hvd.decide import control_loop
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.replay.runner import build_controller, run_controller
    from dynamix_hvd.safety import MoveLimits
    pol = "dynamix_hvd/agent/policies/imitate_h20.zip"
    spec = WorldSpec("cifar10", 8, "none", 5)
    sim = build_sim(spec)
    sim.reset(spec.seed)
    ctl = build_controller(f"ppo:{pol}?trust=0.000001&warmup=0", sim, spec.seed)
    assert isinstance(ctl, PPOController) and ctl.trust == 1e-6
    refused = 0
    for _ in control_loop(sim, ctl, sim.bounds(), Plan.uniform(sim.n, sim.base_batch), limits=MoveLimits()):
        refused += "refused" in (ctl.last_reason or "")
    assert refused > 0
    off = run_controller(build_sim(spec), f"ppo:{pol}?warmup=0", spec.seed)["time_to_target_s"]
    assert sim.reached and sim.time != pytest.approx(off, rel=1e-6)
    with pytest.raises(ValueError, match="unknown option 'trsut'"):
        build_controller(f"ppo:{pol}?trsut=0.1", sim, 0)
    with pytest.raises(ValueError, match="trust=1.5"):
        build_controller(f"ppo:{pol}?trust=1.5", sim, 0)


def test_margin_keeps_the_policy_to_confident_departures():
    """PPO with ``margin`` takes its best global scale other than the no-op only where that logit
    beats the no-op's by ``margin``: with an unreachable margin the anchored policy is goodput, step for
    step (the no-op is goodput's plan), and without one it departs on this world; a bad margin
    is refused by name."""
    from dynamix_hvd.replay.runner import build_controller, run_controller
    pol = "dynamix_hvd/agent/policies/imitate_h20.zip"
    spec = WorldSpec("cifar10", 8, "none", 5)
    good = run_controller(build_sim(spec), "goodput", spec.seed)["time_to_target_s"]
    never = run_controller(build_sim(spec), f"ppo:{pol}?margin=1e9&warmup=0", spec.seed)["time_to_target_s"]
    free = run_controller(build_sim(spec), f"ppo:{pol}?warmup=0", spec.seed)["time_to_target_s"]
    assert never == pytest.approx(good, rel=1e-9)
    assert free != pytest.approx(good, rel=1e-6)
    # a negative margin departs where the no-op's logit is the best by less than that: with an
    # unreachable one, at every decision inside the support, so the run differs from the argmax's
    always = run_controller(build_sim(spec), f"ppo:{pol}?margin=-1e9&warmup=0", spec.seed)["time_to_target_s"]
    assert always != pytest.approx(free, rel=1e-6) and always != pytest.approx(good, rel=1e-6)
    sim = build_sim(spec)
    with pytest.raises(ValueError, match="margin=inf"):
        build_controller(f"ppo:{pol}?margin=inf", sim, 0)
    with pytest.raises(ValueError, match="margin='x'"):
        build_controller(f"ppo:{pol}?margin=x", sim, 0)
