"""`dynamix bench` end to end on a tiny 2-rank scenario (short budget): results.json schema,
report.png, the training clock excluding evaluation, nothing left behind; plus the metric
helpers on synthetic logs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynamix_hvd.emulate import netns
from dynamix_hvd.emulate.bench import balance_efficiency, format_table
from dynamix_hvd.runlog import StepRecord, read_decisions, read_evals, read_events, read_steps, read_summary
from conftest import default_sigint

REPO = Path(__file__).resolve().parents[2]
TINY = """
name = "tiny"
workload = "digits_mlp"
target_accuracy = 0.85
max_time_s = 6
base_batch = 16
seed = 2
interval_steps = 5
eval_every_steps = 5
[[workers]]
fixed_ms = 2
per_sample_ms = 0.5
max_batch = 128
bandwidth_mbit = 200
latency_ms = 0.2
[[workers]]
fixed_ms = 2
per_sample_ms = 2.0
max_batch = 128
bandwidth_mbit = 200
latency_ms = 0.2
"""
ENTRY = {"time_to_target_s": (float, type(None)), "final_accuracy": float, "samples_per_s": float,
         "balance_efficiency": float, "decisions": int}


def _bench(tmp_path: Path, controllers: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    sc = tmp_path / "tiny.toml"
    sc.write_text(TINY)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "dynamix_hvd.cli", "bench", "--scenario", str(sc),
                        "--controllers", controllers, "--out", str(out), *extra],
                       capture_output=True, text=True, timeout=400, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    return p, out


def _check_results(out: Path, names: list[str]) -> dict:
    res = json.loads((out / "results.json").read_text())
    assert res["scenario"] == "tiny" and res["target_accuracy"] == 0.85
    assert list(res["controllers"]) == names
    for n in names:
        m = res["controllers"][n]
        for k, typ in ENTRY.items():
            assert isinstance(m[k], typ), (n, k, m[k])
        assert 0 < m["balance_efficiency"] <= 1 and 0 <= m["final_accuracy"] <= 1
        # the training clock stops for evaluation: wall time > training time, and the
        # per-step durations add up to (about) the training time
        steps = read_steps(out / n / "rank0.jsonl")           # (the readers check the worker's schema)
        busy = sum(s.step_s for s in steps)
        assert m["train_time_s"] >= 0.8 * busy and m["wall_s"] > m["train_time_s"]
        evals = read_evals(out / n / "evals.jsonl")
        if m["time_to_target_s"] is not None:
            assert m["time_to_target_s"] == pytest.approx(next(e.t for e in evals if e.acc >= 0.85), abs=1e-3)
        read_summary(out / n)
        read_events(out / n)                                  # the hook's decision records and events
    assert (out / "report.png").stat().st_size > 10_000
    return res


@pytest.mark.skipif(not netns.netns_available()[0], reason="network namespaces not permitted here")
def test_bench_over_namespaces(tmp_path: Path) -> None:
    before = set(netns.list_namespaces())
    p, out = _bench(tmp_path, "static,oracle")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "netns+tc" in p.stdout and "time_to_target_s" in p.stdout
    res = _check_results(out, ["static", "oracle"])
    oracle = res["controllers"]["oracle"]
    assert oracle["decisions"] >= 1 and oracle["final_plan"][0] > oracle["final_plan"][1]  # fast rank gets more
    assert res["controllers"]["static"]["decisions"] == 0
    assert res["controllers"]["oracle"]["balance_efficiency"] > res["controllers"]["static"]["balance_efficiency"]
    assert not _leftover(before)


def _leftover(before: set[str]) -> set[str]:
    """New dmx- namespaces whose owner process is gone (another live harness on the machine,
    e.g. a concurrent bench, may legitimately own namespaces at the same time)."""
    left = set()
    for n in set(netns.list_namespaces()) - before:
        parts = n.split("-")
        if n.startswith("dmx-") and len(parts) > 2 and parts[1].isdigit() and not Path(f"/proc/{parts[1]}").exists():
            left.add(n)
    return left


def test_bench_network_free(tmp_path: Path) -> None:
    # oracle@12: the oracle at a fixed global batch (the headroom sweep), below the hook's default
    # floor of half the base 2 x 16 (until session 8 the floor silently won: oracle@48 on 4 x 32 ran at 64)
    p, out = _bench(tmp_path, "proportional,oracle@12", "--no-netns")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "network-free" in p.stdout
    res = _check_results(out, ["proportional", "oracle@12"])
    plan = res["controllers"]["oracle@12"]["final_plan"]
    assert sum(plan) == 12 and plan[0] > plan[1], plan
    steps = read_steps(out / "oracle@12" / "rank0.jsonl")
    assert all(s.B == 12 for s in steps[10:] if s.full), sorted({s.B for s in steps if s.full})
    # the replay tool: proportional replayed on its own run's first recorded state proposes what it did live
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "replay_decisions.py"), str(out / "proportional"),
                        "--controllers", "proportional,goodput", "--first", "0"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [l.split() for l in r.stdout.splitlines()[2:]]
    decisions = read_decisions(out / "proportional")
    assert len(rows) == len(decisions) >= 1
    # columns: step, live B, live split, then per controller: B, fit B, split
    assert rows[0][5] == rows[0][2] and float(rows[0][3]) == pytest.approx(float(rows[0][1]), abs=0.05), r.stdout


def test_bench_counts_what_became_of_the_policys_choice(tmp_path: Path) -> None:
    """A learned policy's run reports, per outcome, how many of its decisions ended there (the
    decision log's ``policy`` field), here under a scenario whose LR rule lets the global batch grow."""
    from dynamix_hvd.controllers.ppo import POLICY_OUTCOMES
    sc = tmp_path / "tiny.toml"
    sc.write_text(TINY.replace("seed = 2", 'seed = 2\nlr_rule = "adascale"', 1))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "dynamix_hvd.cli", "bench", "--scenario", str(sc), "--controllers",
                        "ppo", "--out", str(out), "--no-netns", "--max-time-s", "4"],
                       capture_output=True, text=True, timeout=400, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    counts = json.loads((out / "results.json").read_text())["controllers"]["ppo"]["policy"]
    decisions = read_decisions(out / "ppo")
    # the policy's own decisions; after the runtime guard falls back (a drop of goodput after its
    # decisions, which this short run's timing can trigger) the fallback controller's have no outcome
    own = [d for d in decisions if d.controller == "ppo"]
    assert all(d.policy is None for d in decisions if d.controller != "ppo")
    assert set(counts) <= set(POLICY_OUTCOMES) and sum(counts.values()) == len(own) >= 1
    assert f"ppo: the policy's choice at its {len(own)} decisions (1 run): " in p.stdout
    # the run's recorded states fed again to the default: how many are outside its support, and why
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "live_support_gap.py"), str(out / "ppo")],
                       capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert " decisions outside the support" in r.stdout and f" of {len(decisions)} decisions" in r.stdout
    assert "loss_trend" in r.stdout and "log_batch_over_noise" in r.stdout     # the global columns' table


