"""The run log: records written in order by the writer thread, dataclasses converted, flush/close."""
from __future__ import annotations

import json
import threading

import pytest

from dynamix_hvd.observe import RunLogger
from dynamix_hvd.records import GlobalStats, WorkerStats


def _decision(step: int) -> dict:
    """A record as the hook hands it over (Decider.decide's fields + t, step)."""
    return {"t": 0.1 * step, "step": step, "controller": "goodput", "decide_ms": 1.0, "plan": [16, 16],
            "proposed": [8.0, 24.0], "next_plan": {"version": step, "batch_sizes": [8, 24], "start_step": step},
            "glob": GlobalStats(step=step, noise_scale=100.0), "goodput": 1.0, "reason": "test",
            "workers": [WorkerStats(rank=r, batch_size=8 + 16 * r, max_batch=64, step_s=0.1, comm_s=0.02)
                        for r in range(2)]}


def test_records_are_written_in_order_off_the_calling_thread(tmp_path):
    log = RunLogger(str(tmp_path), tensorboard=False)
    log.event({"step": 0, "oom": {"ranks": [1]}})
    for step in range(1, 51):
        log.decision(_decision(step), lr=0.1)
    assert log._thread is not threading.current_thread() and log._thread.is_alive()
    log.flush()
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(51))
    assert lines[5]["workers"][1]["batch_size"] == 24 and lines[5]["glob"]["noise_scale"] == 100.0
    assert lines[5]["lr"] == 0.1 and lines[0] == {"step": 0, "oom": {"ranks": [1]}}
    log.close()
    assert not log._thread.is_alive()


def test_tensorboard_scalars_and_close_flushes(tmp_path):
    pytest.importorskip("torch.utils.tensorboard")
    log = RunLogger(str(tmp_path), tensorboard=True)
    log.decision(_decision(1), lr=0.1)
    log.close()                                   # drains the queue before closing the files
    assert len((tmp_path / "events.jsonl").read_text().splitlines()) == 1
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_a_failing_write_warns_once_and_logging_goes_on(tmp_path):
    pytest.importorskip("torch.utils.tensorboard")
    log = RunLogger(str(tmp_path), tensorboard=True)
    bad = _decision(1)
    bad["workers"] = ["not a worker"]             # the TensorBoard writer indexes it like a dict: TypeError
    with pytest.warns(RuntimeWarning, match="writing the run log failed"):
        log.decision(bad, lr=0.1)
        log.flush()
    log.decision(_decision(2), lr=0.1)
    log.close()
    assert json.loads((tmp_path / "events.jsonl").read_text().splitlines()[-1])["step"] == 2


def test_no_run_dir_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = RunLogger(None)
    log.decision(_decision(1), lr=0.1)
    log.event({"step": 1, "oom": {"ranks": [0]}})
    log.flush()
    log.close()
    assert log.run_dir is None and list(tmp_path.iterdir()) == []   # nothing written anywhere here
