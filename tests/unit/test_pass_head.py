"""A policy whose pass action is decided by a binary head of its own (``ActionConfig.pass_head``, session 78):
the global head keeps the fixed scales' labels and the head turns the no-op into the pass where passing the
noise-scale hold costs nothing by the expert's regrets."""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dynamix_hvd.agent.imitate import Sample, fit, pass_targets
from dynamix_hvd.controllers.policy.actions import ActionConfig
from dynamix_hvd.controllers.policy.net import RowNet

SCALES = (0.8, 1.0, 1.25, 1.0)          # the no-op is index 1, the pass index 3
NOOP, PASS = 1, 3


def _config(**kw) -> ActionConfig:
    return ActionConfig(global_scales=SCALES, anchor="goodput", pass_hold=True, pass_only=True, **kw)


def test_the_flag_needs_a_pass_action_and_is_recorded_only_when_set():
    with pytest.raises(ValueError, match="pass_head=True"):
        ActionConfig(global_scales=(0.8, 1.0, 1.25), anchor="goodput", pass_hold=True, pass_head=True)
    assert "pass_head" not in _config().to_dict()                # earlier policy files stay as they were
    d = _config(pass_head=True).to_dict()
    assert d["pass_head"] is True and ActionConfig.from_dict(d) == _config(pass_head=True)
    with pytest.raises(ValueError, match="pass_head='yes'"):
        ActionConfig.from_dict({**d, "pass_head": "yes"})


def test_pass_targets_undo_the_noops_bonus():
    reg = np.array([[0.2, 0.0, 0.1, 0.0],       # the hold does not bind: the same batch, pass
                    [0.2, 0.0, 0.1, 0.01],      # passing costs the no-op's bonus (0.01): pass
                    [0.2, 0.0, 0.1, 0.05],      # passing costs 5%: hold
                    [0.2, 0.05, 0.0, 0.03]])    # a growth is best, the pass beats the no-op: pass
    assert pass_targets(reg, NOOP, PASS).tolist() == [1.0, 1.0, 0.0, 1.0]
    assert pass_targets(reg, NOOP, PASS, margin=0.0).tolist() == [1.0, 0.0, 0.0, 1.0]


def _net(seed: int = 0, pass_head: bool = True) -> RowNet:
    torch.manual_seed(seed)
    return RowNet(5, 16, 5, len(SCALES), 16, (NOOP, PASS) if pass_head else None)


def test_the_head_turns_the_noop_into_the_pass_and_leaves_other_scales_alone():
    net = _net()
    obs = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    with torch.no_grad():
        net.global_pi.weight.zero_()
        net.global_pi.bias.copy_(torch.tensor([0.0, 1.0, 0.0, 0.0]))     # the global head picks the no-op
        net.pass_pi.weight.zero_()
        net.pass_pi.bias.fill_(0.5)
    assert net.act_rows(obs)[1] == PASS
    assert net.act_rows(obs, margin=0.3, noop=NOOP)[1] == PASS           # the margin's no-op too
    with torch.no_grad():
        net.pass_pi.bias.fill_(-0.5)
    assert net.act_rows(obs)[1] == NOOP
    with torch.no_grad():
        net.pass_pi.bias.fill_(0.5)
        net.global_pi.bias.copy_(torch.tensor([0.0, 1.0, 2.0, 0.0]))     # a growth: the head does not touch it
    assert net.act_rows(obs)[1] == 2
    # numpy and torch agree on the head, and the distribution moves the no-op's mass as the sigmoid says
    x = torch.cat([torch.ones(3, 1), torch.as_tensor(obs)], 1).unsqueeze(0)
    row, glob, p = net.actor_heads(x)
    rn, gn, pn = net.actor_heads_numpy(obs)
    assert np.allclose(p.detach().numpy()[0], pn, atol=1e-5) and np.allclose(glob.detach().numpy()[0], gn, atol=1e-5)
    probs = net.global_probs(gn, 0.0)
    soft = np.exp(gn - gn.max()) / np.exp(gn - gn.max()).sum()
    assert probs.sum() == pytest.approx(1.0) and probs[NOOP] == pytest.approx(soft[NOOP] / 2)
    assert probs[PASS] == pytest.approx(soft[PASS] + soft[NOOP] / 2)
    # a network without the head is as before: no pass in place of the no-op
    plain = _net(pass_head=False)
    assert plain.pass_pi is None and plain.actor_heads_numpy(obs)[2] is None
    assert plain.global_probs(gn, None) == pytest.approx(soft)


