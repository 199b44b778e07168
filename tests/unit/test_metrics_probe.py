"""`dynamix probe` as a user runs it (no mpirun here; tests/launch runs it under mpirun), and
the Collector's Python view."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dynamix_hvd.metrics import Collector, CollectorConfig
from dynamix_hvd.records import WorkerStats

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def test_probe_prints_one_json_snapshot() -> None:
    out = subprocess.run([sys.executable, "-m", "dynamix_hvd.cli", "probe", "--window", "0.2", "--interfaces", "lo"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 1
    snap = json.loads(lines[0])
    assert set(snap["network"]) == {"lo"}
    lo = snap["network"]["lo"]
    assert lo["kind"] == "eth" and lo["counters"]["tx_bytes"] >= 0 and lo["tx_Bps"] >= 0
    assert 0 <= snap["memory"]["headroom"] <= 1 and snap["memory"]["rss_bytes"] > 0
    assert snap["cpu"]["node_util"] is None or 0 <= snap["cpu"]["node_util"] <= 1
    assert snap["samples"] >= 2
    assert "available" in snap["collectives"]
    assert {s["name"] for s in snap["sources"]} == {"netdev", "infiniband", "host", "gpu"}


def test_probe_on_fixture_tree() -> None:
    out = subprocess.run([sys.executable, "-m", "dynamix_hvd.cli", "probe", "--window", "0", "--sys-root",
                          str(FIX / "sys_ib"), "--proc-root", str(FIX / "proc"), "--no-gpu"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    snap = json.loads(out)
    assert set(snap["network"]) == {"mlx4_0/1", "mlx4_0/2", "mlx5_0/1"}
    assert snap["network"]["mlx4_0/2"]["counters"]["rx_bytes"] is None  # N/A stays null, not 0
    assert snap["memory"]["headroom"] == pytest.approx(0.25)
    assert snap["gpu"] is None


def test_probe_bad_interface_fails_cleanly() -> None:
    p = subprocess.run([sys.executable, "-m", "dynamix_hvd.cli", "probe", "--interfaces", "nope0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "nope0" in p.stderr and "Traceback" not in p.stderr


def test_window_fills_worker_stats() -> None:
    with Collector(CollectorConfig(interfaces=("lo",), period_s=0.02, gpu=False)) as c:
        sum(i * i for i in range(200000))
        w = c.window()
    assert w.samples >= 2 and w.duration_s > 0
    ws = WorkerStats(rank=0, batch_size=32, max_batch=64, **w.worker_stats_fields(steps=10))
    assert ws.nic_tx_Bps >= 0 and 0 <= ws.mem_headroom <= 1 and ws.cpu_util > 0
    assert 0 < w.process_cpu_cores <= 1.5  # one busy Python thread (+ the sampler)
    assert math.isnan(ws.gpu_util)  # no GPU: no data, not zero
    if not c.comm_available:
        assert math.isnan(ws.allreduce_bytes) and math.isnan(ws.allreduce_p50_s)


def test_invalid_config() -> None:
    with pytest.raises(ValueError, match="period_s"):
        Collector(CollectorConfig(period_s=-1))
