"""Adaptation after a node slows down, from a `dynamix bench` output directory.

    .venv/bin/python benchmarks/bench_adaptation.py runs/slow [--rank 2] [--event-s 4] [--max-batch 12]

For every controller run (``OUT/<controller>[.rN]/rank<R>.jsonl``) prints when rank R first ran a
batch of at most ``--max-batch`` samples after the event, how many steps ran before that, and the
time those steps cost beyond the run's median step time after adaptation (scaled by the global
batch, so a controller that also changed B is compared per sample). Static runs are skipped.

Also, from ``evals.jsonl`` and ``summary.json``: the steps to the target accuracy and the mean step
time between the event and the target (training clock). The second separates how fast a controller
steps after the event from how many steps the run needed, which varies by tens of steps between
runs of the same controller (the evaluation accuracy crosses the target at a noisy point).
Works for any event (``--event-s``); the adaptation columns need a rank whose batch should fall.
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from dynamix_hvd.runlog import StepRecord, read_evals, read_steps, read_summary


def adaptation(steps: list[StepRecord], event_s: float, max_batch: int) -> tuple[float, int, float] | None:
    after = [s for s in steps if s.t >= event_s]
    first = next((s for s in after if s.b <= max_batch), None)
    if first is None:
        return None
    lag = [s for s in after if s.t < first.t]
    settled = [s for s in after if s.t >= first.t + 1.0] or [s for s in after if s.t >= first.t]
    per_sample = statistics.median(s.step_s / s.B for s in settled)
    lost = sum(s.step_s - per_sample * s.B for s in lag)
    return first.t - event_s, len(lag), lost


def pace(run: Path, event_s: float) -> tuple[int, float] | None:
    """(steps to target, mean step ms from the last evaluation before the event to the target)."""
    try:
        target = read_summary(run).time_to_target_s
        evals = read_evals(run / "evals.jsonl")
    except OSError:
        return None
    if target is None:
        return None
    hit = next((e for e in evals if e.t >= target - 1e-6), None)
    before = [e for e in evals if e.t <= event_s]
    if hit is None or not before or hit.step <= before[-1].step:
        return None
    return hit.step, 1e3 * (hit.t - before[-1].t) / (hit.step - before[-1].step)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--rank", type=int, default=2)
    p.add_argument("--event-s", type=float, default=4.0)
    p.add_argument("--max-batch", type=int, default=12)
    args = p.parse_args()
    for run in sorted(d for d in args.out.iterdir() if (d / f"rank{args.rank}.jsonl").is_file()):
        if run.name.split(".")[0] == "static":
            continue
        steps = read_steps(run / f"rank{args.rank}.jsonl")
        res = adaptation(steps, args.event_s, args.max_batch)
        pc = pace(run, args.event_s)
        tail = f"; target at step {pc[0]}, {pc[1]:.1f} ms/step event->target" if pc else ""
        if res is None:
            print(f"{run.name:18s} rank {args.rank} never ran <= {args.max_batch} samples after the event{tail}")
            continue
        dt, n, lost = res
        print(f"{run.name:18s} adapted {dt:.2f} s after the event; {n} steps before; time lost {lost:.2f} s{tail}")


if __name__ == "__main__":
    main()
