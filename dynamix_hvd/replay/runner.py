"""`dynamix replay`: controllers and the hindsight oracle on a replayed workload, several seeds.

    dynamix replay --workload DIR --speed-trace FILE|cov:FILE|none --workers N \\
        --controllers static,proportional,goodput,ppo,random,hindsight --seeds K --out OUT.json \\
        [--speeds 1,1,2,4] [--target METRIC]

Seed s fixes the world (hardware factors unless --speeds, fluctuation offsets, measurement noise);
every controller and the oracle run in the same world for a given seed (paired comparison).
OUT.json: {"workload", "workers", "target_metric", "controllers": {NAME: {"time_to_target_s":
[per seed, null = not reached within the budget], "median" (null when not reached in half the
seeds or more), "reached_fraction"}}, plus "settings"}. ``--workload`` and ``--speed-trace``
also take the names of the shipped traces (``cifar10``, ``job_3_norm``, ``cov:coefficient_variation``).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.plan import Plan
from dynamix_hvd.replay.oracle import run_hindsight
from dynamix_hvd.replay.progress import build_progress
from dynamix_hvd.replay.sim import ReplaySim
from dynamix_hvd.replay.speeds import SpeedTrace, load_speed_trace
from dynamix_hvd.replay.throughput import build_throughput
from dynamix_hvd.traces import DATA_DIR, load_pollux

CONTROLLERS = ("static", "proportional", "goodput", "ppo", "random", "hindsight")


def resolve_workload(spec: str) -> Path:
    p = Path(spec)
    if not p.exists() and (DATA_DIR / "pollux" / spec).is_dir():
        return DATA_DIR / "pollux" / spec
    return p


def resolve_trace(spec: str) -> str:
    if spec.lower() == "none":
        return "none"
    prefix, path = ("cov:", spec[4:]) if spec.startswith("cov:") else ("", spec)
    p = Path(path)
    if not p.exists():
        shipped = DATA_DIR / "pai" / (path if path.endswith(".csv") else path + ".csv")
        if shipped.is_file():
            p = shipped
    return prefix + str(p)


@dataclass
class World:
    """Everything fixed across seeds: the workload's models for N ranks and the speed trace."""

    name: str
    sim: ReplaySim
    trace: SpeedTrace


def make_world(workload: str, speed_trace: str, n: int, speeds: Sequence[float] | None = None,
               target: float | None = None, interval_steps: int | None = None,
               base_batch: int | None = None) -> World:
    if not 1 <= n:
        raise ValueError(f"--workers {n}: must be >= 1")
    wl = load_pollux(resolve_workload(workload))
    pm = build_progress(wl, target)
    tp = build_throughput(wl.throughput, n)
    tr = load_speed_trace(resolve_trace(speed_trace))
    return World(wl.name, ReplaySim(pm, tp, tr, n, speeds, interval_steps, base_batch), tr)


def build_controller(name: str, sim: ReplaySim, seed: int):
    from dynamix_hvd.controllers import make_controller
    bounds = sim.bounds()
    if name.startswith("ppo:"):
        return make_controller("ppo", bounds, sim.base_batch, policy=name[4:])
    if name == "random":
        return make_controller("random", bounds, sim.base_batch, seed=seed)
    return make_controller(name, bounds, sim.base_batch)


def run_controller(sim: ReplaySim, name: str, seed: int, max_decisions: int = 200_000,
                   limits: bool = True) -> dict[str, Any]:
    """The live hook's loop (``decide.control_loop``) on replayed records: state -> decide ->
    per-decision move limits (``safety.limit_proposal`` with the default ``MoveLimits``, as
    ``decide.Decider``; off with ``limits=False``) -> next_plan -> one interval. No global-batch
    growth cap: the traces were measured with AdaScale (``lr_rule="adascale"``: unbounded growth)."""
    from dynamix_hvd.decide import control_loop
    from dynamix_hvd.safety import MoveLimits
    sim.reset(seed)
    ctl = build_controller(name, sim, seed)
    plan = Plan.uniform(sim.n, sim.base_batch)
    Bs = [plan.global_batch]
    for _, plan, _ in control_loop(sim, ctl, sim.bounds(), plan, limits=MoveLimits() if limits else None,
                                   max_intervals=max_decisions):
        Bs.append(plan.global_batch)
    return {"time_to_target_s": sim.time if sim.reached else None, "schedule": Bs, "decisions": sim.decisions}


