"""Scenario TOML parsing: the shipped set loads, and every unknown key or bad value is an
error that names the key."""
from __future__ import annotations

import pytest

from dynamix_hvd.emulate.scenario import (ScenarioError, load_scenario, parse_scenario, shipped_scenarios)

GOOD = """
name = "t"
workload = "mnist1d_mlp"
target_accuracy = 0.6
max_time_s = 30
base_batch = 16
seed = 3

[[workers]]
fixed_ms = 1.0
per_sample_ms = 0.5
max_batch = 64
bandwidth_mbit = 100
latency_ms = 1

[[workers]]
fixed_ms = 1
per_sample_ms = 2

[[events]]
at_s = 5
rank = 1
per_sample_ms = 4.0
bandwidth_mbit = 10
"""


def test_parse_good() -> None:
    sc = parse_scenario(GOOD)
    assert sc.name == "t" and sc.world_size == 2 and sc.base_batch == 16 and sc.seed == 3
    assert sc.workers[0].max_batch == 64 and sc.workers[0].bandwidth_mbit == 100.0
    assert sc.workers[1].max_batch == 1024 and sc.workers[1].latency_ms == 0.0   # defaults
    assert sc.events[0].rank == 1 and dict(sc.events[0].changes) == {"per_sample_ms": 4.0, "bandwidth_mbit": 10.0}
    assert sc.events[0].touches_link


def test_min_global_batch_is_optional() -> None:
    assert parse_scenario(GOOD).min_global_batch is None
    assert parse_scenario(GOOD.replace("seed = 3", "seed = 3\nmin_global_batch = 8")).min_global_batch == 8


def test_lr_rule_is_optional_and_reaches_the_hooks_config(tmp_path) -> None:
    """The scenario's LR rule is the bench hook's (it also sets how far B may grow: not at all under
    "none", so a learned policy's growth can reach the plan only under another rule)."""
    from dynamix_hvd.emulate.worker import hook_config, parse_controller
    sc = parse_scenario(GOOD)
    assert sc.lr_rule == "none"
    cfg = hook_config(sc, parse_controller("ppo"), 2, [64, 1024], tmp_path)
    assert cfg.lr_rule == "none" and cfg.max_global_batch_for(2) == 32      # B0 = 2 x 16: no growth
    ada = parse_scenario(GOOD.replace("seed = 3", 'seed = 3\nlr_rule = "adascale"'))
    assert ada.lr_rule == "adascale"
    cfg = hook_config(ada, parse_controller("ppo"), 2, [64, 1024], tmp_path)
    assert cfg.lr_rule == "adascale" and cfg.max_global_batch_for(2) is None     # no cap on B
    assert load_scenario("hetero4x_adascale").lr_rule == "adascale"
    assert load_scenario("hetero4x").lr_rule == "none"


def test_workers_at_applies_events_in_time() -> None:
    sc = parse_scenario(GOOD)
    assert sc.workers_at(4.9)[1].per_sample_ms == 2.0
    after = sc.workers_at(5.0)
    assert after[1].per_sample_ms == 4.0 and after[1].bandwidth_mbit == 10.0 and after[0] == sc.workers[0]
    assert sc.true_speeds(0.0) == [2000.0, 500.0]
    assert sc.true_speeds(6.0) == [2000.0, 250.0]


def test_compute_time_model() -> None:
    w = parse_scenario(GOOD).workers[0]
    assert w.compute_s(10) == pytest.approx((1.0 + 0.5 * 10) / 1000)


