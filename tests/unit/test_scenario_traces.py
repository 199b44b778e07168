"""Issue 20 scenario keys: per-worker speed traces (PAI file or CoV draw) and grad_mb; the
emulated device's mapping of trace rows to training steps."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynamix_hvd.emulate.device import EmulatedDevice
from dynamix_hvd.emulate.scenario import ScenarioError, load_scenario
from dynamix_hvd.replay.speeds import Fluctuation, load_speed_trace
from dynamix_hvd.traces import shipped_pai

HEAD = """
name = "tr"
workload = "mnist1d_mlp"
target_accuracy = 0.6
max_time_s = 30
base_batch = 8
seed = 5
"""
# worker 4: times 100, 200, 300, 400 (job median 200); worker 9: 200 each row
PAI = ",worker,gpu,time,batch_time_norm\n" + "".join(
    f"{2 * k},4,25,{1 + 10 * k},{100 * (k + 1)}\n{2 * k + 1},9,25,{1 + 10 * k},200\n" for k in range(4))


def write(tmp: Path, body: str, pai: str = PAI) -> Path:
    (tmp / "traces").mkdir(exist_ok=True)
    (tmp / "traces" / "job.csv").write_text(pai)
    f = tmp / "sc.toml"
    f.write_text(HEAD + body)
    return f


W0 = """
[[workers]]
fixed_ms = 2
per_sample_ms = 1
speed_trace = "traces/job.csv"
speed_trace_worker = 4
speed_trace_steps_per_row = 3
speed_trace_offset = 1
[[workers]]
fixed_ms = 2
per_sample_ms = 1.0
"""


def test_pai_trace_keys_and_relative_path(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, W0))
    w = sc.workers[0]
    assert w.speed_trace == str((tmp_path / "traces" / "job.csv").resolve())
    assert (w.speed_trace_worker, w.speed_trace_steps_per_row, w.speed_trace_offset) == (4, 3, 1)
    assert sc.workers[1].speed_trace == "" and sc.grad_mb == 0.0


def test_device_maps_rows_to_steps(tmp_path: Path) -> None:
    """Row = (offset + step // steps_per_row) mod T; value = worker time / job-wide median (200)."""
    sc = load_scenario(write(tmp_path, W0))
    slept: list[float] = []
    dev = EmulatedDevice(sc, 0, clock=lambda: 0.0, emulate_latency=False, sleep=slept.append)
    seen = []
    for step in range(14):
        dev.before_backward(8, 0.0)          # compute (2 + 8) ms x factor
        seen.append(round(slept[-1] / 0.010, 6))
        dev.after_step()
    # offset 1: rows 1,1,1, 2,2,2, 3,3,3, 0,0,0 (wrap), 1,1  -> 300/200, 400/200, 100/200, 200/200
    assert seen == [1.0] * 3 + [1.5] * 3 + [2.0] * 3 + [0.5] * 3 + [1.0] * 2
    # rank 1 has no trace; the oracle's true speeds include rank 0's factor at the current step
    dev.steps = 3
    assert dev.true_speeds() == pytest.approx([1000.0 / 1.5, 1000.0])
    other = EmulatedDevice(sc, 1, clock=lambda: 0.0, emulate_latency=False, sleep=slept.append)
    other.before_backward(8, 0.0)
    assert slept[-1] == pytest.approx(0.010)


def test_default_steps_per_row_is_the_files_stride(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, W0.replace("speed_trace_steps_per_row = 3\n", "")))
    dev = EmulatedDevice(sc, 0, clock=lambda: 0.0, emulate_latency=False, sleep=lambda s: None)
    dev.steps = 9
    assert dev.factor() == pytest.approx(1.0)     # row 1 (offset 1) for steps 0..9
    dev.steps = 10
    assert dev.factor() == pytest.approx(1.5)