def run_one(sim: ReplaySim, name: str, seed: int, limits: bool = True) -> dict[str, Any]:
    return run_hindsight(sim, seed) if name == "hindsight" else run_controller(sim, name, seed, limits=limits)


def summarise(times: Sequence[float | None]) -> dict[str, Any]:
    t = np.array([math.inf if x is None else float(x) for x in times])
    med = float(np.median(t)) if t.size else math.inf
    return {"time_to_target_s": [None if not math.isfinite(x) else round(float(x), 3) for x in t],
            "median": round(med, 3) if math.isfinite(med) else None,
            "reached_fraction": float(np.isfinite(t).mean()) if t.size else 0.0}


def replay(world: World, controllers: Sequence[str], seeds: Sequence[int]) -> dict[str, Any]:
    sim = world.sim
    res: dict[str, Any] = {}
    for c in controllers:
        res[c] = summarise([run_one(sim, c, s)["time_to_target_s"] for s in seeds])
    pm = sim.pm
    return {"workload": world.name, "workers": sim.n, "target_metric": pm.target, "controllers": res,
            "settings": {"speed_trace": world.trace.label, "seeds": list(seeds), "metric_increases": pm.increasing,
                         "start_metric": pm.start, "base_batch": sim.base_batch, "interval_steps": sim.interval_steps,
                         "bounds": {"min_global_batch": sim.bounds().min_global_batch,
                                    "max_global_batch": sim.bounds().max_global_batch, "max_local_batch": sim.tp.cap}}}


def parse_controllers(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if c not in CONTROLLERS and not (c.startswith("ppo:") and len(c) > 4)]
    if bad or not names:
        raise ValueError(f"--controllers {text!r}: unknown {bad}; choose from {list(CONTROLLERS)} or ppo:PATH")
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", required=True, help="a directory in the Pollux trace format (or a shipped name)")
    p.add_argument("--speed-trace", required=True, help="a PAI per-worker CSV, cov:FILE (the CoV table) or none")
    p.add_argument("--workers", type=int, required=True, help="number of ranks N (1..64 measured, more extrapolated)")
    p.add_argument("--controllers", default=",".join(CONTROLLERS), help="comma list; ppo:PATH for a policy file")
    p.add_argument("--seeds", type=int, default=20, help="seeds 0..K-1 (one world each, shared by all controllers)")
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--speeds", default=None, help="per-rank hardware factors, e.g. 1,1,2,4 (cycled over N ranks); "
                                                  "default: drawn per seed")
    p.add_argument("--target", type=float, default=None, help="target metric (default: derived from the curves)")
    p.add_argument("--interval-steps", type=int, default=None, help="steps per decision (default: auto)")
    p.add_argument("--base-batch", type=int, default=None, help="per-rank batch of the static plan (default: auto)")


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    try:
        names = parse_controllers(args.controllers)
        speeds = [float(x) for x in args.speeds.split(",")] if args.speeds else None
        if args.seeds < 1:
            raise ValueError(f"--seeds {args.seeds}: must be >= 1")
        world = make_world(args.workload, args.speed_trace, args.workers, speeds, args.target,
                           args.interval_steps, args.base_batch)
    except ValueError as exc:      # TraceError is a ValueError
        print(f"dynamix replay: {exc}")
        return 2
    out = replay(world, names, list(range(args.seeds)))
    out["settings"]["wall_s"] = round(time.perf_counter() - t0, 2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    hs = out["controllers"].get("hindsight", {}).get("median")
    print(f"{out['workload']}, N={out['workers']}, target {out['target_metric']:.4g}, {args.seeds} seeds, "
          f"speed trace {world.trace.label}")
    for c, r in out["controllers"].items():
        rel = f"  ({r['median'] / hs:.2f}x hindsight)" if hs and r["median"] else ""
        med = f"{r['median']:.1f} s" if r["median"] is not None else "not reached"
        print(f"  {c:>14}: median {med}, reached {r['reached_fraction']:.0%}{rel}")
    print(f"wrote {args.out} ({out['settings']['wall_s']:.1f} s)")
    return 0