@pytest.mark.parametrize("edit, key", [
    (("seed = 3", "seed = 3\ncolour = 1"), "colour"),
    (("fixed_ms = 1.0", "fixed_ms = 1.0\ngpus = 2"), "workers[0].gpus"),
    (("at_s = 5", "at_s = 5\nwhen = 2"), "events[0].when"),
    (("target_accuracy = 0.6", "target_accuracy = 1.5"), "target_accuracy"),
    (("target_accuracy = 0.6", 'target_accuracy = "high"'), "target_accuracy"),
    (("max_time_s = 30", "max_time_s = -1"), "max_time_s"),
    (("base_batch = 16", "base_batch = 16.5"), "base_batch"),
    (("base_batch = 16", "base_batch = 100"), "base_batch"),      # above a worker's max_batch
    (("seed = 3", "seed = true"), "seed"),
    (('workload = "mnist1d_mlp"', 'workload = "imagenet"'), "workload"),
    (("per_sample_ms = 0.5", "per_sample_ms = 0"), "workers[0].per_sample_ms"),
    (("max_batch = 64", "max_batch = 0"), "workers[0].max_batch"),
    (("bandwidth_mbit = 100", "bandwidth_mbit = -5"), "workers[0].bandwidth_mbit"),
    (("latency_ms = 1", "latency_ms = -1"), "workers[0].latency_ms"),
    (("latency_ms = 1", "latency_ms = nan"), "workers[0].latency_ms"),
    (("rank = 1", "rank = 2"), "events[0].rank"),
    (("at_s = 5", "at_s = -1"), "events[0].at_s"),
    (("per_sample_ms = 4.0", "per_sample_ms = -4.0"), "events[0].per_sample_ms"),
    (('name = "t"', ""), "name"),
    (("fixed_ms = 1\n", ""), "workers[1].fixed_ms"),
    (("seed = 3", "seed = 3\nmin_global_batch = 0"), "min_global_batch"),
    (("seed = 3", 'seed = 3\nlr_rule = "cosine"'), "lr_rule"),
    (("seed = 3", "seed = 3\nlr_rule = 1"), "lr_rule"),
])
def test_bad_values_name_the_key(edit: tuple[str, str], key: str) -> None:
    old, new = edit
    assert old in GOOD
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(GOOD.replace(old, new, 1))
    assert key in str(exc.value)


def test_event_without_changes_and_no_workers() -> None:
    with pytest.raises(ScenarioError, match=r"events\[0\]"):
        parse_scenario(GOOD.replace("per_sample_ms = 4.0\nbandwidth_mbit = 10\n", ""))
    head = GOOD.split("[[workers]]")[0]
    with pytest.raises(ScenarioError, match="workers"):
        parse_scenario(head)


def test_not_toml() -> None:
    with pytest.raises(ScenarioError, match="TOML"):
        parse_scenario("name = ")


def test_shipped_set() -> None:
    shipped = shipped_scenarios()
    for name in ("homogeneous", "hetero2x", "hetero4x", "slow_link", "node_slowdown", "link_degrade", "hetero8",
                 "trace_job3", "trace_cov", "grad_mb_link", "hetero16"):
        assert name in shipped
    for name in shipped:
        sc = load_scenario(name)
        assert sc.name == name
    assert load_scenario("hetero8").world_size == 8
    assert any(not e.touches_link for e in load_scenario("node_slowdown").events)
    assert load_scenario("node_slowdown").min_global_batch is None
    assert load_scenario("node_slowdown_floor16").min_global_batch == 16
    assert any(e.touches_link for e in load_scenario("link_degrade").events)
    speeds = load_scenario("hetero4x").true_speeds(0)
    assert max(speeds) / min(speeds) == pytest.approx(4.0)
    homo = load_scenario("homogeneous").workers
    assert all(w == homo[0] for w in homo)
    # issue 20: speed traces, grad_mb, 16 ranks
    assert all(w.speed_trace.endswith("job_3_norm.csv") for w in load_scenario("trace_job3").workers)
    assert all(w.speed_trace.startswith("cov:") for w in load_scenario("trace_cov").workers)
    assert load_scenario("grad_mb_link").grad_mb == 0.25
    assert min(w.bandwidth_mbit for w in load_scenario("grad_mb_link").workers) == 100
    assert load_scenario("hetero16").world_size == 16


def test_load_unknown_name() -> None:
    with pytest.raises(ScenarioError, match="no scenario"):
        load_scenario("does-not-exist")


