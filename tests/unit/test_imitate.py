"""DAgger imitation of the causal oracle in the replay world (agent/imitate.py)."""
from __future__ import annotations

import copy
import math

import numpy as np

import pytest

from dynamix_hvd.agent.imitate import (Sample, expert_label, fit, lookahead_label, rollout, scale_outcomes,
                                       soft_targets, time_to_level)
from dynamix_hvd.agent.replay_env import ReplayEnv, ReplayEnvConfig
from dynamix_hvd.controllers.policy.actions import ActionConfig
from dynamix_hvd.replay.runner import run_controller
from dynamix_hvd.replay.worlds import WorldSpec, build_sim

CFG = ReplayEnvConfig(history=0, n_max=16, n_range=(2, 16))


def _env_at_start(spec: WorldSpec) -> ReplayEnv:
    env = ReplayEnv(CFG)
    env.reset(options={"spec": spec, "goodput_s": 1.0})
    return env


def test_soft_targets():
    q = soft_targets(np.array([[0.0, 0.01, 0.5], [0.2, 0.2, 0.2]]), 0.02)
    assert np.allclose(q.sum(1), 1.0)
    assert q[0, 0] > q[0, 1] > q[0, 2] and q[0, 2] < 1e-9
    assert np.allclose(q[1], 1 / 3)


def test_expert_labels_the_noop_when_every_scale_leads_to_the_same_plan():
    """At the first decision the noise-scale estimate is not stable and has no room: the safety
    layer holds the global batch whatever the scale, so nothing beats the no-op."""
    env = _env_at_start(WorldSpec("deepspeech2", 8, "none", 5))
    Bj = scale_outcomes(env)
    assert np.all(Bj == Bj[CFG.action.noop_global])
    label, reg = expert_label(env)
    assert label == CFG.action.noop_global and np.all(reg == 0.0)


def test_time_to_level():
    traj = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 3.0], [5.0, 4.0]])
    assert time_to_level(traj, 1.0) == 0.0
    assert time_to_level(traj, 2.0) == pytest.approx(3.0)
    assert time_to_level(traj, 4.0) == 5.0
    assert math.isinf(time_to_level(traj, 4.5))


def test_lookahead_with_no_horizon_is_the_one_interval_expert():
    env = _env_at_start(WorldSpec("cifar10", 4, "none", 1))
    for _ in range(12):
        env.step(np.concatenate([np.full(CFG.n_max, CFG.action.k), [CFG.action.noop_global]]))
    a, ra = expert_label(env)
    b, rb = lookahead_label(env, 0)
    assert a == b and np.array_equal(ra, rb)


@pytest.mark.parametrize("horizon", [0, 5])
def test_labelling_does_not_change_the_episode(horizon):
    """``scale_outcomes`` and the lookahead branches try every scale on copies: an episode driven
    by the no-op with labels taken at every state ends exactly where the same episode without
    labels ends."""
    spec = WorldSpec("ncf", 4, "job_3_norm", 2)
    env = ReplayEnv(CFG)

    class Noop:
        class mlp_extractor:
            @staticmethod
            def act_rows(obs):
                return np.full(obs.shape[0], CFG.action.k), CFG.action.noop_global

    samples, t, reached = rollout(env, spec, policy=Noop, horizon=horizon)
    env2 = ReplayEnv(CFG)
    env2.reset(options={"spec": spec, "goodput_s": 1.0, "goodput_decisions": 201})
    noop = np.concatenate([np.full(CFG.n_max, CFG.action.k), [CFG.action.noop_global]])
    steps, done, info = 0, False, {}
    while not done:
        _, _, term, trunc, info = env2.step(noop)
        steps, done = steps + 1, term or trunc
    assert reached and info["reached"] and len(samples) == steps
    assert t == info["time_s"]


