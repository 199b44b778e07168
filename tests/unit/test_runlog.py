"""The run-log module: typed records, the writer, the readers; schema errors name file and line."""
from __future__ import annotations

import json
import math

import pytest

from dynamix_hvd.plan import Plan
from dynamix_hvd.records import GlobalStats, WorkerStats
from dynamix_hvd.runlog import (DecisionRecord, EventRecord, EventsWriter, LogFormatError, read_decisions,
                                read_evals, read_events, read_steps, read_summary, rank_logs)


def hook_record(step: int, sizes=(8, 24), **extra) -> dict:
    """A decision record as the hook hands it to the log (decide.Decider.decide + t, step)."""
    return {"t": 0.5 * step, "step": step, "controller": "goodput", "decide_ms": 1.5, "plan": [16, 16],
            "proposed": [float(b) for b in sizes], "next_plan": Plan(step, tuple(sizes), step).to_dict(),
            "glob": GlobalStats(step=step, noise_scale=100.0, noise_scale_stable=True),
            "workers": [WorkerStats(rank=r, batch_size=16, max_batch=64, step_s=0.1, compute_s=0.05 * (r + 1))
                        for r in range(2)],
            "goodput": 123.0, "reason": "because", **extra}


def test_writer_then_readers_give_the_typed_records_back(tmp_path):
    w = EventsWriter(tmp_path)
    w.event({"step": 0, "fallback": {"from": "ppo", "to": "proportional", "reason": "no file"}})
    w.decision(hook_record(10), lr=0.05)
    w.decision(hook_record(20, sizes=(16, 16), early={"ranks": [1]}, cluster_slowdown=1.2), lr=0.1)
    w.close()
    evs = read_events(tmp_path)
    assert isinstance(evs[0], EventRecord) and evs[0].kind == "fallback" and evs[0].detail["to"] == "proportional"
    d1, d2 = read_decisions(tmp_path / "events.jsonl")
    assert (d1.step, d1.lr, d1.controller, d1.reason) == (10, 0.05, "goodput", "because")
    assert d1.next_plan == Plan(10, (8, 24), 10) and d1.plan_changed and not d2.plan_changed
    w1 = d1.workers[1]
    assert isinstance(w1, WorkerStats) and (w1.rank, w1.batch_size, w1.step_s, w1.compute_s) == (1, 16, 0.1, 0.1)
    assert math.isnan(w1.comm_s)                     # NaN ("no data") survives the round trip
    assert d1.glob.noise_scale == 100.0 and d1.glob.noise_scale_stable is True and math.isnan(d1.glob.loss)
    assert d2.early == {"ranks": [1]} and d2.cluster_slowdown == 1.2 and d1.early is None
    assert "early" not in json.loads((tmp_path / "events.jsonl").read_text().splitlines()[1])   # unset: not written


def one_decision_line(run_dir) -> dict:
    """Write one decision through the writer; its line as parsed JSON."""
    w = EventsWriter(run_dir)
    w.decision(hook_record(1), lr=0.1)
    w.close()
    return json.loads((run_dir / "events.jsonl").read_text())


def test_an_unknown_field_names_the_file_and_line(tmp_path):
    line = one_decision_line(tmp_path)
    bad = dict(line, surprise=1)
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(LogFormatError, match=r"events\.jsonl:3: .*unknown field\(s\) \['surprise'\]"):
        read_decisions(tmp_path)
    # the writer refuses it too: a field the readers do not know never reaches the file
    with pytest.raises(ValueError, match="surprise"):
        EventsWriter(tmp_path / "w").decision(hook_record(1, surprise=1))


@pytest.mark.parametrize("drop,where", [("goodput", "missing field(s) ['goodput']"),
                                         ("workers.compute_s", None), ("workers.rank", "workers[0]")])
