"""``dynamix report``: PNGs of hook-only runs, bench runs and bench directories, read through runlog."""
from __future__ import annotations

import argparse
import json

import pytest

from dynamix_hvd.report import plot_bench, plot_run, run
from dynamix_hvd.runlog import EventsWriter

pytest.importorskip("matplotlib")

from test_runlog import hook_record  # noqa: E402


def _hook_run(d):
    w = EventsWriter(d)
    w.event({"step": 0, "fallback": {"from": "ppo", "to": "proportional", "reason": "x"}})   # not a decision
    for s in (10, 20, 30):
        w.decision(hook_record(s), lr=0.1)
    w.close()


def _bench_run(d, world=2):
    d.mkdir(parents=True)
    for r in range(world):
        (d / f"rank{r}.jsonl").write_text("".join(json.dumps(
            {"t": 0.1 * i, "step": i, "b": 8, "B": 8 * world, "full": True, "compute_s": 0.01, "step_s": 0.02}) + "\n"
            for i in range(20)))
    (d / "evals.jsonl").write_text("".join(json.dumps(
        {"t": 1.0 * i, "step": 10 * i, "acc": 0.1 * i, "samples": 160 * i, "wall": 1.0 * i, "plan": [8] * world}) + "\n"
        for i in range(1, 6)))


def test_a_hook_run_with_events_is_plotted(tmp_path):
    _hook_run(tmp_path)
    png = plot_run(tmp_path)
    assert png == tmp_path / "report.png" and png.stat().st_size > 1000


def test_a_bench_directory_is_plotted(tmp_path):
    for n in ("static", "goodput"):
        _bench_run(tmp_path / n)
    (tmp_path / "results.json").write_text(json.dumps(
        {"scenario": "s", "target_accuracy": 0.3, "controllers": {
            "static": {"time_to_target_s": 3.0}, "goodput": {"time_to_target_s": None}}}))
    assert plot_bench(tmp_path).stat().st_size > 1000


def test_a_bad_log_is_reported_with_file_and_line(tmp_path, capsys):
    _hook_run(tmp_path)
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write(json.dumps({"step": 40, "next_plan": {}, "mystery": 1}) + "\n")
    assert run(argparse.Namespace(run_dir=str(tmp_path), out=None)) == 2
    assert "events.jsonl:5:" in capsys.readouterr().err
    assert run(argparse.Namespace(run_dir=str(tmp_path / "nope"), out=None)) == 2
