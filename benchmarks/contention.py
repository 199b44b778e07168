"""How much of an emulated step is the host's, not the scenario's: for one `dynamix bench` run,
per step after the first 20, (step time - the slowest rank's modelled compute - the modelled
allreduce latency) / step time, medians over steps.

    .venv/bin/python benchmarks/contention.py OUT/static [OUT/static.r1 ...]

The modelled compute is ``fixed_ms + per_sample_ms x b`` of each rank's scenario entry at the
local batch it ran (``rank*.jsonl``); the modelled latency is a ring's 2 (N - 1) x the largest
``latency_ms``. What remains is what the ranks spend outside the emulated device: the
allreduce's own work, Horovod's negotiation, MPI and Python, on however many cores the host has.
On a real cluster part of it exists too (the allreduce), so this is an upper bound on the
host's CPU contention. Speed traces and events are not modelled here (use it on scenarios
without them).
"""
from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import numpy as np


def contention(run: Path, skip: int = 20) -> dict[str, float]:
    sc = tomllib.loads((run.parent / "scenario.toml").read_text())
    workers = sc["workers"]
    logs = [[json.loads(line) for line in (run / f"rank{r}.jsonl").open()] for r in range(len(workers))]
    n = min(len(lg) for lg in logs)
    if n <= skip:
        raise SystemExit(f"{run}: {n} steps, fewer than the {skip} skipped")
    step = np.array([np.median([lg[k]["step_s"] for lg in logs]) for k in range(skip, n)])
    model = np.array([max((w["fixed_ms"] + w["per_sample_ms"] * lg[k]["b"]) / 1e3 for w, lg in zip(workers, logs))
                      for k in range(skip, n)])
    lat = 2 * (len(workers) - 1) * max(w.get("latency_ms", 0.0) for w in workers) / 1e3
    extra = step - model - lat
    return {"steps": float(n), "step_ms": 1e3 * float(np.median(step)), "modelled_ms": 1e3 * float(np.median(model)),
            "extra_ms": 1e3 * float(np.median(extra)), "share": float(np.median(extra / step))}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for a in argv:
        c = contention(Path(a))
        print(f"{a}: {c['steps']:.0f} steps; median step {c['step_ms']:.1f} ms, slowest rank's modelled compute "
              f"{c['modelled_ms']:.1f} ms; the rest {c['extra_ms']:.1f} ms = {c['share']:.1%} of the step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