def test_expert_beats_goodput_where_the_true_curves_reward_another_batch():
    """deepspeech2 at 8 ranks: goodput's efficiency model misjudges the batch (session 23); the
    causal oracle restricted to the policy's own scales, through the live decision path, is faster."""
    spec = WorldSpec("deepspeech2", 8, "none", 5)
    samples, t, reached = rollout(ReplayEnv(CFG), spec)
    g = run_controller(build_sim(spec), "goodput", spec.seed)["time_to_target_s"]
    assert reached and t < 0.95 * g
    assert any(s.label != CFG.action.noop_global for s in samples)


def test_fit_learns_a_feature_dependent_label():
    """The global head fitted to regrets that depend on one global feature picks the right scale
    on both sides (a broken gradient path or target leaves the no-op everywhere)."""
    from types import SimpleNamespace

    import torch

    from dynamix_hvd.controllers.policy.net import RowNet
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    F = 8
    net = RowNet(F + 1, 16, 5, 3, 32)
    with torch.no_grad():
        net.global_pi.bias[1] = 2.0
    samples = []
    for _ in range(400):
        n = int(rng.integers(2, 9))
        obs = np.zeros((n, F + 1), np.float32)
        obs[:, 0] = 1.0
        obs[:, 1:] = rng.normal(size=(n, F)) * 0.1
        up = rng.random() < 0.5
        obs[:, 3] = 1.0 if up else -1.0          # a "global" feature, the same on every row
        reg = np.array([0.3, 0.1, 0.0]) if up else np.array([0.0, 0.1, 0.3])
        samples.append(Sample(obs, int(np.argmin(reg)), reg.astype(np.float32), "w"))
    fit(SimpleNamespace(mlp_extractor=net), samples, k=2, epochs=15, seed=0)
    picks = [net.act_rows(s.obs[:, 1:])[1] for s in samples[:50]]
    assert picks == [s.label for s in samples[:50]]


def test_the_regret_fit_acts_on_the_least_expected_regret_where_the_soft_fit_acts_on_the_most_often_best():
    """One observation, two kinds of outcome it cannot tell apart: 70% of the time scale 0 is best and
    scale 1 costs 2%, 30% of the time scale 0 costs 10% and scale 1 is best (scale 2 always 10%).
    Scale 0 is the best more often (the soft targets' mean favours it: 0.51 against 0.49 at T = 0.02);
    scale 1 has the lower expected regret (1.4% against 3%). ``objective="regret"`` picks scale 1,
    ``"soft"`` scale 0 (a regression that fell back to the soft targets, or the wrong sign, fails)."""
    from types import SimpleNamespace

    import torch

    from dynamix_hvd.controllers.policy.net import RowNet
    rng = np.random.default_rng(2)
    F, samples = 4, []
    for i in range(300):
        obs = np.zeros((3, F + 1), np.float32)
        obs[:, 0] = 1.0
        obs[:, 1:] = rng.normal(size=(3, F)) * 0.01
        reg = np.array([0.0, 0.02, 0.1] if i % 10 < 7 else [0.1, 0.0, 0.1], np.float32)
        samples.append(Sample(obs, int(np.argmin(reg)), reg, "w"))
    picks = {}
    for objective in ("soft", "regret"):
        torch.manual_seed(0)
        net = RowNet(F + 1, 16, 5, 3, 32)
        fit(SimpleNamespace(mlp_extractor=net), samples, k=2, epochs=15, seed=0, objective=objective)
        picks[objective] = np.mean([net.act_rows(s.obs[:, 1:])[1] for s in samples[:40]])
    assert picks == {"soft": 0.0, "regret": 1.0}, picks
    with pytest.raises(ValueError, match="objective='mse'"):
        fit(SimpleNamespace(mlp_extractor=net), samples, k=2, epochs=1, objective="mse")


