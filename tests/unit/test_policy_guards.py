"""Ensembles of policies and the training support a policy acts within (issue 19, session 34)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dynamix_hvd.controllers.policy.ensemble import combine, combine_rows, mean_choice, softmax
from dynamix_hvd.controllers.policy.support import Support, fit

H20 = "dynamix_hvd/agent/policies/imitate_h20.zip"
PASS_ONLY = "dynamix_hvd/agent/policies/pass_only_s1.zip"     # the default's policy in sessions 52-55
DEFAULT_RAW = "dynamix_hvd/agent/policies/mem_use_s0.zip"   # the default's policy since session 74 (seed 0 of the memory-use recipe, session 73)
RESIDUAL = "dynamix_hvd/agent/policies/replay_residual.zip"   # the default until session 35


def test_ensemble_rules():
    # actions are indices, no-op at 2: consensus moves only when all move the same way, by the least
    assert combine([4, 3, 5], 2) == 3
    assert combine([0, 1, 0], 2) == 1
    assert combine([4, 2, 5], 2) == 2          # one member at the no-op
    assert combine([4, 0, 5], 2) == 2          # members disagree
    assert combine([1], 2) == 1
    assert combine([0, 4, 5], 2, "median") == 4
    assert combine([0, 4, 5, 6], 2, "median") == 4    # the lower middle of an even count
    rows = np.array([[3, 1, 2], [4, 0, 2]])
    assert combine_rows(rows, 2).tolist() == [3, 1, 2]
    with pytest.raises(ValueError, match="ensemble rule 'mean'"):
        combine([1, 2], 2, "mean")
    # mean: the largest mean probability, which need not be any member's own choice
    assert int(mean_choice([np.array([0.6, 0.4, 0.0]), np.array([0.0, 0.45, 0.55])])) == 1
    assert mean_choice([np.array([[0.2, 0.8], [0.9, 0.1]])] * 3).tolist() == [1, 0]
    assert np.allclose(softmax(np.array([0.0, math.log(3.0)])), [0.25, 0.75])
    with pytest.raises(ValueError, match="no member"):
        mean_choice([])


def _line_support() -> Support:
    # decisions whose two global features move together (as a batch and its noise scale did in training)
    t = np.linspace(0.0, 1.0, 200)
    obs = [np.array([[0.0, x, x]]) for x in t]
    return fit(obs, ("local", "g1", "g2"), global_columns=(1, 2))


def test_a_mean_ensemble_of_a_pass_policy_with_itself_acts_as_the_policy():
    from dynamix_hvd.replay.worlds import WorldSpec
    spec = WorldSpec("ncf", 8, "none", 5)               # a world where the pass-only policy passes the hold
    t_pol, one, _ = _episode(spec, f"ppo:{PASS_ONLY}?warmup=0&support=off")
    t_ens, ens, _ = _episode(spec, f"ppo:{PASS_ONLY}+{PASS_ONLY}?ensemble=mean&warmup=0&support=off")
    assert len(ens.members) == 1 and ens.ensemble == "mean" and t_ens == pytest.approx(t_pol, rel=1e-12)
    with pytest.raises(ValueError, match="margin=0.5: a margin compares one policy's logits"):
        _episode(spec, f"ppo:{PASS_ONLY}+{PASS_ONLY}?ensemble=mean&margin=0.5")
    t_goodput, _, _ = _episode(spec, "goodput")
    assert t_pol < 0.97 * t_goodput                    # the policy departs here, so the equality says something


def test_support_box_and_the_decisions_seen():
    sup = _line_support()
    assert sup.near_columns == (1, 2) and sup.radius < 0.05
    assert sup.outside(np.array([[0.0, 0.5, 0.5]])) == []
    # every feature inside its range, the combination never seen: outside, by distance
    (name, d, _, radius), = sup.outside(np.array([[0.0, 1.0, 0.0]]))
    assert name == "global features" and d == pytest.approx(math.sqrt(0.5), rel=0.02) and radius == sup.radius
    # a feature beyond its range: named, with its value and range
    out = sup.outside(np.array([[0.3, 0.5, 0.5], [0.0, 0.5, 0.5]]))
    assert out == [("local", 0.3, 0.0, 0.0)]
    back = Support.from_dict(sup.to_dict())
    for x in ([0.0, 0.5, 0.5], [0.0, 1.0, 0.0], [0.0, 0.2, 0.21]):
        assert back.outside(np.array([x])) == sup.outside(np.array([x]))
    with pytest.raises(ValueError, match="policy file P: not a support"):
        Support.from_dict({"columns": ["a"]}, where="policy file P")
    with pytest.raises(ValueError, match="lo <= hi"):
        Support(("a",), np.array([1.0]), np.array([0.0]))


def _episode(spec, name: str):
    from dynamix_hvd.decide import control_loop
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.replay.runner import build_controller
    from dynamix_hvd.replay.worlds import build_sim
    from dynamix_hvd.safety import MoveLimits
    sim = build_sim(spec)
    sim.reset(spec.seed)
    ctl = build_controller(name, sim, spec.seed)
    reasons = [ctl.last_reason for _ in control_loop(sim, ctl, sim.bounds(), Plan.uniform(sim.n, sim.base_batch),
                                                     limits=MoveLimits())]
    return sim.time, ctl, reasons


def test_ensemble_and_support_in_the_controller(tmp_path):
    from dynamix_hvd.agent.support_fit import observation_columns, write_support
    from dynamix_hvd.controllers.policy.io import PolicyLoadError, load_policy
    from dynamix_hvd.replay.runner import build_controller, run_controller
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    spec = WorldSpec("cifar10", 8, "none", 5)          # a world where the policy departs from goodput
    t_pol, _, _ = _episode(spec, f"ppo:{H20}?warmup=0")      # (in its first decisions: no warm-up)
    t_goodput = run_controller(build_sim(spec), "goodput", spec.seed)["time_to_target_s"]
    assert t_pol != pytest.approx(t_goodput, rel=1e-6)
    # an ensemble of one policy with itself acts as the policy
    t_ens, ctl, _ = _episode(spec, f"ppo:{H20}+{H20}?ensemble=consensus&warmup=0")
    assert len(ctl.members) == 1 and t_ens == pytest.approx(t_pol, rel=1e-12)
    # members must observe and act alike (the previous default sees features h20 does not)
    sim = build_sim(spec)
    with pytest.raises(PolicyLoadError, match=f"policy file {RESIDUAL}: its 'obs' config"):
        build_controller(f"ppo:{H20}+{RESIDUAL}", sim, 0)
    # a policy with a pass action combines only under the mean rule (its global actions are not ordered)
    with pytest.raises(PolicyLoadError, match="use ensemble='mean'"):
        build_controller(f"ppo:{PASS_ONLY}+{PASS_ONLY}?ensemble=median", sim, 0)
    # a support no observation is inside: every decision is the no-op, i.e. goodput's plan
    cfg = load_policy(H20)[1]
    cols = observation_columns(cfg)
    nowhere = Support(cols, np.full(len(cols), 5.0), np.full(len(cols), 5.0))
    path = write_support(H20, nowhere, tmp_path / "h20_nowhere.zip")
    t_sup, ctl, reasons = _episode(spec, f"ppo:{path}?warmup=0")
    assert ctl.supports[0] is not None and t_sup == pytest.approx(t_goodput, rel=1e-12)
    assert all("outside its training support" in r for r in reasons)
    # support=False ignores the record
    from dynamix_hvd.controllers.ppo import PPOController
    sim = build_sim(spec)
    assert PPOController(sim.bounds(), sim.base_batch, policy=path, support=False).supports == [None]
    t_off, ctl, _ = _episode(spec, f"ppo:{path}?support=off&warmup=0")       # the replay's spelling
    assert ctl.supports == [None] and t_off == pytest.approx(t_pol, rel=1e-12)
    with pytest.raises(ValueError, match="support='no'"):
        build_controller(f"ppo:{path}?support=no", sim, 0)


def test_policy_support_command_records_the_training_support(tmp_path, capsys):
    from dynamix_hvd.cli import main
    from dynamix_hvd.controllers.policy.io import load_policy
    out = tmp_path / "h20_sup.zip"
    assert main(["policy-support", H20, "--worlds", "2", "--max-decisions", "30", "--out", str(out)]) == 0
    sup = Support.from_dict(load_policy(out)[1]["support"])
    assert sup.rows > 0 and len(sup.near_columns) >= 2 and math.isfinite(sup.radius)
    # the weights are the policy's: inside its support it acts as the policy does
    a, b = load_policy(H20)[0], load_policy(out)[0]
    assert all(np.array_equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert main(["policy-support", str(tmp_path / "missing.zip"), "--out", str(tmp_path / "x.zip")]) == 2
    assert "missing.zip" in capsys.readouterr().out


def test_policy_support_box_only_records_the_same_box_without_the_nearest_neighbour_test(tmp_path, capsys):
    """``--box-only`` (the default's support since session 53): the same rollouts, the same box, no
    nearest-neighbour test; an observation whose global features are far from every decision seen but
    inside the box is inside it."""
    from dynamix_hvd.cli import main
    from dynamix_hvd.controllers.policy.io import load_policy
    full, box = tmp_path / "full.zip", tmp_path / "box.zip"
    args = [H20, "--worlds", "2", "--max-decisions", "30"]
    assert main(["policy-support", *args, "--out", str(full)]) == 0
    assert main(["policy-support", *args, "--box-only", "--out", str(box)]) == 0
    assert "the box alone" in capsys.readouterr().out
    f, b = (Support.from_dict(load_policy(x)[1]["support"]) for x in (full, box))
    assert b.near_columns == () and b.radius == math.inf and len(f.near_columns) >= 2
    assert np.array_equal(f.lo, b.lo) and np.array_equal(f.hi, b.hi) and f.rows == b.rows
    far = np.tile((f.lo + f.hi) / 2, (2, 1))
    far[0, list(f.near_columns)] = f.lo[list(f.near_columns)]      # a corner of the box, far from the decisions
    far[0, f.near_columns[0]] = f.hi[f.near_columns[0]]
    assert [o[0] for o in f.outside(far)] == ["global features"] and b.outside(far) == []


def test_the_shipped_default_is_its_policy_with_the_support_the_command_records(tmp_path):
    """default.json's recipe: ``policy-support mem_use_s0.zip --worlds 24 --large-worlds 24 --box-only`` writes
    default.zip byte for byte (pass_only_s0.zip in sessions 56-73, pass_only_s1.zip in sessions 52-55, without ``--box-only`` until session 52,
    imitate_h20.zip until session 51). The rollouts run the policy as it was trained, without the guard and the
    warm-up that the controller adds on top (with them, from session 40 to 43, the command recorded
    another support than the shipped one)."""
    from dynamix_hvd.cli import main
    out = tmp_path / "default.zip"
    assert main(["policy-support", DEFAULT_RAW, "--worlds", "24", "--large-worlds", "24", "--box-only", "--out", str(out)]) == 0
    assert out.read_bytes() == (Path(DEFAULT_RAW).parent / "default.zip").read_bytes()


def test_policy_support_large_worlds_are_drawn_from_the_upper_world_sizes(tmp_path, capsys):
    from dynamix_hvd.cli import main
    from dynamix_hvd.controllers.policy.io import load_policy
    out = tmp_path / "h20_large.zip"
    assert main(["policy-support", H20, "--worlds", "1", "--large-worlds", "2", "--max-decisions", "10",
                 "--out", str(out)]) == 0
    sup = Support.from_dict(load_policy(out)[1]["support"])
    j = sup.columns.index("log_world_size")          # log2(N) / 10; the upper half of 2..64 starts at 11
    assert sup.hi[j] >= math.log2(11) / 10 - 1e-9
    assert main(["policy-support", H20, "--large-worlds", "-1", "--out", str(tmp_path / "x.zip")]) == 2
    assert "large_worlds=-1" in capsys.readouterr().out


def test_an_ensemble_is_cached_and_checked_by_every_file():
    from dynamix_hvd.agent.replay_eval import _file_hash, _pairs
    one = _file_hash(H20).partition("?")[0]
    assert _file_hash(f"{H20}+{H20}?ensemble=median") == f"{one}+{one}?ensemble=median&refute=2&warmup=16"
    assert _pairs([f"e={H20}+{H20}"], "--policy") == {"e": f"{H20}+{H20}"}
    with pytest.raises(ValueError, match="policy file nowhere.zip not found"):
        _pairs([f"e={H20}+nowhere.zip"], "--policy")
    with pytest.raises(ValueError, match="an empty file name"):
        _pairs([f"e={H20}+"], "--policy")


def test_the_policy_sees_its_own_last_levels_not_the_hooks_batch_change():
    """Live, ``ClusterState.last_action`` is the change in samples the hook applied per rank; the
    policy was trained on its own last levels (-k..k) / k. Its observation must not depend on the
    hook's samples (they put every live decision outside the training support, session 34)."""
    from dynamix_hvd.controllers.ppo import PPOController
    from dynamix_hvd.plan import Plan, PlanBounds
    from dynamix_hvd.records import ClusterState, WorkerStats
    from dynamix_hvd.state import FEATURE_NAMES
    ctl = PPOController(PlanBounds(max_batch=[256] * 4), 32, policy=H20)
    workers = [WorkerStats(rank=r, batch_size=32, max_batch=256, compute_s=0.01 * (r + 1), step_s=0.05)
               for r in range(4)]
    ctl.last_levels = np.array([1.0, -1.0, 0.0, 2.0])
    col = FEATURE_NAMES.index("last_action")
    with_hook = ctl.observe(ClusterState(Plan.uniform(4, 32), workers, last_action=np.array([-8.0, 8.0, 0.0, 16.0])))
    without = ctl.observe(ClusterState(Plan.uniform(4, 32), workers))
    assert np.array_equal(with_hook, without)
    assert with_hook[:, col].tolist() == (ctl.last_levels / ctl.action_config.k).tolist()
