"""The perturbations' ranges (``PerturbRange``: ``train-policy --warp-min``, ``--gns-sigma-max``, session 77): the
default draws are those of every earlier recipe, wider ranges draw flatter and noisier workloads, and a policy
records and rolls out in the ranges it was trained on."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dynamix_hvd.agent.imitate import draw_worlds
from dynamix_hvd.agent.replay_env import ReplayEnvConfig
from dynamix_hvd.agent.support_fit import training_world_specs
from dynamix_hvd.replay.worlds import Perturbation, PerturbRange, WorldDraw, WorldSpec, build_sim, draw_perturbation

WARP_MIN = PerturbRange().warp_min


def _warps(warp_min: float, k: int = 400) -> np.ndarray:
    rng = np.random.default_rng(7)
    return np.array([draw_perturbation(rng, ranges=PerturbRange(warp_min)).batch_warp[0] for _ in range(k)])


def _earlier_draw(rng: np.random.Generator) -> Perturbation:
    """draw_perturbation as sessions 10-76 wrote it (strength 1), before its ranges could widen."""
    def logu(lo: float, hi: float) -> float:
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    warp = (float(rng.uniform(-0.15, 0.25)), float(rng.uniform(-0.15, 0.3)))
    return Perturbation(sample_scale=logu(0.5, 2.0), batch_warp=warp,
                        gns_shift=float(-3.0 * (warp[0] + 0.5 * warp[1]) + rng.uniform(-0.4, 0.4)),
                        gns_sigma_mult=logu(0.5, 2.0), compute_scale=logu(0.5, 2.0), sync_scale=logu(0.33, 3.0),
                        cap_frac=1.0 if rng.random() < 0.6 else float(rng.uniform(0.25, 1.0)))


def test_the_default_range_draws_the_earlier_recipes_worlds():
    # the earlier recipes' training worlds (and the shipped default's support, recorded by rollouts in
    # them) are drawn as before, draw for draw
    rng1, rng2 = np.random.default_rng(11), np.random.default_rng(11)
    assert [draw_perturbation(rng1) for _ in range(50)] == [_earlier_draw(rng2) for _ in range(50)]
    rng1, rng2 = np.random.default_rng(12), np.random.default_rng(12)
    assert [WorldDraw(("bert", "cifar10")).draw(rng1) for _ in range(30)] == \
        [WorldDraw(("bert", "cifar10"), ranges=PerturbRange()).draw(rng2) for _ in range(30)]
    w = _warps(WARP_MIN)
    assert w.min() >= WARP_MIN and w.max() < 0.25


def test_a_lower_bound_draws_flatter_workloads_and_only_the_warp_moves():
    low, default = _warps(-0.5), _warps(WARP_MIN)
    assert low.min() < -0.4 and (low < WARP_MIN).mean() > 0.3
    # the generator is consumed alike: every other field of the perturbation is the same draw
    r1, r2 = np.random.default_rng(5), np.random.default_rng(5)
    p1, p2 = draw_perturbation(r1, ranges=PerturbRange(-0.5, 10.0)), draw_perturbation(r2)
    assert (p1.sample_scale, p1.compute_scale, p1.sync_scale, p1.cap_frac) == \
        (p2.sample_scale, p2.compute_scale, p2.sync_scale, p2.cap_frac)
    assert p1.batch_warp[0] < p2.batch_warp[0] and p1.gns_sigma_mult > p2.gns_sigma_mult
    sig = [draw_perturbation(r1, ranges=PerturbRange(gns_sigma_max=10.0)).gns_sigma_mult for _ in range(200)]
    assert max(sig) > 5.0 and min(sig) >= 0.5
    assert default.mean() > low.mean()


def test_a_flat_warp_makes_large_batches_cost_fewer_samples():
    # cifar10's last level at 32x the smallest batch costs ~3x its samples; a warp of -0.33 flattens it
    def ratio(pert) -> float:
        sim = build_sim(WorldSpec("cifar10", 8, "none", 0, pert))
        cum = sim.pm.cum[:, -1]
        return float(cum[-1] / cum[0])
    assert ratio(Perturbation()) > 2.5
    assert ratio(Perturbation(batch_warp=(-0.33, 0.0))) < 1.2


def test_a_policy_trained_with_a_lower_bound_draws_and_records_it():
    cfg = ReplayEnvConfig(ranges=PerturbRange(warp_min=-0.5))
    worlds = draw_worlds(cfg, np.random.default_rng(0), 60)
    assert min(w.pert.batch_warp[0] for w in worlds) < WARP_MIN
    d = cfg.to_dict()
    assert d["perturb_range"] == {"warp_min": -0.5}
    # the support's rollouts are drawn in the range the policy was trained in (its file's dynamix_config)
    specs = training_world_specs(d, 60, 0)
    assert min(w.pert.batch_warp[0] for w in specs) < WARP_MIN
    assert min(w.pert.batch_warp[0] for w in training_world_specs(ReplayEnvConfig().to_dict(), 60, 0)) >= WARP_MIN
    # a default-range policy's configuration is as before (no new key in its file)
    assert "perturb_range" not in ReplayEnvConfig().to_dict()


@pytest.mark.parametrize("bad", [0.25, 1.0, -1.5, "flat", float("nan")])
def test_a_bad_range_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="warp_min="):
        ReplayEnvConfig(ranges=PerturbRange(warp_min=bad))
    with pytest.raises(ValueError, match="dynamix_config.perturb_range: warp_min="):
        training_world_specs({"perturb_range": {"warp_min": bad}}, 1)
    with pytest.raises(ValueError, match="gns_sigma_max="):
        PerturbRange(gns_sigma_max=bad if bad != 1.0 else 0.1)
    with pytest.raises(ValueError, match="perturb_range: expected a table"):
        PerturbRange.from_dict({"warp": -0.5})


def test_train_policy_takes_the_ranges_and_refuses_a_bad_one_naming_the_option(capsys):
    import argparse
    from dynamix_hvd.agent.replay_train import config_from_args
    from dynamix_hvd.agent.train import add_arguments
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--world", "replay", "--workers", "2,8"]
    assert config_from_args(parser.parse_args(base)).ranges == PerturbRange()
    cfg = config_from_args(parser.parse_args(base + ["--warp-min", "-0.5", "--gns-sigma-max", "10"]))
    assert cfg.ranges == PerturbRange(-0.5, 10.0)
    assert cfg.to_dict()["perturb_range"] == {"warp_min": -0.5, "gns_sigma_max": 10.0}
    with pytest.raises(SystemExit):
        parser.parse_args(base + ["--gns-sigma-max", "0.2"])
    assert "--gns-sigma-max" in capsys.readouterr().err


def test_the_world_draw_is_recorded_and_read_back_in_one_place():
    """``WorldDraw``: the settings that say how training worlds are drawn travel as one object: the env config
    builds it, the policy's ``dynamix_config`` records it (``to_config``) and the support's roll-outs read it back
    (``from_config``) as the same draw; a file written before a setting existed reads as its default, and a bad
    value is refused naming the key."""
    cfg = ReplayEnvConfig(workloads=("bert", "ncf"), traces=("none",), n_range=(2, 8), n_max=8, perturb_prob=0.5,
                          gns_model="continuous", loss_noise=(0.01, 0.05), sync_model="collective",
                          ranges=PerturbRange(-0.5, 10.0))
    assert WorldDraw.from_config(cfg.to_dict()) == cfg.worlds
    assert WorldDraw.from_config(ReplayEnvConfig().to_dict()) == WorldDraw() == ReplayEnvConfig().worlds
    assert WorldDraw.from_config({}) == WorldDraw()          # a file from before any of them
    rng1, rng2 = np.random.default_rng(4), np.random.default_rng(4)
    assert draw_worlds(cfg, rng1, 5) == [WorldDraw.from_config(cfg.to_dict()).draw(rng2) for _ in range(5)]
    for key, bad, names in (("sync_model", "ring", "sync_model='ring'"), ("n_range", [8, 2], "n_range"),
                            ("perturb_prob", 1.5, "perturb_prob=1.5"), ("loss_noise", [0.05, 0.01], "loss_noise"),
                            ("gns_model", "smooth", "gns_model='smooth'")):
        with pytest.raises(ValueError, match=f"dynamix_config: {names}"):
            WorldDraw.from_config({key: bad})
    with pytest.raises(ValueError, match="sync_model='ring'"):
        ReplayEnvConfig(sync_model="ring")