def test_world_weights_count_each_training_job_once():
    from dynamix_hvd.agent.imitate import world_weights
    obs, reg = np.ones((2, 3), np.float32), np.zeros(3, np.float32)
    samples = [Sample(obs, 1, reg, "long")] * 9 + [Sample(obs, 1, reg, "short")]
    assert world_weights(samples) is None                     # the default: every decision once
    w = world_weights(samples, "worlds")
    assert w.mean() == pytest.approx(1.0) and w[-1] == pytest.approx(9 * w[0])     # each world sums to the same
    with pytest.raises(ValueError, match="balance='jobs'"):
        world_weights(samples, "jobs")


def test_a_world_balanced_fit_learns_what_a_short_job_asks_for():
    """Two kinds of state the features cannot tell apart except by one feature with a small
    overlap: 20 long jobs of 40 decisions labelled "keep", 20 short jobs of 4 labelled "grow" whose
    feature sits near the long jobs'. Weighted per decision the short jobs' label is outweighed
    10:1 where the two kinds overlap; weighted per world they count as much as the long jobs."""
    from types import SimpleNamespace

    import torch

    from dynamix_hvd.agent.imitate import world_weights
    from dynamix_hvd.controllers.policy.net import RowNet
    rng = np.random.default_rng(1)
    F, samples = 4, []
    for j in range(40):
        short = j % 2 == 1
        for _ in range(4 if short else 40):
            obs = np.zeros((2, F + 1), np.float32)
            obs[:, 0] = 1.0
            obs[:, 2] = rng.normal(0.3 if short else 0.0, 0.3)
            reg = np.array([0.05, 0.05, 0.0] if short else [0.05, 0.0, 0.05], np.float32)
            samples.append(Sample(obs, 2 if short else 1, reg, f"w{j}"))
    short_ids = [i for i, s in enumerate(samples) if s.label == 2]
    picks = {}
    for balance in ("decisions", "worlds"):
        torch.manual_seed(0)
        net = RowNet(F + 1, 16, 5, 3, 32)
        fit(SimpleNamespace(mlp_extractor=net), samples, k=2, epochs=15, seed=0,
            weights=world_weights(samples, balance))
        picks[balance] = np.mean([net.act_rows(samples[i].obs[:, 1:])[1] == 2 for i in short_ids])
    assert picks["worlds"] > picks["decisions"] + 0.2, picks


def test_imitation_training_writes_a_policy_the_live_controller_runs(tmp_path):
    from dynamix_hvd.agent.imitate import train_imitation
    from dynamix_hvd.controllers.policy.io import load_policy
    cfg = ReplayEnvConfig(workloads=("ncf",), traces=("none",), n_range=(3, 4), n_max=4, perturb_prob=0.0,
                          history=0, action=ActionConfig(global_scales=(0.8, 1.0, 1.25)))
    out = tmp_path / "imit.zip"
    meta = train_imitation(cfg, 0, out, iters=2, worlds_per_iter=1, epochs=2, verbose=False,
                           save_samples_to=tmp_path / "agg.npz")
    assert [d["iter"] for d in meta["dagger"]] == [0, 1] and meta["dagger"][1]["samples"] > meta["dagger"][0]["samples"]
    from dynamix_hvd.agent.imitate import load_samples
    agg = load_samples(tmp_path / "agg.npz")       # the whole aggregate, for refits with --samples
    assert len(agg) == meta["dagger"][1]["samples"]
    pol, dyn = load_policy(out)
    assert dyn["imitation"]["expert"] == "causal_safe" and dyn["action"]["global_scales"] == [0.8, 1.0, 1.25]
    from dynamix_hvd.controllers.policy.support import Support
    sup = Support.from_dict(dyn["support"])      # the aggregate's observations, recorded for the controller
    assert sup.rows == sum(int((s.obs[:, 0] > 0).sum()) for s in agg)
    r = run_controller(build_sim(WorldSpec("ncf", 4, "none", 0)), f"ppo:{out}", 0)
    assert r["time_to_target_s"] is not None


