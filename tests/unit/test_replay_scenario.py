"""`dynamix replay --scenario`: a live scenario's ranks, speeds, links, events and speed traces in the
replay simulator (``replay/scenario.py``)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dynamix_hvd.cli import main as cli_main
from dynamix_hvd.emulate.device import EmulatedDevice
from dynamix_hvd.emulate.scenario import load_scenario
from dynamix_hvd.replay.runner import make_scenario_world, make_world, run_controller, run_one
from dynamix_hvd.replay.sim import hook_interval
from dynamix_hvd.replay.scenario import CAPTURE_FILE, gradient_bytes, ring_s
from dynamix_hvd.replay.throughput import Link

HEAD = """name = "rs"
workload = "mnist1d_cnn"
target_accuracy = 0.8
max_time_s = 30
base_batch = 8
seed = 2
interval_steps = 10
"""


def worker(ps: float, bw: float = 1000, lat: float = 0.05, extra: str = "") -> str:
    return f"[[workers]]\nfixed_ms = 3\nper_sample_ms = {ps}\nbandwidth_mbit = {bw}\nlatency_ms = {lat}\n{extra}"


def scen(tmp: Path, body: str, name: str = "sc.toml") -> Path:
    f = tmp / name
    f.write_text(HEAD + body)
    return f


def test_per_sample_costs_map_to_the_replays_hardware_factors(tmp_path: Path) -> None:
    """No traces, events or slow links: the scenario world is make_world with --speeds = the
    per-sample ratios (same base batch and interval): equal times for every seed."""
    f = scen(tmp_path, worker(1.0) + worker(1.0) + worker(1.0) + worker(4.0))
    sw = make_scenario_world("cifar10", str(f), interval_steps=40, base_batch=32)
    ref = make_world("cifar10", "none", 4, [1, 1, 1, 4], interval_steps=40, base_batch=32)
    # the live hook's global-batch range on the scenario: its workers' LR rule (none) holds B at B0
    assert sw.sim.max_global_batch == 128 and sw.sim.bounds().max_global_batch == 128
    ref.sim.max_global_batch = 128
    assert sw.sim.hw.tolist() == [1.0, 1.0, 1.0, 4.0] and sw.sim.link.mult == 1.0
    for seed in (0, 1):
        for c in ("static", "goodput"):
            a, b = run_one(sw.sim, c, seed)["time_to_target_s"], run_one(ref.sim, c, seed)["time_to_target_s"]
            assert a == pytest.approx(b, rel=1e-12), (c, seed)


def test_speed_traces_are_the_live_devices(tmp_path: Path) -> None:
    """The replay's per-step multipliers are the emulated devices' factors at the same steps."""
    sc_file = Path(load_scenario("trace_job3").source)
    world = make_scenario_world("cifar10", str(sc_file), interval_steps=40, base_batch=32)
    sim = world.sim
    sim.reset(0)
    sc = load_scenario("trace_job3")
    devs = [EmulatedDevice(sc, r, clock=lambda: 0.0, emulate_latency=False, sleep=lambda s: None) for r in range(4)]
    lengths, F = sim.fluct.chunks(270, 400)          # across the straggling rows 218+ (steps 280..580)
    steps = np.repeat(np.arange(len(lengths)), lengths.astype(int))
    for i, s in enumerate(range(270, 670)):
        for r, d in enumerate(devs):
            d.steps = s
            assert F[steps[i], r] == pytest.approx(d.factor()), (s, r)
    assert F.max() > 1.3                                # the stragglers are in there


def test_events_fall_at_their_scaled_time_and_split_the_interval(tmp_path: Path) -> None:
    body = worker(1.0) + worker(1.0) + "[[events]]\nat_s = 2\nrank = 1\nper_sample_ms = 3.0\n"
    w = make_scenario_world("cifar10", str(scen(tmp_path, body)), interval_steps=20, base_batch=32, time_scale=5.0)
    sim = w.sim
    sim.reset(0)
    b = np.array([32, 32])
    d_old = float(sim.tp.rank_times(np.array([1.0, 1.0]), b).max())
    d_new = float(sim.tp.rank_times(np.array([1.0, 3.0]), b).max())
    t0 = 10.0 - 2.5 * d_old                            # the event (2 s x 5) falls in the 3rd step
    before = sim.run_interval(b)                       # from time 0: all 20 steps before the event
    assert before.elapsed == pytest.approx(20 * d_old)
    sim.time = t0
    iv = sim.run_interval(b)
    assert iv.lengths.tolist() == [3.0, 17.0]
    assert iv.elapsed == pytest.approx(3 * d_old + 17 * d_new)
    sim.commit(iv)                                      # the oracle's estimates start from the new state
    assert sim.time >= 10.0 and sim.hw.tolist() == [1.0, 3.0]


def test_links_multiply_the_measured_sync(tmp_path: Path) -> None:
    body = worker(1.0) + worker(1.0, bw=100) + "[[events]]\nat_s = 1\nrank = 0\nbandwidth_mbit = 10\nlatency_ms = 2\n"
    f = scen(tmp_path, "grad_mb = 0.5\n" + body)
    sc = load_scenario(f)
    nbytes = gradient_bytes(sc)
    assert nbytes == pytest.approx(0.5e6 + 4 * 5_240, rel=0.05)       # the CNN's gradients + grad_mb
    w = make_scenario_world("cifar10", str(f), interval_steps=10, base_batch=32, time_scale=1.0)
    sim = w.sim
    sim.reset(0)
    ref = ring_s(nbytes, [sc.workers[0], sc.workers[0]])                 # uniform: 1000 Mbit/s, 0.05 ms
    m0 = ring_s(nbytes, sc.workers) / ref
    m1 = ring_s(nbytes, sc.workers_at(1.0)) / ref
    assert sim.link.mult == pytest.approx(m0) and m0 > 5 and m1 > 10 * m0 / 2
    b = np.array([32, 32])
    iv = sim.run_interval(b, time=2.0)
    tau = sim.tp.rank_times(np.ones(2), b, Link(m1))
    assert iv.link.mult == pytest.approx(m1)
    assert iv.elapsed == pytest.approx(10 * tau.max())
    out = sim.observe(b, iv)                           # measured allreduce: the multiplied sync (+ noise)
    assert out["raw"][:, 5] == pytest.approx(sim.tp.sync_at(b) * m1, rel=0.3)


def test_links_add_their_wire_time_to_a_captured_sync(tmp_path: Path) -> None:
    """Captured on the scenario: the measured sync holds the initial links and the engine's fixed
    cost, so a link event adds ring(t) - ring(0) instead of multiplying the whole sync (which
    charged link_degrade's static run 3.6x its live time)."""
    import shutil

    from dynamix_hvd.traces import shipped_workload
    d = tmp_path / "cap"
    shutil.copytree(shipped_workload("cifar10"), d)
    (d / CAPTURE_FILE).write_text(json.dumps({"scenario": "rs"}))
    body = worker(1.0) + worker(1.0, bw=100) + "[[events]]\nat_s = 1\nrank = 0\nbandwidth_mbit = 10\nlatency_ms = 2\n"
    f = scen(tmp_path, body)
    sc = load_scenario(f)
    nbytes = gradient_bytes(sc)
    sim = make_scenario_world(str(d), str(f), base_batch=32).sim
    sim.reset(0)
    assert sim.link.mult == 1.0 and sim.link.add == 0.0          # the initial links are in the measurement
    add = ring_s(nbytes, sc.workers_at(1.0)) - ring_s(nbytes, sc.workers)
    assert add > 0.001
    b = np.array([32, 32])
    iv = sim.run_interval(b, time=2.0)
    assert iv.link.mult == 1.0 and iv.link.add == pytest.approx(add)
    tau = sim.tp.rank_times(np.ones(2), b, Link(1.0, add))
    assert iv.elapsed == pytest.approx(10 * tau.max())
    assert tau.max() == pytest.approx(sim.tp.rank_times(np.ones(2), b).max() + add)
    out = sim.observe(b, iv)                           # measured allreduce: the sync plus the added wire time
    assert out["raw"][:, 5] == pytest.approx(sim.tp.sync_at(b) + add, rel=0.3)
    assert sim.scenario_info["sync_added_ms"][1] == pytest.approx(1e3 * add, abs=1e-3)


def test_memory_caps_and_defaults(tmp_path: Path) -> None:
    body = worker(1.0) + worker(2.0, extra="max_batch = 100\n")
    w = make_scenario_world("cifar10", str(scen(tmp_path, body)))
    assert w.sim.caps == (1024, 100) and w.sim.bounds().max_global_batch <= 1124
    assert w.sim.base_batch == 8                       # the scenario's
    assert run_one(w.sim, "hindsight", 0)["time_to_target_s"] is not None
    r = run_controller(w.sim, "goodput", 0)
    assert r["time_to_target_s"] is not None


def test_captured_workload_keeps_the_live_time_and_interval(tmp_path: Path) -> None:
    import shutil

    from dynamix_hvd.traces import shipped_workload
    d = tmp_path / "cap"
    shutil.copytree(shipped_workload("cifar10"), d)
    f = tmp_path / "sc7.toml"
    f.write_text(HEAD.replace("interval_steps = 10", "interval_steps = 7") + worker(1.0) + worker(1.0, bw=100))
    auto = make_scenario_world(str(d), str(f))
    assert auto.sim.scenario_info["time_scale"] != 1.0
    auto.sim.reset(0)                                  # a foreign workload: the hook's cadence at its step time
    step0 = float(auto.sim.tp.rank_times(auto.sim.hw, np.full(2, auto.sim.base_batch), auto.sim.link).max())
    assert auto.sim.interval_steps == hook_interval(step0) >= 10
    (d / CAPTURE_FILE).write_text(json.dumps({"scenario": "rs"}))
    cap = make_scenario_world(str(d), str(f))
    info = cap.sim.scenario_info
    assert info["captured"] and info["time_scale"] == 1.0 and cap.sim.interval_steps == 7   # the scenario's
    assert info["sync_multiplier_start"] == 1.0        # the slow link is already in the measured sync
    assert auto.sim.scenario_info["sync_multiplier_start"] > 1.0


def test_cli_with_scenario(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o.json"
    rc = cli_main(["replay", "--workload", "cifar10", "--scenario", "trace_cov", "--controllers",
                   "static,goodput,hindsight", "--seeds", "2", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["workers"] == 4 and res["scenario"]["scenario"] == "trace_cov"
    assert res["settings"]["speed_trace"] == "scenario:trace_cov" and res["settings"]["base_batch"] == 32
    t = {c: r["median"] for c, r in res["controllers"].items()}
    assert t["hindsight"] <= t["goodput"] and t["hindsight"] <= t["static"]
    for argv, msg in [
        (["--scenario", "trace_cov", "--workers", "4"], "--workers: not with --scenario"),
        (["--scenario", "trace_cov", "--time-scale", "-1"], "--time-scale '-1'"),
        (["--scenario", "nope_scenario"], "no scenario file 'nope_scenario'"),
        ([], "--speed-trace, --workers: required (or give --scenario)"),
    ]:
        rc = cli_main(["replay", "--workload", "cifar10", "--controllers", "static", "--seeds", "1",
                       "--out", str(out), *argv])
        assert rc == 2 and msg in capsys.readouterr().out, msg


def test_every_shipped_scenario_replays() -> None:
    from dynamix_hvd.emulate.scenario import shipped_scenarios
    for name in shipped_scenarios():
        w = make_scenario_world("cifar10", name)
        assert w.sim.n == load_scenario(name).world_size
        assert math.isfinite(w.sim.scenario_info["time_scale"])
