"""`dynamix capture-trace` on a tiny 2-rank scenario (network-free, 5 s per batch, real mpirun +
Horovod): the directory is in the Pollux format, `dynamix replay --scenario` recognises it as
captured (time scale 1, the scenario's interval), and a static replay at a captured batch reaches the
target when the captured run's curve and step time say it should."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dynamix_hvd.cli import main as cli_main
from dynamix_hvd.emulate.capture import parse_batches, reference_toml
from dynamix_hvd.emulate.scenario import load_scenario, parse_scenario
from dynamix_hvd.replay.runner import make_scenario_world, make_world, run_controller
from dynamix_hvd.traces import load_pollux

PAI = Path(__file__).resolve().parents[2] / "dynamix_hvd" / "traces" / "data" / "pai" / "job_3_norm.csv"
TINY = f"""name = "tiny2"
workload = "mnist1d_mlp"
target_accuracy = 0.3
max_time_s = 5
base_batch = 16
seed = 1
grad_mb = 0.2
[[workers]]
fixed_ms = 5
per_sample_ms = 0.5
speed_trace = "{PAI}"
speed_trace_worker = 7
[[workers]]
fixed_ms = 5
per_sample_ms = 1.0
[[events]]
at_s = 2
rank = 1
per_sample_ms = 2.0
"""


def test_reference_cluster_and_batch_errors(tmp_path: Path) -> None:
    sc = parse_scenario(TINY)
    ref = parse_scenario(reference_toml(sc, 32))
    assert ref.base_batch == 16 and ref.min_global_batch == 32 and ref.grad_mb == 0.2 and not ref.events
    assert all((w.fixed_ms, w.per_sample_ms, w.speed_trace) == (5.0, 0.5, "") for w in ref.workers)
    with pytest.raises(ValueError, match="multiple of the 2 ranks"):
        reference_toml(sc, 33)
    with pytest.raises(ValueError, match="above the reference worker's max_batch"):
        reference_toml(sc, 4096)
    with pytest.raises(ValueError, match="--batches 'a,b'"):
        parse_batches("a,b")


def test_capture_then_replay(tmp_path: Path, capsys) -> None:
    f = tmp_path / "tiny.toml"
    f.write_text(TINY)
    out = tmp_path / "cap"
    rc = cli_main(["capture-trace", "--scenario", str(f), "--batches", "16,32", "--out", str(out), "--no-netns"])
    assert rc == 0, capsys.readouterr().out
    wl = load_pollux(out)
    assert sorted(int(c.batch) for c in wl.curves) == [16, 32]
    meta = json.loads((out / "capture.json").read_text())
    assert meta["scenario"] == "tiny2" and meta["batches"] == [16, 32]
    scal = np.genfromtxt(out / "scalability.csv", delimiter=",", names=True)
    assert scal["local_bsz"].tolist() == [8.0, 16.0] and np.all(scal["sync_time"] > 0)
    assert np.all(scal["sync_time"] < scal["step_time"])

    # the files hold what the runs measured (recomputed here from the workers' own logs)
    for i, B in enumerate((16, 32)):
        run = out / "runs" / f"B{B}"
        steps = [json.loads(ln) for r in (0, 1) for ln in (run / f"rank{r}.jsonl").read_text().splitlines()]
        steps = [x for x in steps if x["step"] > 10 and x["full"]]
        assert scal["step_time"][i] == pytest.approx(np.median([x["step_s"] for x in steps]), rel=1e-4)
        assert scal["sync_time"][i] == pytest.approx(
            np.median([max(0.0, x["step_s"] - x["compute_s"]) for x in steps]), rel=1e-4)
        evals = [json.loads(ln) for ln in (run / "evals.jsonl").read_text().splitlines()]
        rows = np.genfromtxt(out / f"validation-{B}.csv", delimiter=",", names=True)
        assert rows["iteration"].tolist() == [e["step"] for e in evals]
        assert rows["metric"] == pytest.approx([e["acc"] for e in evals], abs=1e-5)

    w = make_scenario_world(str(out), str(f))
    info = w.sim.scenario_info
    assert info["captured"] and info["time_scale"] == 1.0 and w.sim.interval_steps == 10
    assert info["events_at_sim_s"] == [2.0] and info["hardware_factors"] == [1.0, 2.0]

    # fidelity: a homogeneous static replay at B = 32 = the captured run's iterations to the target
    # (linear between evaluations on the best-so-far curve) x its measured step time
    plain = make_world(str(out), "none", 2, [1.0, 1.0], interval_steps=10, base_batch=16)
    target = plain.sim.pm.target
    rows = np.genfromtxt(out / "validation-32.csv", delimiter=",", names=True)
    best = np.maximum.accumulate(rows["metric"])
    k = int(np.argmax(best >= target))
    it0, m0 = (rows["iteration"][k - 1], best[k - 1]) if k > 0 else (0.0, plain.sim.pm.start)
    iters = it0 + (target - m0) / (best[k] - m0) * (rows["iteration"][k] - it0)
    want = iters * float(scal["step_time"][1])
    got = run_controller(plain.sim, "static", 0)["time_to_target_s"]
    assert got == pytest.approx(want, rel=0.03), (got, want)

    rc = cli_main(["replay", "--workload", str(out), "--scenario", str(f), "--controllers", "static,goodput",
                   "--seeds", "1", "--out", str(tmp_path / "r.json")])
    assert rc == 0
    assert json.loads((tmp_path / "r.json").read_text())["scenario"]["captured"] is True
    assert load_scenario(str(f)).name == "tiny2"
