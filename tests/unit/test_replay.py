"""Replay simulator: fidelity to the measurements, progress composition, throughput, speeds, CLI."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from dynamix_hvd.cli import main as cli_main
from dynamix_hvd.replay.progress import ProgressModel, build_progress
from dynamix_hvd.replay.runner import make_world, run_controller
from dynamix_hvd.replay.sim import ReplaySim
from dynamix_hvd.replay.speeds import Fluctuation, load_speed_trace
from dynamix_hvd.replay.throughput import build_throughput
from dynamix_hvd.traces import load_pollux, shipped_pai, shipped_workload, shipped_workloads


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _iterations_to_target(path: Path, batch: int, target: float, start: float, inc: bool) -> float:
    """Independent of the library: walk the measured curve (best so far, linear between epochs,
    (0, start) before the first epoch) to the first crossing of the target."""
    sgn = 1.0 if inc else -1.0
    prev_it, prev_m, best = 0.0, sgn * start, sgn * start
    for r in _rows(path):
        it, m = float(r["iteration"]), max(best, sgn * float(r["metric"]))
        if m >= sgn * target:
            return prev_it + (sgn * target - prev_m) / (m - prev_m) * (it - prev_it) if m > prev_m else it
        prev_it, prev_m, best = it, m, m
    return math.inf


def _measured_step(d: Path, n: int, b: int) -> float | None:
    """Median step time of the most-spread placement of n replicas at local batch b, from the CSVs."""
    rows = [(len(r["placement"]), float(r["step_time"])) for r in _rows(d / "placements.csv")
            if sum(map(int, r["placement"])) == n and int(r["local_bsz"]) == b]
    rows += [(int(r["num_nodes"]), float(r["step_time"])) for r in _rows(d / "scalability.csv")
             if int(r["num_replicas"]) == n and int(r["local_bsz"]) == b]
    if not rows:
        return None
    most = max(k for k, _ in rows)
    return float(np.median([t for k, t in rows if k == most]))


@pytest.mark.parametrize("workload", ["bert", "cifar10", "deepspeech2", "ncf"])
def test_fidelity_homogeneous_static(workload):
    """Homogeneous job at a measured global batch, no fluctuation, static plan: time to target =
    iterations_to_target x measured step time within 2%, for every measured B that some measured
    (N, B/N) placement realises (at least one per workload)."""
    d = shipped_workload(workload)
    pm = build_progress(load_pollux(d))
    checked = 0
    for f in sorted(d.glob("validation-*.csv")):
        B = int(f.stem.split("-")[1])
        for n in (2, 4, 8, 16):
            if B % n or B // n < 1:
                continue
            step = _measured_step(d, n, B // n)
            if step is None:
                continue
            world = make_world(str(d), "none", n, speeds=[1.0], base_batch=B // n)
            got = run_controller(world.sim, "static", seed=0)["time_to_target_s"]
            iters = _iterations_to_target(f, B, pm.target, pm.start, pm.increasing)
            want = iters * step
            assert got == pytest.approx(want, rel=0.02), (workload, B, n, got, want)
            checked += 1
    assert checked >= 1, workload


def test_progress_composition_and_interpolation():
    pm = build_progress(load_pollux(shipped_workload("cifar10")))
    K = pm.n_levels
    c1, c2 = pm.cum_for(256)[0], pm.cum_for(2048)[0]
    assert np.allclose(c1, pm.cum[1]) and np.allclose(c2, pm.cum[4])          # measured B: the curve itself
    mid = pm.cum_for(724)[0]                                                     # between 512 and 1024
    lo, hi = pm.cum[2], pm.cum[3]
    assert np.all(mid[1:] >= np.minimum(lo, hi)[1:]) and np.all(mid[1:] <= np.maximum(lo, hi)[1:])
    assert np.allclose(pm.cum_for(16)[0], pm.cum[0])                              # below: smallest measured
    # constant B: target after exactly cum_B[K] samples
    assert ProgressModel.advance(0.0, c1, c1[-1] * (1 - 1e-9))[0] < K
    assert ProgressModel.advance(0.0, c1, c1[-1])[0] == K
    # half of segment k at B1 then B2: half of B2's samples for that segment finish it
    k = 2
    P = ProgressModel.advance(float(k), c1, 0.5 * (c1[k + 1] - c1[k]))[0]
    assert P == pytest.approx(k + 0.5)
    P2 = ProgressModel.advance(P, c2, 0.5 * (c2[k + 1] - c2[k]))[0]
    assert P2 == pytest.approx(k + 1)
    # scalar path of the simulator = array path
    for P0, s in ((0.0, 1e5), (1.3, 4e5), (3.9, 1e7)):
        assert ProgressModel.advance1(P0, list(c2), s) == pytest.approx(ProgressModel.advance(P0, c2, s)[0])
    # a level no measured run reached is unreachable (no progress beyond it)
    pm2 = build_progress(load_pollux(shipped_workload("cifar10")), target=0.9465)
    assert math.isinf(pm2.cum_for(4096)[0][-1]) and math.isfinite(pm2.cum_for(512)[0][-1])


def test_direction_and_default_target():
    for w in shipped_workloads():
        wl = load_pollux(shipped_workload(w))
        pm = build_progress(wl)
        assert pm.increasing == (w != "deepspeech2")
        assert np.isfinite(pm.cum[:, -1]).all()            # every measured batch reaches the default target
        assert (pm.target - pm.start) * (1 if pm.increasing else -1) > 0


def test_throughput_model():
    wl = load_pollux(shipped_workload("cifar10"))
    t4, t64, t100 = (build_throughput(wl.throughput, n) for n in (4, 64, 100))
    b = np.full(4, 64)
    assert t4.rank_times(np.ones(4), b).max() == pytest.approx(_measured_step(shipped_workload("cifar10"), 4, 64))
    assert t4.cap == 1024 and t4.grid[0] == 1
    h = np.array([1.0, 1.0, 2.0, 4.0])
    tau = t4.rank_times(h, b)
    assert tau[3] > tau[2] > tau[0]
    # the oracle's envelope is non-decreasing in b and never below the true time
    for hh in (1.0, 3.0):
        tt = t64.rank_times(np.full(t64.cap, hh), np.arange(1, t64.cap + 1))
        env = t64.envelope(np.array([hh]))[0]
        assert np.all(np.diff(env) >= 0) and np.all(np.interp(np.arange(1, t64.cap + 1), t64.grid, env) >= tt - 1e-12)
    assert np.all(t100.sync >= t64.sync)                   # extrapolated sync beyond 64 replicas grows


def test_speed_traces():
    tr = load_speed_trace(str(shipped_pai("job_3_norm")))
    fl = Fluctuation(tr, 25, np.random.default_rng(0))
    lengths, F = fl.chunks(5, 30)                          # steps 5..34, stride 10: 4 chunks
    assert list(lengths) == [5, 10, 10, 5]
    k = np.arange(0, 4)
    assert np.allclose(F[:, 3], tr.series[(k + fl.off[3]) % tr.series.shape[0], 3])
    assert not np.allclose(F[:, 3], F[:, 13])              # same worker, shifted in time
    cov = load_speed_trace(f"cov:{shipped_pai('coefficient_variation')}")
    fc = Fluctuation(cov, 4000, np.random.default_rng(1))
    rows = fc.rows(np.arange(5))
    c = fc.sig[(np.arange(5) + fc.off0) % fc.T]
    want = np.sqrt(np.expm1(c ** 2))
    assert np.allclose(rows.std(axis=1) / rows.mean(axis=1), want, rtol=0.15, atol=0.01)


def test_controllers_run_unchanged():
    world = make_world("deepspeech2", str(shipped_pai("job_2_norm")), 6, interval_steps=40)
    for name in ("static", "proportional", "goodput", "random", "ppo"):
        r = run_controller(world.sim, name, seed=3, max_decisions=12)
        assert r["decisions"] == 12 and len(r["schedule"]) == 12
    sim = world.sim
    from dynamix_hvd.plan import Plan
    sim.reset(0)
    out = sim.step([10] * 6)
    st = sim.cluster_state(Plan.uniform(6, 10), out)
    w = st.workers[0]
    assert st.world_size == 6 and w.max_batch == sim.tp.cap and w.step_s >= w.compute_s > 0
    assert math.isnan(w.nic_tx_Bps) and st.glob.noise_scale > 0 and 0 < out["progress"] < 1
    # what the policy sees is what the live hook gives: no training budget, no validation loss
    assert st.glob.progress == 0.0 and math.isnan(st.glob.val_loss_trend)
    assert w.compute_se_s == pytest.approx(sim.tp.timing_sigma * w.compute_s)
    assert not st.glob.noise_scale_stable                 # the live estimator: one update is not enough
    for _ in range(6):
        out = sim.step([10] * 6)
    st = sim.cluster_state(Plan.uniform(6, 10), out)
    assert st.glob.noise_scale_stable and 0 <= st.glob.noise_scale_rel_err <= 0.25


def _synthetic(d: Path) -> None:
    """A workload unlike the shipped ones: decreasing metric, 3 runs, scalability.csv only."""
    d.mkdir()
    for B, eff in ((30, 1.0), (90, 0.8), (270, 0.5)):
        with open(d / f"validation-{B}.csv", "w") as f:
            f.write("iteration,metric,grad_sqr,grad_var\n")
            for e in range(1, 8):
                it = int(e * 600 / B * (1 / eff) * 10)
                f.write(f"{it},{5.0 * math.exp(-0.4 * e * 1.0):.4f},{1.0 / e},{0.5 * e}\n")
    with open(d / "scalability.csv", "w") as f:
        f.write("num_nodes,num_replicas,local_bsz,step_time,sync_time\n")
        for r in (2, 5, 9):
            for b in (3, 7, 19):
                f.write(f"{r},{r},{b},{0.01 + 0.002 * b + 0.003 * r},{0.003 * r}\n")


def test_cli_on_unknown_formats(tmp_path: Path, capsys):
    _synthetic(tmp_path / "toy")
    pai = tmp_path / "pai.csv"
    with open(pai, "w") as f:
        f.write(",worker,gpu,time,batch_time_norm\n")
        for t in range(1, 200, 5):
            for w in range(3):
                f.write(f"0,{w},10,{t},{500 + 100 * w + (t % 7) * 10}\n")
    out = tmp_path / "out.json"
    rc = cli_main(["replay", "--workload", str(tmp_path / "toy"), "--speed-trace", str(pai), "--workers", "12",
                   "--controllers", "static,goodput,ppo,hindsight", "--seeds", "3", "--out", str(out),
                   "--speeds", "1,2"])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["workload"] == "toy" and res["workers"] == 12 and res["target_metric"] < 5.0
    assert set(res["controllers"]) == {"static", "goodput", "ppo", "hindsight"}
    for r in res["controllers"].values():
        assert len(r["time_to_target_s"]) == 3 and r["reached_fraction"] == 1.0 and r["median"] > 0
    # every other controller against goodput: its ratio of medians and the paired interval of its times
    from dynamix_hvd.replay.paired import ratio_interval
    g = res["controllers"]["goodput"]
    assert "vs_goodput" not in g
    for name in ("static", "ppo", "hindsight"):
        r = res["controllers"][name]
        vs = r["vs_goodput"]
        assert vs["ratio"] == pytest.approx(r["median"] / g["median"], abs=1e-4)
        lo, hi = ratio_interval(r["time_to_target_s"], g["time_to_target_s"])
        assert vs["interval"] == [pytest.approx(lo, abs=1e-4), pytest.approx(hi, abs=1e-4)] and lo <= hi
    assert res["controllers"]["static"]["vs_goodput"]["interval"][0] > 1.0     # static is slower on every seed
    # one measured global batch only (the efficiency curve is that run's): every controller still runs
    one = tmp_path / "one"
    one.mkdir()
    (one / "validation-90.csv").write_text((tmp_path / "toy" / "validation-90.csv").read_text())
    (one / "scalability.csv").write_text((tmp_path / "toy" / "scalability.csv").read_text())
    rc = cli_main(["replay", "--workload", str(one), "--speed-trace", str(pai), "--workers", "1",
                   "--controllers", "static,proportional,goodput,ppo", "--seeds", "2", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert all(r["reached_fraction"] == 1.0 for r in res["controllers"].values())
    rc = cli_main(["replay", "--workload", str(tmp_path / "toy"), "--speed-trace", "none", "--workers", "2",
                   "--controllers", "static", "--seeds", "1", "--out", str(out), "--target", "99"])
    assert rc == 2 and "target 99 is not better" in capsys.readouterr().out
    rc = cli_main(["replay", "--workload", str(tmp_path / "nope"), "--speed-trace", "none", "--workers", "2",
                   "--controllers", "static", "--seeds", "1", "--out", str(out)])
    assert rc == 2 and "not found" in capsys.readouterr().out


def test_a_workload_the_replay_cannot_use_is_refused_naming_the_file_that_makes_it_so(tmp_path: Path, capsys):
    """A run that never improves on the curves' start is named (not the first file), and a local batch
    below one sample (a unit error) is refused instead of capping every rank at one sample."""
    _synthetic(tmp_path / "flat")
    flat = tmp_path / "flat" / "validation-270.csv"
    rows = flat.read_text().splitlines()
    flat.write_text("\n".join([rows[0]] + [",".join(r.split(",")[:1] + ["9.0"] + r.split(",")[2:]) for r in rows[1:]])
                    + "\n")
    out = tmp_path / "out.json"
    args = ["--speed-trace", "none", "--workers", "2", "--controllers", "static", "--seeds", "1", "--out", str(out)]
    assert cli_main(["replay", "--workload", str(tmp_path / "flat"), *args]) == 2
    msg = capsys.readouterr().out
    assert "validation-270.csv" in msg and "validation-30.csv" not in msg and "no target" in msg, msg
    _synthetic(tmp_path / "tiny")
    sc = tmp_path / "tiny" / "scalability.csv"
    lines = sc.read_text().splitlines()
    sc.write_text("\n".join(lines[:2] + [lines[2].replace(",7,", ",0.007,", 1)] + lines[3:]) + "\n")
    assert "2,2,0.007," in sc.read_text()          # the file's row 3 (row 1 is the header)
    assert cli_main(["replay", "--workload", str(tmp_path / "tiny"), *args]) == 2
    msg = capsys.readouterr().out
    assert "scalability.csv" in msg and "row 3" in msg and "local_bsz" in msg and "below one sample" in msg, msg


def test_the_replay_decides_at_the_live_hooks_cadence():
    """Unless given, a decision every 10 steps or every 0.5 s of steps, as the hook with its defaults
    (``DynamixConfig.next_interval``), at the start plan's step time in the seed's world. ncf's
    steps take ~28 ms: 11-18 steps (the old automatic interval was 246 steps, 7 s)."""
    sim = make_world("ncf", "none", 8).sim
    for seed in range(3):
        sim.reset(seed)
        step0 = float(sim.tp.rank_times(sim.hw, np.full(8, sim.base_batch)).max())
        k = sim.interval_steps
        assert 10 <= k <= 20 and k * step0 >= 0.5 - 1e-9 and (k == 10 or (k - 1) * step0 < 0.5)
    assert make_world("ncf", "none", 8, interval_steps=40).sim.interval_steps == 40


def test_continuous_noise_scale_carries_its_level_over_a_batch_change():
    # gns_model="run" reads the run measured at the batch running (it jumps at a change, ncf's
    # runs differ up to 5x at one level); "continuous" keeps the level and takes the trend
    for model in ("run", "continuous"):
        world = make_world("ncf", "none", 4, gns_model=model)
        sim = world.sim
        sim.reset(0)
        b1 = np.full(sim.n, sim.base_batch)
        sim.observe(b1, _commit(sim, b1))
        first = sim._log_phi
        b2 = 4 * b1
        P0 = sim.P
        iv = sim.run_interval(b2)
        sim.commit(iv)
        B2 = float(b2.sum())
        got = sim.true_noise_scale(B2)
        if model == "run":
            assert got == pytest.approx(sim.pm.noise_scale(sim.P, B2))
        else:
            want = math.exp(first) * sim.pm.noise_scale(sim.P, B2) / sim.pm.noise_scale(P0, B2)
            assert got == pytest.approx(want, rel=1e-9)
            assert abs(math.log(got / sim.pm.noise_scale(sim.P, B2))) > 0.1   # not the other run's level
    with pytest.raises(ValueError, match="gns_model='smooth'"):
        make_world("ncf", "none", 4, gns_model="smooth")


def _commit(sim, b):
    iv = sim.run_interval(b)
    sim.commit(iv)
    return iv


def test_guarded_controllers_run_behind_the_live_guard_and_its_revert():
    # session 65: the replay drives goodput and ppo inside the live hook's Decider, so a controller
    # whose moves lose goodput is handed to the fallback at the batch measured good, as live
    from dynamix_hvd.controllers.base import Controller
    from dynamix_hvd.replay.runner import is_guarded

    class Doubler(Controller):      # doubles the global batch at every decision: goodput falls
        name = "doubler"
        guarded = True

        def decide(self, state):
            return [2.0 * b for b in state.plan.batch_sizes]

    world = make_world("cifar10", "none", 4, interval_steps=40)
    sim = world.sim
    bounds = sim.bounds()
    on = run_controller(sim, "doubler", seed=1, max_decisions=30, controller=Doubler(bounds, sim.base_batch),
                        guard=True)
    off = run_controller(sim, "doubler", seed=1, max_decisions=30, controller=Doubler(bounds, sim.base_batch))
    assert off["fallback"] is None and off["schedule"][-1] > 4 * off["schedule"][0]
    k = on["fallback"]
    assert k is not None and k >= 2, on["schedule"]
    # the revert: the plan after the fallback runs the global batch of the guard's reference, and stays
    assert on["schedule"][k + 1] < on["schedule"][k] and on["schedule"][-1] == on["schedule"][k + 1]
    assert is_guarded("goodput") and is_guarded("ppo:x.zip?refute=1") and not is_guarded("proportional")
    assert not is_guarded("hindsight")