def test_samples_round_trip_without_pickle_and_ablations_zero_their_columns(tmp_path):
    from dynamix_hvd.agent.imitate import load_samples, save_samples, with_observation, workload_of
    from dynamix_hvd.state import FEATURE_GROUPS, FEATURE_NAMES, ObsConfig
    rng = np.random.default_rng(1)
    F = len(FEATURE_NAMES) + 1
    samples = [Sample(rng.normal(size=(n, F)).astype(np.float32), n % 7, rng.random(7).astype(np.float32),
                      f"{w}/none/N={n}/s1") for n, w in ((3, "bert"), (5, "ncf"))]
    p = tmp_path / "s.npz"
    save_samples(p, samples)
    back = load_samples(p)       # np.load(allow_pickle=False) inside: object arrays would raise
    assert [workload_of(s) for s in back] == ["bert", "ncf"]
    for a, b in zip(samples, back):
        assert np.array_equal(a.obs, b.obs) and a.label == b.label and np.array_equal(a.regret, b.regret)
    cfg = ReplayEnvConfig(history=0, obs=ObsConfig(frozenset({"system", "network"})))
    z = with_observation(back, cfg)[0].obs
    for j, name in enumerate(FEATURE_NAMES):
        zeroed = FEATURE_GROUPS[name] in ("system", "network")
        assert np.all(z[:, 1 + j] == 0) == zeroed, name
    assert np.array_equal(z[:, 0], back[0].obs[:, 0])       # the mask column is kept


def test_a_policy_fitted_to_saved_samples_alone(tmp_path):
    """--dagger-iters 0 with --samples: the policy is fitted to the given aggregate, no roll-outs."""
    from dynamix_hvd.agent.imitate import load_samples, train_imitation
    cfg = ReplayEnvConfig(workloads=("ncf",), traces=("none",), n_range=(3, 4), n_max=4, perturb_prob=0.0,
                          history=0, action=ActionConfig(global_scales=(0.8, 1.0, 1.25)))
    train_imitation(cfg, 0, tmp_path / "a.zip", iters=1, worlds_per_iter=1, epochs=1, verbose=False,
                    save_samples_to=tmp_path / "a.npz")
    saved = load_samples(tmp_path / "a.npz")
    meta = train_imitation(cfg, 1, tmp_path / "b.zip", iters=0, epochs=2, verbose=False, samples=saved)
    assert meta["dagger"] == [] and meta["start_fit"]["samples"] == len(saved) > 0
    assert 0.0 <= meta["start_fit"]["train_accuracy"] <= 1.0 and (tmp_path / "b.zip").exists()
    sharp = train_imitation(cfg, 1, tmp_path / "c.zip", iters=0, epochs=2, verbose=False, samples=saved,
                            temperature=1e-4)
    assert sharp["temperature"] == 1e-4 and meta["temperature"] == 0.02
    with pytest.raises(ValueError, match="temperature=0"):
        train_imitation(cfg, 1, tmp_path / "d.zip", iters=0, samples=saved, temperature=0.0)
    # samples of a workload outside --workloads are left out (leave-one-out from one aggregate)
    foreign = [Sample(s.obs, s.label, s.regret, "bert/" + s.world.split("/", 1)[1]) for s in saved]
    mixed = train_imitation(cfg, 1, tmp_path / "e.zip", iters=0, epochs=1, verbose=False, samples=saved + foreign)
    assert mixed["start_fit"]["samples"] == mixed["start_samples"] == len(saved)
    with pytest.raises(ValueError, match=r"none of the \d+ given samples is of the workloads \['ncf'\]"):
        train_imitation(cfg, 1, tmp_path / "f.zip", iters=0, samples=foreign)
    from dynamix_hvd.agent.imitate import of_workloads       # a workload given as a directory path
    held = [Sample(s.obs, s.label, s.regret, "benchmarks/heldout_workloads/yolov3/none/N=8/s1") for s in saved[:2]]
    assert of_workloads(held + saved, ["benchmarks/heldout_workloads/yolov3"]) == held
    assert of_workloads(held + saved, ["ncf"]) == saved and of_workloads(held, ["yolov3"]) == []