def test_a_missing_field_names_the_file_and_line(tmp_path, drop, where):
    d = one_decision_line(tmp_path)
    if drop.startswith("workers."):
        del d["workers"][0][drop.split(".")[1]]
    else:
        del d[drop]
    (tmp_path / "events.jsonl").write_text(json.dumps(d) + "\n")
    if where is None:          # a field with a default (a metric nobody measured) may be absent
        assert math.isnan(read_decisions(tmp_path)[0].workers[0].compute_s)
        return
    with pytest.raises(LogFormatError, match=r"events\.jsonl:1: .*" + ".*".join(map(__import__("re").escape, where.split()))):
        read_decisions(tmp_path)


def test_events_need_a_known_kind_and_cut_lines_are_skipped(tmp_path):
    p = tmp_path / "events.jsonl"
    p.write_text(json.dumps({"step": 3, "oom": {"ranks": [1]}}) + "\n" + '{"step": 4, "oom": {"ra')
    assert read_events(p) == [EventRecord(3, "oom", {"ranks": [1]})]
    p.write_text(json.dumps({"step": 3, "oops": {}}) + "\n")
    with pytest.raises(LogFormatError, match=r"events\.jsonl:1: .*'oops'"):
        read_events(p)
    assert read_events(tmp_path / "missing.jsonl") == []


def test_bench_worker_logs(tmp_path):
    rows = [{"t": 0.1 * i, "step": i, "b": 8, "B": 16, "full": True, "compute_s": 0.01, "step_s": 0.02}
            for i in range(3)]
    for r in (0, 1, 10):
        (tmp_path / f"rank{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    logs = rank_logs(tmp_path)
    assert len(logs) == 3 and logs[2][1].step == 1 and logs[0][2].compute_s == 0.01
    (tmp_path / "evals.jsonl").write_text(json.dumps({"t": 1.0, "step": 5, "acc": 0.5, "samples": 80,
                                                      "wall": 2.0, "plan": [8, 8]}) + "\n")
    assert read_evals(tmp_path)[0].acc == 0.5
    (tmp_path / "rank0.jsonl").write_text(json.dumps(dict(rows[0], bogus=1)) + "\n")
    with pytest.raises(LogFormatError, match=r"rank0\.jsonl:1: .*bogus"):
        read_steps(tmp_path / "rank0.jsonl")
    (tmp_path / "summary.json").write_text(json.dumps({"scenario": "x"}))
    with pytest.raises(LogFormatError, match=r"summary\.json: .*missing field\(s\) \['controller'"):
        read_summary(tmp_path)


def test_a_learned_policys_outcome_is_logged_and_counted_per_run(tmp_path):
    """The decision log's ``policy`` field (what became of a learned policy's choice) round-trips and the
    bench counts it per run, sums it over repeats and prints it; a controller without one has none."""
    from dynamix_hvd.emulate.bench import combine, format_policy, policy_outcomes
    w = EventsWriter(tmp_path)
    for step, outcome in enumerate(["warmup", "outside_support", "departed", "outside_support"], start=1):
        w.decision(hook_record(step, policy=outcome))
    w.close()
    assert [d.policy for d in read_decisions(tmp_path)] == ["warmup", "outside_support", "departed", "outside_support"]
    assert policy_outcomes(tmp_path) == {"departed": 1, "outside_support": 2, "warmup": 1}
    plain = tmp_path / "plain"
    w = EventsWriter(plain)
    w.decision(hook_record(1))
    w.close()
    assert policy_outcomes(plain) == {} and read_decisions(plain)[0].policy is None
    run = {"time_to_target_s": 1.0, "final_accuracy": 0.9, "samples_per_s": 1.0, "balance_efficiency": 1.0,
           "train_time_s": 1.0, "wall_s": 1.0, "decisions": 1}
    both = combine([{**run, "policy": {"departed": 1, "noop": 3}}, {**run, "policy": {"noop": 4}}])
    assert both["policy"] == {"departed": 1, "noop": 7}
    assert "policy" not in combine([run, run])
    assert format_policy("ppo", both["policy"], 2) == \
        "ppo: the policy's choice at its 8 decisions (2 runs): noop 7 (88%), departed 1 (12%)"