def test_controller_specs_parse_the_fixed_interval_option():
    from dynamix_hvd.emulate.worker import ControllerSpec, parse_controller
    assert parse_controller("goodput") == ControllerSpec("goodput", None, True)
    assert parse_controller("ppo:fixed") == ControllerSpec("ppo", None, False)
    assert parse_controller("oracle@64:fixed") == ControllerSpec("oracle", 64, False)
    assert parse_controller("ppo=a/b.zip:fixed") == ControllerSpec("ppo", None, False, "a/b.zip")
    for bad, word in [("ppo:often", "'fixed'"), ("goodput@64", "only the oracle"), ("oracle@0", ">= 1"),
                      ("goodput=a.zip", "only ppo takes a policy file"), ("ppo=", "only ppo takes a policy file"),
                      ("goodput?refute=1", "only ppo takes options"), ("ppo?refute=one", "'one'"),
                      ("ppo?passguard=yes", "on or off"), ("ppo?trsut=0.1", "unknown option 'trsut'")]:
        with pytest.raises(ValueError, match=word):
            parse_controller(bad)


def test_bench_ppo_options_reach_the_controller(tmp_path: Path) -> None:
    # ppo?OPTS / ppo=PATH?OPTS: the replay's option syntax (controllers.policy.options), live
    from dynamix_hvd.controllers.policy.io import default_policy_path
    from dynamix_hvd.decide import Decider
    from dynamix_hvd.emulate.worker import hook_config, parse_controller
    from dynamix_hvd.plan import PlanBounds

    spec = parse_controller(f"ppo={default_policy_path()}?refute=1&passguard=on&warmup=3:fixed")
    assert spec.policy == str(default_policy_path()) and not spec.react
    assert spec.options == {"refute": 1, "guard_pass": True, "warmup": 3}
    cfg = hook_config(load_scenario("hetero4x_adascale"), spec, 4, [256] * 4, tmp_path)
    ctl = Decider(cfg, PlanBounds(max_batch=(256,) * 4), 128).controller
    assert ctl.name == "ppo" and ctl.guard_pass and ctl.refute.limit == 1 and ctl.refute.warmup == 3
    assert parse_controller("ppo?trust=0.05").controller_kwargs() == {"trust": 0.05}
    assert ctl.guard_fallback == "goodput"                     # the default: the policy's anchor
    assert parse_controller("ppo?fallback=config").options == {"guard_fallback": None}
    spec = parse_controller("ppo?fallback=proportional")
    cfg = hook_config(load_scenario("hetero4x_adascale"), spec, 4, [256] * 4, tmp_path)
    assert Decider(cfg, PlanBounds(max_batch=(256,) * 4), 128).controller.guard_fallback == "proportional"
    from dynamix_hvd.controllers import make_controller
    with pytest.raises(ValueError, match="guard_fallback='ppo'"):
        make_controller("ppo", PlanBounds(max_batch=(256,) * 4), 32, guard_fallback="ppo")


def test_bench_order_rotates_per_repeat_and_labels_name_the_same_spec():
    from dynamix_hvd.emulate.bench import controller_spec, run_order

    names = ["static", "proportional", "proportional#twin", "ppo"]
    assert [run_order(names, r)[0] for r in range(5)] == ["static", "proportional", "proportional#twin", "ppo", "static"]
    assert all(sorted(run_order(names, r)) == sorted(names) for r in range(4))
    assert controller_spec("proportional#twin") == "proportional"
    assert controller_spec("oracle@64:fixed#b") == "oracle@64:fixed"
    assert run_order([], 3) == []


def test_bench_autotune_entries_name_the_same_spec_with_horovods_autotuner():
    from dynamix_hvd.emulate.bench import autotuned, controller_spec

    assert controller_spec("static+autotune") == "static" and autotuned("static+autotune")
    assert controller_spec("ppo:fixed+autotune#b") == "ppo:fixed" and autotuned("ppo:fixed+autotune#b")
    assert controller_spec("static#autotune") == "static" and not autotuned("static#autotune")
    assert not autotuned("static") and not autotuned("ppo=a+autotune/b.zip")


def test_bench_run_directories_flatten_a_policy_path():
    from pathlib import Path
    from dynamix_hvd.runlog import bench_run_dir
    assert bench_run_dir(Path("o"), "ppo") == Path("o/ppo")
    assert bench_run_dir(Path("o"), "proportional#twin", 2) == Path("o/proportional#twin.r2")
    assert bench_run_dir(Path("o"), "ppo=/a/b.zip#x", 1) == Path("o/ppo=_a_b.zip#x.r1")