def _always(g):
    class P:
        class mlp_extractor:
            @staticmethod
            def act_rows(obs):
                return np.full(obs.shape[0], CFG.action.k), g
    return P


def _env_after(spec: WorldSpec, decisions: int) -> ReplayEnv:
    env = _env_at_start(spec)
    noop = np.concatenate([np.full(CFG.n_max, CFG.action.k), [CFG.action.noop_global]])
    for _ in range(decisions):
        env.step(noop)
    return env


def test_the_continuation_prices_a_scale_by_what_follows_it():
    """``continuation``: goodput's no-op after the priced scale is the policy continuation of a
    policy that always picks the no-op (and of no policy); a policy that always grows, or the
    causal oracle, continuing gives other prices; the env is not changed by any of them."""
    env = _env_after(WorldSpec("cifar10", 8, "none", 5), 60)
    P, t = env.sim.P, env.sim.time
    g = lookahead_label(env, 6, continuation="goodput")
    assert np.array_equal(g[1], lookahead_label(env, 6, continuation="policy", policy=_always(CFG.action.noop_global))[1])
    assert np.array_equal(g[1], lookahead_label(env, 6, continuation="policy")[1])
    up = lookahead_label(env, 6, continuation="policy", policy=_always(len(CFG.action.global_scales) - 1))
    c = lookahead_label(env, 6, continuation="causal")
    assert not np.allclose(g[1], up[1]) and not np.allclose(g[1], c[1])
    assert (env.sim.P, env.sim.time) == (P, t)
    with pytest.raises(ValueError, match="continuation='oracle'"):
        lookahead_label(env, 6, continuation="oracle")


# ---------------------------------------------------------------- the pass action (session 50)
PASS_SCALES = (0.5, 0.8, 1.0, 1.25, 1.6, 2.0, 3.0, 1.0)


def test_only_a_pass_hold_policy_may_name_1_twice_and_the_second_is_the_pass_action():
    a = ActionConfig(global_scales=PASS_SCALES, pass_hold=True)
    assert a.noop_global == 2 and a.pass_global == 7 and a.scale(7) == 1.0
    assert ActionConfig.from_dict(a.to_dict()).pass_global == 7
    assert ActionConfig(global_scales=PASS_SCALES[:-1], pass_hold=True).pass_global is None
    with pytest.raises(ValueError, match="appears twice"):
        ActionConfig(global_scales=PASS_SCALES)                        # held: the same as the no-op
    with pytest.raises(ValueError, match=r"appears twice \(\[1.25\]\)"):
        ActionConfig(global_scales=(0.8, 1.0, 1.25, 1.25), pass_hold=True)
    with pytest.raises(ValueError, match="appears twice"):
        ActionConfig(global_scales=(0.8, 1.0, 1.0, 1.0), pass_hold=True)
    with pytest.raises(ValueError, match="needs anchor='goodput'"):
        ActionConfig(global_scales=PASS_SCALES, pass_hold=True, anchor="balanced")


def test_the_pass_action_is_goodputs_own_batch_with_the_hold_passed():
    """On ncf the noise-scale estimate jumps at each batch change and is rarely stable: the
    safety layer holds goodput's growth, the pass action takes it (within the 1.5x-per-decision
    limit), and where the hold does not bind the two lead to the same plan."""
    cfg = ReplayEnvConfig(history=0, n_max=16, n_range=(2, 16),
                          action=ActionConfig(global_scales=PASS_SCALES, pass_hold=True))
    env = ReplayEnv(cfg)
    env.reset(options={"spec": WorldSpec("ncf", 8, "none", 3), "goodput_s": 1.0})
    noop = np.concatenate([np.full(cfg.n_max, cfg.action.k), [cfg.action.noop_global]])
    differed = 0
    for _ in range(30):
        Bj = scale_outcomes(env)
        B_cur = float(sum(env.plan.batch_sizes))
        c = copy.deepcopy(env.ctl)                                     # goodput's view, as the decision forms it
        c.anchor.observe(env.state, c.last_scale)
        unheld = c.anchor.goodput.unheld_choice()
        assert Bj[7] <= 1.5 * B_cur + 1.0
        if Bj[7] != Bj[2]:
            differed += 1
            want = min(max(unheld, B_cur / 1.5), 1.5 * B_cur)
            assert Bj[7] == pytest.approx(want, rel=0.02)               # the pass: goodput's batch, unheld
        env.step(noop)
        if env.sim.done:
            break
    assert differed >= 3