def test_fitting_keeps_the_growths_and_passes_only_where_passing_is_free():
    """Three kinds of state, told apart by one global feature: a growth is best (the pass also beats the no-op:
    its target is 1); the hold does not bind (the pass is the no-op's batch); passing the hold costs 5%. The
    global head is fitted to the labels (growth, no-op, no-op), the pass head to (1, 1, 0): the policy grows,
    passes, holds. A single head taught to pass in ties (session 77's tilt) has to trade the first against the
    second; the two heads do not."""
    rng = np.random.default_rng(0)
    kinds = {+1.0: ([0.3, 0.05, 0.0, 0.04], 2), 0.0: ([0.2, 0.0, 0.1, 0.0], NOOP), -1.0: ([0.2, 0.0, 0.1, 0.05], NOOP)}
    samples = []
    for i in range(600):
        f = (+1.0, 0.0, -1.0)[i % 3]
        n = int(rng.integers(2, 9))
        obs = np.zeros((n, 5), np.float32)
        obs[:, 0] = 1.0
        obs[:, 1:] = rng.normal(size=(n, 4)) * 0.1
        obs[:, 2] = f
        reg, label = kinds[f]
        samples.append(Sample(obs, label, np.array(reg, np.float32), "w"))
    net = _net()
    fit(SimpleNamespace(mlp_extractor=net), samples, k=2, epochs=15, seed=0)
    picks = {f: {int(net.act_rows(s.obs[:, 1:])[1]) for s in samples[:60] if s.obs[0, 2] == f} for f in kinds}
    assert picks == {+1.0: {2}, 0.0: {PASS}, -1.0: {NOOP}}, picks


def _parser():
    from dynamix_hvd.agent.train import add_arguments
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def test_train_policy_records_the_head_and_refuses_it_without_a_pass_action_or_with_ppo():
    from dynamix_hvd.agent.replay_train import config_from_args
    base = ["--world", "replay", "--workers", "2,8", "--pass-hold"]
    cfg = config_from_args(_parser().parse_args(base + ["--method", "imitate", "--pass-action", "--pass-head"]))
    assert cfg.action.pass_head and cfg.to_dict()["action"]["pass_head"] is True
    assert "pass_head" not in config_from_args(_parser().parse_args(base + ["--pass-action"])).to_dict()["action"]
    with pytest.raises(ValueError, match="--pass-head needs --pass-action"):
        config_from_args(_parser().parse_args(base + ["--method", "imitate", "--pass-head"]))
    with pytest.raises(ValueError, match="--pass-head needs --method imitate"):
        config_from_args(_parser().parse_args(base + ["--pass-action", "--pass-head"]))


def test_a_trained_file_loads_with_its_head_and_the_controller_passes_with_it(tmp_path):
    """train-policy end to end (one tiny DAgger iteration), the file read back by the safe loader (strict weights:
    the head is rebuilt from the file's configuration), and the PPO controller's act answering the pass where the
    head says so."""
    from dynamix_hvd.cli import main
    from dynamix_hvd.controllers.policy.io import load_policy
    out = tmp_path / "ph.zip"
    assert main(["train-policy", "--world", "replay", "--method", "imitate", "--dagger-iters", "1",
                 "--worlds-per-iter", "1", "--epochs", "1", "--horizon", "0", "--threads", "1", "--pass-hold",
                 "--pass-action", "--pass-only", "--pass-head", "--history", "0", "--workloads", "ncf",
                 "--workers", "2,4", "--seed", "0", "--out", str(out)]) == 0
    policy, _ = load_policy(out)
    net = policy.mlp_extractor
    cfg = ActionConfig.from_dict(policy.dynamix_config["action"])
    assert cfg.pass_head and net.pass_indices == (cfg.noop_global, cfg.pass_global)
    from dynamix_hvd.controllers.ppo import PPOController
    from dynamix_hvd.plan import PlanBounds
    ctl = PPOController(PlanBounds(max_batch=(256,) * 3), 32, policy=out, support=False)
    obs = np.zeros((3, ctl.net.n_features - 1), np.float32)
    with torch.no_grad():
        ctl.net.global_pi.weight.zero_()
        ctl.net.global_pi.bias.zero_()
        ctl.net.global_pi.bias[cfg.noop_global] = 1.0
        ctl.net.pass_pi.weight.zero_()
        for bias, want in ((2.0, cfg.pass_global), (-2.0, cfg.noop_global)):
            ctl.net.pass_pi.bias.fill_(bias)
            assert ctl.act(obs)[1] == want
