"""The held-out workloads (benchmarks/heldout_workloads/, evaluation only) load with the product's
reader: placements.csv without scalability.csv, two to five curves, either metric direction."""
from __future__ import annotations

from pathlib import Path

from dynamix_hvd.replay.progress import build_progress
from dynamix_hvd.replay.worlds import SHIPPED_WORKLOADS
from dynamix_hvd.traces import load_pollux

HELDOUT = Path(__file__).resolve().parents[2] / "benchmarks" / "heldout_workloads"


def test_heldout_workloads_load_and_keep_their_licence():
    assert "Apache License" in (HELDOUT / "LICENSE").read_text()
    assert "petuum/adaptdl" in (HELDOUT / "README.md").read_text()
    expect = {"yolov3": ([8, 16, 32, 64, 128], False), "imagenet": ([200, 800], True)}
    for name, (batches, increasing) in expect.items():
        assert name not in SHIPPED_WORKLOADS            # never in the training world
        wl = load_pollux(HELDOUT / name)
        assert [int(b) for b in wl.batches] == batches
        assert not (HELDOUT / name / "scalability.csv").exists() and wl.throughput.step_time.size > 500
        pm = build_progress(wl)
        assert pm.increasing is increasing and pm.n_levels == 4