def test_the_pass_action_wins_its_ties_with_a_fixed_scale_and_the_noop_wins_its_ties_with_it():
    from dynamix_hvd.agent.imitate import noop_label
    tied = np.array([0.1, 0.05, 0.03, 0.02, 0.0, 0.0, 0.0, 0.0])     # 1.6x, 2x, 3x and the pass: one batch
    label, reg = noop_label(tied, 2, 0.01, 7)
    assert label == 7 and reg[7] == 0.0 and reg[4] == pytest.approx(0.005)
    label, reg = noop_label(np.zeros(8), 2, 0.01, 7)                   # every scale one plan: as without it
    assert label == 2 and np.all(reg == 0.0)
    label, reg = noop_label(np.array([0.1, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]), 2, 0.01, 7)
    assert label == 2 and reg[7] == 0.0                                # the no-op's ties are the no-op's
    label, _ = noop_label(np.array([0.1, 0.05, 0.03, 0.02, 0.0, 0.0, 0.0, 0.01]), 2, 0.01, 7)
    assert label == 4                                                  # a fixed scale that gains more
    label, reg = noop_label(tied, 2, 0.01)                             # without a pass action: as before
    assert label == 4 and reg[2] == pytest.approx(0.02)


def test_a_pass_action_policy_is_trained_saved_and_run_alone(tmp_path):
    from dynamix_hvd.agent.imitate import train_imitation
    from dynamix_hvd.controllers.policy.io import PolicyLoadError, load_policy
    from dynamix_hvd.controllers.ppo import PPOController
    from dynamix_hvd.plan import PlanBounds
    cfg = ReplayEnvConfig(workloads=("ncf",), traces=("none",), n_range=(3, 4), n_max=4, perturb_prob=0.0,
                          history=0, action=ActionConfig(global_scales=(0.8, 1.0, 1.25, 1.0), pass_hold=True,
                                                         pass_only=True))
    out = tmp_path / "pass.zip"
    train_imitation(cfg, 0, out, iters=1, worlds_per_iter=1, epochs=1, verbose=False, horizon=2)
    _, dyn = load_policy(out)
    assert ActionConfig.from_dict(dyn["action"]) == cfg.action        # pass_only travels in the file
    assert ActionConfig.from_dict(dyn["action"]).pass_global == 3
    r = run_controller(build_sim(WorldSpec("ncf", 4, "none", 0)), f"ppo:{out}?warmup=0", 0)
    assert r["time_to_target_s"] is not None
    with pytest.raises(PolicyLoadError, match="pass action"):
        PPOController(PlanBounds(max_batch=(64,) * 4), 16, policy=out, members=[out])


@pytest.mark.parametrize("flags,msg", [(["--pass-action"], "--pass-action needs --pass-hold"),
                                       (["--global-scales", "0.8,1.0,1.0"], "a scale appears twice"),
                                       (["--pass-hold", "--pass-only"], "--pass-only needs --pass-action")])
def test_train_policy_refuses_a_pass_action_without_the_hold_passed(tmp_path, capsys, flags, msg):
    from dynamix_hvd.cli import main
    assert main(["train-policy", "--world", "replay", "--method", "imitate", "--out", str(tmp_path / "p.zip"),
                 *flags]) == 2
    assert msg in capsys.readouterr().err and not (tmp_path / "p.zip").exists()