def test_bench_repeats_draw_their_own_seed(tmp_path: Path) -> None:
    # repeat k runs with the scenario's seed + k (paired across controllers), so repeats are
    # independent draws rather than the same run replayed; --seeds same keeps the old behaviour
    # static#twin: the same controller again under its own name (an A/A pair), paired by seed;
    # the order rotates per repeat, so the twin runs first in the second repeat
    p, out = _bench(tmp_path, "static,static#twin", "--no-netns", "--repeats", "2", "--max-time-s", "4")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert list(res["controllers"]) == ["static", "static#twin"]
    seed = read_summary(out / "static").seed
    assert res["seeds"] == [seed, seed + 1]
    assert read_summary(out / "static.r1").seed == seed + 1
    assert read_summary(out / "static#twin.r1").seed == seed + 1
    assert read_summary(out / "static#twin").controller == "static"
    tags = [ln.split()[0] + ln.split()[1] for ln in p.stdout.splitlines() if "time to target" in ln]
    assert tags == ["static#1", "static#twin#1", "static#twin#2", "static#2"], tags


def test_bench_autotune_runs_horovods_autotuner(tmp_path: Path) -> None:
    """``static+autotune`` is static with HOROVOD_AUTOTUNE=1 (the "Horovod autotune" baseline):
    Horovod's own autotuner writes its samples log in that run's directory, not in static's."""
    p, out = _bench(tmp_path, "static,static+autotune", "--no-netns", "--max-time-s", "4")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert list(res["controllers"]) == ["static", "static+autotune"]
    assert read_summary(out / "static+autotune").controller == "static"
    log = (out / "static+autotune" / "autotune.csv").read_text()
    assert "tensor_fusion_threshold" in log.splitlines()[0], log[:500]
    assert not (out / "static" / "autotune.csv").exists()
    p, _ = _bench(tmp_path, "static+autotune", "--engine", "ddp")
    assert p.returncode == 2 and "Horovod's autotuner" in p.stderr and "ddp" in p.stderr, p.stderr