def test_shipped_pai_file_matches_the_replay_normalisation() -> None:
    """The device's value at step s is the replay's ``norm='job'`` series of that worker."""
    from dynamix_hvd.emulate.scenario import parse_scenario
    path = shipped_pai("job_3_norm")
    sc = parse_scenario(HEAD + f'[[workers]]\nfixed_ms = 1\nper_sample_ms = 1\nspeed_trace = "{path}"\n'
                        "speed_trace_worker = 7\nspeed_trace_offset = 5\n")
    ser = load_speed_trace(str(path)).series[:, 7]
    dev = EmulatedDevice(sc, 0, clock=lambda: 0.0, emulate_latency=False, sleep=lambda s: None)
    for s in (0, 9, 10, 57, 2421):
        dev.steps = s
        assert dev.factor() == pytest.approx(ser[(5 + s // 10) % ser.size])


def test_cov_draw_is_the_replay_worlds(tmp_path: Path) -> None:
    cov = shipped_pai("coefficient_variation")
    body = "".join(f'[[workers]]\nfixed_ms = 1\nper_sample_ms = 1\nspeed_trace = "cov:{cov}"\n'
                   f"speed_trace_seed = 11\nspeed_trace_steps_per_row = 2\n" for _ in range(3))
    sc = load_scenario(write(tmp_path, body))
    fl = Fluctuation(load_speed_trace(f"cov:{cov}"), 3, np.random.default_rng(11))
    want = fl.rows(np.arange(6))                  # the replay world's multipliers, rows 0..5
    devs = [EmulatedDevice(sc, r, clock=lambda: 0.0, emulate_latency=False, sleep=lambda s: None) for r in range(3)]
    for step in range(12):
        for r, d in enumerate(devs):
            d.steps = step
            assert d.factor() == pytest.approx(want[step // 2, r])
    assert np.ptp(want[0]) > 0                    # the ranks differ (one z per rank)
    # the default seed is the scenario's
    sc2 = load_scenario(write(tmp_path, body.replace("speed_trace_seed = 11\n", "")))
    d = EmulatedDevice(sc2, 1, clock=lambda: 0.0, emulate_latency=False, sleep=lambda s: None)
    fl5 = Fluctuation(load_speed_trace(f"cov:{cov}"), 3, np.random.default_rng(5))
    assert d.factor() == pytest.approx(fl5.rows(np.arange(1))[0, 1])


def test_grad_mb_key(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, "grad_mb = 2.5\n" + W0))
    assert sc.grad_mb == 2.5
    with pytest.raises(ScenarioError, match=r"sc.toml: grad_mb = -1: must be >= 0"):
        load_scenario(write(tmp_path, "grad_mb = -1\n" + W0))


@pytest.mark.parametrize("old, new, key", [
    ('"traces/job.csv"', '"traces/nope.csv"', "workers[0].speed_trace = 'traces/nope.csv'"),
    ('"traces/job.csv"', '""', "workers[0].speed_trace"),
    ('"traces/job.csv"', "3", "workers[0].speed_trace = 3"),
    ("speed_trace_worker = 4", "speed_trace_worker = 5", "workers[0].speed_trace_worker = 5: no such worker"),
    ("speed_trace_worker = 4\n", "", "missing key workers[0].speed_trace_worker"),
    ("speed_trace_worker = 4", "speed_trace_worker = -1", "workers[0].speed_trace_worker = -1"),
    ("speed_trace_steps_per_row = 3", "speed_trace_steps_per_row = 0", "workers[0].speed_trace_steps_per_row = 0"),
    ("speed_trace_steps_per_row = 3", "speed_trace_steps_per_row = 1.5",
     "workers[0].speed_trace_steps_per_row = 1.5"),
    ("speed_trace_offset = 1", "speed_trace_offset = 4", "workers[0].speed_trace_offset = 4: must be < the trace's 4 rows"),
    ("speed_trace_offset = 1", "speed_trace_offset = 1\nspeed_trace_seed = 2", "workers[0].speed_trace_seed = 2: only for cov"),
    ('speed_trace = "traces/job.csv"\n', "", "workers[0].speed_trace_offset = 1: needs workers[0].speed_trace"),
    ("per_sample_ms = 1.0\n", "per_sample_ms = 1.0\nspeed_trace_offset = 2\n", "workers[1].speed_trace_offset = 2: needs"),
    ("speed_trace_worker = 4", "speed_trace_wroker = 4", "unknown key workers[0].speed_trace_wroker"),
])
def test_bad_trace_keys_name_the_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    assert old in W0
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write(tmp_path, W0.replace(old, new, 1)))
    assert key in str(exc.value), str(exc.value)
    assert str(tmp_path / "sc.toml") in str(exc.value)      # and the file


def test_bad_trace_files_name_file_row_and_key(tmp_path: Path) -> None:
    bad = PAI.replace("4,25,11,200", "4,25,11,x")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write(tmp_path, W0, pai=bad))
    msg = str(exc.value)
    assert "workers[0].speed_trace" in msg and "job.csv, row 4, column 'batch_time_norm'" in msg, msg
    cov_with_worker = W0.replace('"traces/job.csv"', f'"cov:{shipped_pai("coefficient_variation")}"')
    with pytest.raises(ScenarioError, match=r"workers\[0\].speed_trace_worker = 4: only for a PAI"):
        load_scenario(write(tmp_path, cov_with_worker))


def test_events_cannot_change_the_trace(tmp_path: Path) -> None:
    body = W0 + "[[events]]\nat_s = 1\nrank = 0\nspeed_trace_offset = 2\n"
    with pytest.raises(ScenarioError, match=r"events\[0\].speed_trace_offset: events change numeric"):
        load_scenario(write(tmp_path, body))
