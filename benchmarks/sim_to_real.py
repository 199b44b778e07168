"""Sim-to-real (issue 20): the replay simulator's predicted time-to-target ratio (controller / static)
against the live bench's, on the same scenario and target.

    dynamix capture-trace --scenario S --batches 64,128,256,512 --out CAP      # the workload, measured live
    dynamix bench --scenario S --controllers static,proportional,goodput,ppo --repeats 3 --out LIVE
    dynamix replay --workload CAP --scenario S --controllers static,proportional,goodput,ppo \\
        --target T --seeds 8 --out REPLAY.json
    .venv/bin/python benchmarks/sim_to_real.py LIVE[,LIVE2...] REPLAY.json [--tolerance 0.15]

Live: the median over the repeats of each controller's first evaluation at or above the target
(``results.json``, the scenario's ``target_accuracy`` unless ``--target``); replay: the median over
the seeds (``OUT.json``). Both as a ratio to static's. Prints per controller the two ratios and
|replay / live - 1|; exit code 1 when a controller is off by more than the tolerance, 2 on bad
input (naming the file and key).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from dynamix_hvd.runlog import read_evals


def live_times(live: Path, target: float) -> dict[str, float | None]:
    """Median time to ``target`` per controller over the bench's repeats (None: most missed)."""
    res = json.loads((live / "results.json").read_text())
    out: dict[str, float | None] = {}
    for name, entry in res["controllers"].items():
        runs = len(entry.get("repeats", [entry]))
        times = []
        for k in range(runs):
            evals = read_evals(live / (name if k == 0 else f"{name}.r{k}") / "evals.jsonl")
            times.append(next((e.t for e in evals if e.acc >= target), None))
        med = statistics.median(float("inf") if t is None else t for t in times)
        out[name] = med if med != float("inf") else None
    return out


def replay_times(path: Path) -> tuple[dict[str, float | None], float]:
    res = json.loads(path.read_text())
    return {n: c.get("median") for n, c in res["controllers"].items()}, float(res["target_metric"])


def compare(live: dict[str, float | None], sim: dict[str, float | None]) -> list[tuple[str, float, float, float]]:
    """(controller, live ratio, replay ratio, |replay / live - 1|) for every controller in both, as a
    ratio to static's time. Pure."""
    if not live.get("static") or not sim.get("static"):
        raise ValueError("static must have reached the target in both the live bench and the replay")
    rows = []
    for name in live:
        if name == "static" or name not in sim or live[name] is None or sim[name] is None:
            continue
        lr, sr = live[name] / live["static"], sim[name] / sim["static"]
        rows.append((name, lr, sr, abs(sr / lr - 1.0)))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("live", help="a dynamix bench output directory, or several comma-separated (benches of "
                                "the same scenario run with different controllers; the first that has a "
                                "controller gives it)")
    p.add_argument("replay", type=Path, help="a dynamix replay OUT.json")
    p.add_argument("--target", type=float, default=None, help="live target (default: the replay's target metric)")
    p.add_argument("--tolerance", type=float, default=0.15)
    a = p.parse_args()
    try:
        sim, sim_target = replay_times(a.replay)
        target = a.target if a.target is not None else sim_target
        live: dict[str, float | None] = {}
        for d in a.live.split(","):
            for name, t in live_times(Path(d), target).items():
                live.setdefault(name, t)
        rows = compare(live, sim)
    except (OSError, KeyError, ValueError) as exc:
        print(f"sim_to_real: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2
    print(f"target {target:.4f} (replay's {sim_target:.4f}); static: live {live['static']:.1f} s, "
          f"replay {sim['static']:.1f} s (simulated)")
    print(f"{'controller':<14}{'live / static':>14}{'replay / static':>17}{'off by':>9}")
    worst = 0.0
    for name, lr, sr, off in rows:
        worst = max(worst, off)
        print(f"{name:<14}{lr:>14.3f}{sr:>17.3f}{off:>8.1%}{'' if off <= a.tolerance else '  > tolerance'}")
    missing = [n for n in live if n != "static" and n not in {r[0] for r in rows}]
    if missing:
        print(f"not compared (not in both, or not reached): {missing}")
    print(f"worst {worst:.1%} (tolerance {a.tolerance:.0%})")
    return 0 if worst <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