@pytest.mark.parametrize("spec,words", [("static,bogus", ["bogus"]), ("oracle@x", ["oracle@x", "integer"]),
                                        ("oracle@0", ["oracle@0", ">= 1"]), ("goodput@64", ["only the oracle"]),
                                        ("goodput:slow", ["goodput:slow", "'fixed'"]),
                                        ("static,static", ["given twice", "static#twin"]),
                                        ("static#", ["'static#'", "label"]), ("bogus#b", ["bogus#b"])])
def test_bench_rejects_unknown_controller(tmp_path: Path, spec: str, words: list[str]) -> None:
    p, _ = _bench(tmp_path, spec)
    assert p.returncode == 2 and all(w in p.stderr for w in words), p.stderr


def test_bench_bad_scenario_names_key(tmp_path: Path) -> None:
    sc = tmp_path / "bad.toml"
    sc.write_text(TINY.replace("latency_ms = 0.2", "latency_ms = 0.2\nlatncy = 1", 1))
    p = subprocess.run([sys.executable, "-m", "dynamix_hvd.cli", "bench", "--scenario", str(sc),
                        "--controllers", "static", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2 and "workers[0].latncy" in p.stderr


def test_balance_efficiency_and_table() -> None:
    def log(c: float) -> list[StepRecord]:
        return [StepRecord(t=0.1 * i, step=i, b=8, B=16, compute_s=c, step_s=0.5) for i in range(3)]

    even = [log(0.1), log(0.1)]
    assert balance_efficiency(even) == pytest.approx(1.0)
    skew = [log(0.1), log(0.4)]
    assert balance_efficiency(skew) == pytest.approx(0.625)
    table = format_table({"controllers": {
        "static": {"time_to_target_s": 10.0, "final_accuracy": 0.8, "samples_per_s": 100.0,
                   "balance_efficiency": 0.5, "decisions": 0},
        "oracle": {"time_to_target_s": 5.0, "final_accuracy": 0.81, "samples_per_s": 200.0,
                   "balance_efficiency": 0.9, "decisions": 1}}})
    assert "0.50x" in table and "oracle" in table


@pytest.mark.skipif(not netns.netns_available()[0], reason="network namespaces not permitted here")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_bench_interrupted_leaves_nothing(tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C / SIGTERM to `dynamix bench` while ranks train: namespaces and rank processes go."""
    sc = tmp_path / "tiny.toml"
    sc.write_text(TINY.replace("max_time_s = 6", "max_time_s = 120"))
    p = subprocess.Popen([sys.executable, "-m", "dynamix_hvd.cli", "bench", "--scenario", str(sc),
                          "--controllers", "static", "--out", str(tmp_path / "out")],
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=default_sigint)
    mine = f"dmx-{p.pid}-"
    deadline = time.time() + 120
    rank_log = tmp_path / "out" / "static" / "rank0.jsonl"
    while time.time() < deadline and not (rank_log.exists() and rank_log.stat().st_size > 0):
        time.sleep(0.5)              # wait until the ranks are training inside their namespaces
    assert [n for n in netns.list_namespaces() if n.startswith(mine)], "bench never set up its cluster"
    p.send_signal(sig)
    assert p.wait(timeout=60) != 0
    assert [n for n in netns.list_namespaces() if n.startswith(mine)] == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "out") not in ps     # no worker of this bench survives


def test_worker_plain_mode_trains_with_static_batches(tmp_path: Path) -> None:
    """`python -m dynamix_hvd.emulate.worker --plain`: plain Horovod without the hook (the
    network-only baseline) trains the scenario with the fixed base batch on every rank."""
    from conftest import MPIRUN, run

    sc = tmp_path / "tiny.toml"
    sc.write_text(TINY.replace("max_time_s = 6", "max_time_s = 4"))
    out = tmp_path / "plain"
    worker = [sys.executable, "-m", "dynamix_hvd.emulate.worker", "--scenario", str(sc), "--controller", "static",
              "--run-dir", str(out), "--plain", "--emulate-latency"]
    run([*MPIRUN, "-np", "2", *worker], timeout=240)
    for r in (0, 1):
        steps = read_steps(out / f"rank{r}.jsonl")
        assert len(steps) >= 10
        assert {s.b for s in steps} == {16} and {s.B for s in steps} == {32}
        # the emulated device paces compute: rank 1 is 4x slower per sample (2 + 0.5*16 vs 2 + 2*16 ms)
        assert min(s.compute_s for s in steps) > 0
    evals = read_evals(out)
    assert evals and evals[-1].acc > evals[0].acc and evals[-1].acc > 0.5
    assert read_summary(out).controller == "static"
    assert not (out / "events.jsonl").exists()          # no hook, no decisions
