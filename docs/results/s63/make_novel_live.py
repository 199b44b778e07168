"""Session 63: a live scenario and a speed trace in the shipped formats that no code, test or policy here
has seen: a synthetic PAI-format job (6 workers, 400 sampled iterations: a slow drift, one worker with
intermittent 1.4-1.8x bursts, one degrading over the run) and a 5-rank scenario that uses it beside a
transient node slowdown and a link that drops and recovers. Writes novel_job9_norm.csv and
novel_scenario_s63.toml next to this file (seeded: byte for byte the same on every run)."""
from pathlib import Path

import numpy as np

here = Path(__file__).parent
rng = np.random.default_rng(63)
rows, W = 400, 6
t = np.arange(rows)
base = 640 + 40 * np.sin(t / 37.0)                       # the job-wide drift
lines = [",worker,gpu,time,batch_time_norm"]
k = 0
for i in range(rows):
    for w in range(W):
        x = base[i] * (1 + 0.03 * w) * (1 + 0.04 * rng.standard_normal())
        if w == 2 and (i // 25) % 4 == 3:                 # bursts: 25 of every 100 rows
            x *= 1.4 + 0.4 * rng.random()
        if w == 4:
            x *= 1 + 0.5 * i / rows                       # degrades to 1.5x
        lines.append(f"{k},{w},25,{1 + 10 * i},{int(min(1000, max(1, round(x))))}")
        k += 1
(here / "novel_job9_norm.csv").write_text("\n".join(lines) + "\n")

workers = [
    dict(fixed_ms=3, per_sample_ms=1.0, bandwidth_mbit=1000, trace=0),
    dict(fixed_ms=4, per_sample_ms=1.0, bandwidth_mbit=1000, trace=None),
    dict(fixed_ms=3, per_sample_ms=1.5, bandwidth_mbit=1000, trace=2),
    dict(fixed_ms=5, per_sample_ms=2.0, bandwidth_mbit=500, trace=4),
    dict(fixed_ms=3, per_sample_ms=1.0, bandwidth_mbit=200, trace=None),
]
toml = ['# Session 63: a scenario no code, test or policy here was made on (docs/results/s63/make_novel_live.py).',
        'name = "novel_s63"',
        'description = "5 ranks: a synthetic PAI-format trace on three (bursts, a degrading worker), '
        'rank 1 3x slower from 5 s to 15 s, rank 4\'s link 200 -> 30 Mbit/s at 10 s and back at 25 s"',
        'workload = "mnist1d_cnn"', 'target_accuracy = 0.8', 'max_time_s = 45', 'base_batch = 32', 'seed = 5',
        'interval_steps = 10', 'eval_every_steps = 10', 'lr = 0.01', '']
for w in workers:
    toml += ['[[workers]]', f'fixed_ms = {w["fixed_ms"]}', f'per_sample_ms = {w["per_sample_ms"]}', 'max_batch = 256',
             f'bandwidth_mbit = {w["bandwidth_mbit"]}', 'latency_ms = 0.05']
    if w["trace"] is not None:
        toml += ['speed_trace = "novel_job9_norm.csv"', f'speed_trace_worker = {w["trace"]}',
                 'speed_trace_steps_per_row = 5', 'speed_trace_offset = 0']
    toml.append('')
for at, rank, key, val in [(5, 1, "per_sample_ms", 3.0), (15, 1, "per_sample_ms", 1.0),
                           (10, 4, "bandwidth_mbit", 30), (25, 4, "bandwidth_mbit", 200)]:
    toml += ['[[events]]', f'at_s = {at}', f'rank = {rank}', f'{key} = {val}', '']
(here / "novel_scenario_s63.toml").write_text("\n".join(toml))
