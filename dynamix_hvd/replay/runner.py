"""`dynamix replay`: controllers and the hindsight oracle on a replayed workload, several seeds.

    dynamix replay --workload DIR --speed-trace FILE|cov:FILE|none --workers N \\
        --controllers static,proportional,goodput,ppo,random,causal,hindsight --seeds K --out OUT.json \\
        [--speeds 1,1,2,4] [--target METRIC]
    dynamix replay --workload DIR --scenario FILE|NAME [--time-scale auto|X] ...   (a live scenario's
        cluster, links, events and speed traces; ``replay/scenario.py`` says how they map)

``causal`` is the oracle restricted to what a controller could know at each decision (the true
workload curves and the speeds of the interval just ended; ``oracle.run_causal``): the part of
goodput's gap to ``hindsight`` that a controller could close; ``causal_safe`` the same behind the
safety layer's limits on the global batch (what a controller with a perfect workload model could
close under the product's safety rules); ``causal4`` the same with global batches
only up to 4 x B0 (where the goodput controller's candidates ended until session 24);
``causal_blind`` is ``causal`` whose first interval is split evenly, as every controller's is
(``causal`` splits it by the true hardware speeds): what perfect measurement of the past reaches.
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
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.plan import Plan
from dynamix_hvd.replay.oracle import run_causal, run_causal_safe, run_hindsight, run_hindsight_safe
from dynamix_hvd.replay.paired import INTERVAL, ratio_interval
from dynamix_hvd.replay.progress import build_progress
from dynamix_hvd.replay.sim import GNS_MODELS, ReplaySim
from dynamix_hvd.replay.speeds import SpeedTrace, load_speed_trace
from dynamix_hvd.replay.throughput import SYNC_MODELS, build_throughput
from dynamix_hvd.traces import DATA_DIR, load_pollux

CONTROLLERS = ("static", "proportional", "goodput", "adaptdl", "ppo", "random", "causal", "causal_blind", "causal4", "causal_safe",
               "hindsight_safe", "hindsight_safe_beam", "hindsight")


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
               base_batch: int | None = None, gns_model: str = "run", sync_model: str = "rank") -> World:
    if not 1 <= n:
        raise ValueError(f"--workers {n}: must be >= 1")
    wl = load_pollux(resolve_workload(workload))
    pm = build_progress(wl, target)
    tp = build_throughput(wl.throughput, n)
    tr = load_speed_trace(resolve_trace(speed_trace))
    return World(wl.name, ReplaySim(pm, tp, tr, n, speeds, interval_steps, base_batch, gns_model=gns_model,
                                    sync_model=sync_model), tr)


def make_scenario_world(workload: str, scenario: str, target: float | None = None,
                        interval_steps: int | None = None, base_batch: int | None = None,
                        time_scale: str | float = "auto", log: Any = print, sync_model: str = "rank") -> World:
    """The replay world of a live scenario on a measured workload (``replay/scenario.py``)."""
    from dynamix_hvd.emulate.scenario import load_scenario
    from dynamix_hvd.replay.scenario import ScenarioDynamics, describe, gradient_bytes, is_captured

    sc = load_scenario(scenario)
    wdir = resolve_workload(workload)
    wl = load_pollux(wdir)
    pm = build_progress(wl, target)
    n = sc.world_size
    tp = build_throughput(wl.throughput, n)
    if sync_model != tp.sync_model:
        tp = replace(tp, sync_model=sync_model)
    captured = is_captured(wdir, sc)
    dyn = ScenarioDynamics(sc, gradient_bytes(sc), captured)
    if base_batch is None:
        base_batch = sc.base_batch
        if base_batch > tp.cap:
            log(f"note: the scenario's base_batch {sc.base_batch} is above the workload's memory cap {tp.cap}; "
                f"using the replay's default")
            base_batch = None
    caps = [max(1, min(tp.cap, w.max_batch)) for w in sc.workers]
    sched = dyn.traces
    stride = math.gcd(*[s.steps_per_row for s in sched.series if s is not None]) if sched.active else 1
    tr = SpeedTrace("schedule", f"scenario:{sc.name}", stride=stride, schedule=sched) if sched.active \
        else SpeedTrace("none", "none")
    # decision interval: the scenario's for a workload captured on it (the live cadence); otherwise the
    # replay's automatic one (the hook's default cadence at that workload's step time, sim.hook_interval)
    sim = ReplaySim(pm, tp, tr, n, None, interval_steps or (sc.interval_steps if captured else None), base_batch,
                    dynamics=dyn, caps=caps)
    # the global-batch range of the live hook on this scenario: the bench's workers run with the
    # default LR rule (none), which holds B at B0 (config.max_global_batch_for)
    from dynamix_hvd.config import DynamixConfig
    sim.max_global_batch = DynamixConfig(base_batch=sim.base_batch).max_global_batch_for(n)
    if str(time_scale) == "auto":
        scale = 1.0
        if not captured:
            sim.reset(0)
            b0 = np.full(n, sim.base_batch)
            f0 = sched.factors(np.array([0]))[0]
            replay_step = float(tp.rank_times(f0 * sim.hw, b0, sim.link).max())
            scale = replay_step / dyn.live_static_step_s()
    else:
        scale = float(time_scale)
    dyn.set_time_scale(scale)
    sim.scenario_info = describe(dyn)
    return World(wl.name, sim, tr)


def split_policy_spec(spec: str) -> tuple[str, str]:
    """``PATH?trust=X`` -> (PATH, ``trust=X``): a PPO policy file and the controller options after it."""
    path, _, opts = spec.partition("?")
    return path, opts


def policy_files(path: str) -> list[str]:
    """``A.zip+B.zip+C.zip`` -> the files of an ensemble (the first is the policy, the rest its
    members: ``PPOController(members=...)``); one file -> [it]; "" -> [] (the shipped default)."""
    files = path.split("+") if path else []
    if any(not f for f in files):
        raise ValueError(f"policy {path!r}: an empty file name between '+'")
    return files


def build_controller(name: str, sim: ReplaySim, seed: int):
    from dynamix_hvd.controllers import make_controller
    from dynamix_hvd.controllers.policy.options import ppo_options
    bounds = sim.bounds()
    if name.startswith("ppo:"):
        path, opts = split_policy_spec(name[4:])     # ppo:PATH?trust=0.03, ppo:A+B+C?ensemble=median, ?support=off
        files = policy_files(path)
        kwargs: dict[str, Any] = {"members": files[1:]} if len(files) > 1 else {}
        kwargs.update(ppo_options(opts, name))
        return make_controller("ppo", bounds, sim.base_batch, policy=files[0] if files else None, **kwargs)
    if name == "random":
        return make_controller("random", bounds, sim.base_batch, seed=seed)
    return make_controller(name, bounds, sim.base_batch)


def run_controller(sim: ReplaySim, name: str, seed: int, max_decisions: int = 200_000,
                   limits: bool = True, controller: Any = None, guard: bool = False) -> dict[str, Any]:
    """The live hook's loop (``decide.control_loop``) on replayed records: state -> decide ->
    per-decision move limits (``safety.limit_proposal`` with the default ``MoveLimits``, as
    ``decide.Decider``; off with ``limits=False``) -> next_plan -> one interval. No global-batch
    growth cap: the traces were measured with AdaScale (``lr_rule="adascale"``: unbounded growth).
    ``controller``: an instance to run instead of building ``name``'s.

    With ``guard=True`` (what ``dynamix replay`` and ``eval-replay`` run by default, through ``run_one``)
    a guarded controller (goodput, ppo) runs inside the live hook's ``Decider`` with the default
    configuration, as it runs live: after a decision of it, goodput (samples/s x the statistical
    efficiency of the measured noise scale) more than 10% below its reference for 2 intervals hands
    the job on (ppo's to goodput, its ``guard_fallback``; goodput's to proportional, after
    ``guard_retries`` reverts that leave it in charge) at the global batch the reference was measured
    at (``safety.GoodputGuard``). ``guard=False``, the default here
    (or ``limits=False``), runs the controller alone, as every replay before session 65 did and as the
    policy's training, its support's rollouts and the curriculum run it. The result's ``fallback`` is
    the decision at which the guard handed the job on (None: never), ``reverts`` how often it reverted
    the plan and left the controller in charge."""
    from dynamix_hvd.decide import Decider, control_loop
    from dynamix_hvd.safety import MoveLimits
    sim.reset(seed)
    ctl = controller if controller is not None else build_controller(name, sim, seed)
    plan = Plan.uniform(sim.n, sim.base_batch)
    Bs = [plan.global_batch]
    decider = None
    if guard and limits and ctl.guarded:
        from dynamix_hvd.config import DynamixConfig
        decider = Decider(DynamixConfig(base_batch=sim.base_batch), sim.bounds(), sim.n * sim.base_batch,
                          controller=ctl, say=lambda s: None)
    fallback = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # the fallback's warning: counted below instead
        for k, (_, plan, _) in enumerate(control_loop(sim, ctl, sim.bounds(), plan, limits=MoveLimits() if limits
                                                      else None, max_intervals=max_decisions, decider=decider)):
            Bs.append(plan.global_batch)
            if fallback is None and decider is not None and decider.controller is not ctl:
                fallback = k
    return {"time_to_target_s": sim.time if sim.reached else None, "schedule": Bs, "decisions": sim.decisions,
            "fallback": fallback, "reverts": decider.reverts if decider is not None else 0}


def is_guarded(name: str) -> bool:
    """Whether controller ``name`` (a replay name: ``goodput``, ``ppo``, ``ppo:PATH?OPTS``, an oracle) runs
    behind the live hook's goodput guard (its class's ``guarded``; oracles do not)."""
    from dynamix_hvd.controllers import REGISTRY, controller_class
    base = "ppo" if name.startswith("ppo:") else name
    return base in REGISTRY and bool(controller_class(base).guarded)


def run_one(sim: ReplaySim, name: str, seed: int, limits: bool = True, guard: bool = True) -> dict[str, Any]:
    if name == "hindsight":
        return run_hindsight(sim, seed)
    if name == "causal_safe":
        return run_causal_safe(sim, seed)
    if name in ("hindsight_safe", "hindsight_safe_beam"):
        return run_hindsight_safe(sim, seed, beam=64 if name.endswith("beam") else 0)
    if name in ("causal", "causal4", "causal_blind"):
        from dynamix_hvd.controllers.goodput import SCALES
        return run_causal(sim, seed, max_scale=SCALES[-1] if name == "causal4" else None, blind=name == "causal_blind")
    return run_controller(sim, name, seed, limits=limits, guard=guard)


def summarise(times: Sequence[float | None]) -> dict[str, Any]:
    t = np.array([math.inf if x is None else float(x) for x in times])
    med = float(np.median(t)) if t.size else math.inf
    return {"time_to_target_s": [None if not math.isfinite(x) else round(float(x), 3) for x in t],
            "median": round(med, 3) if math.isfinite(med) else None,
            "reached_fraction": float(np.isfinite(t).mean()) if t.size else 0.0}


def replay(world: World, controllers: Sequence[str], seeds: Sequence[int], guard: bool = True) -> dict[str, Any]:
    sim = world.sim
    res: dict[str, Any] = {}
    for c in controllers:
        res[c] = summarise([run_one(sim, c, s, guard=guard)["time_to_target_s"] for s in seeds])
    if "goodput" in res:       # each controller's median over goodput's, with its paired interval (replay.paired)
        g = res["goodput"]["time_to_target_s"]
        for c, r in res.items():
            if c != "goodput" and r["median"] is not None and res["goodput"]["median"]:
                lo, hi = ratio_interval(r["time_to_target_s"], g)
                r["vs_goodput"] = {"ratio": round(r["median"] / res["goodput"]["median"], 4),
                                   "interval": [round(lo, 4), round(hi, 4)], "level": INTERVAL}
    pm = sim.pm
    extra = {"scenario": sim.scenario_info} if sim.scenario_info else {}
    return {"workload": world.name, "workers": sim.n, "target_metric": pm.target, "controllers": res, **extra,
            "settings": {"speed_trace": world.trace.label, "gns_model": sim.gns_model, "sync_model": sim.tp.sync_model, "seeds": list(seeds), "guard": guard,
                         "metric_increases": pm.increasing,
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
    p.add_argument("--speed-trace", default=None, help="a PAI per-worker CSV, cov:FILE (the CoV table) or none")
    p.add_argument("--workers", type=int, default=None, help="number of ranks N (1..64 measured, more extrapolated)")
    p.add_argument("--scenario", default=None,
                   help="a live bench scenario (file or shipped name): its ranks, speeds, links, events and speed "
                        "traces replace --workers, --speeds and --speed-trace")
    p.add_argument("--time-scale", default="auto",
                   help="with --scenario: simulated seconds per scenario second for its events (auto: 1 for a "
                        "workload captured on the scenario, else the static step-time ratio)")
    p.add_argument("--controllers", default=",".join(CONTROLLERS), help="comma list; ppo:PATH for a policy file")
    p.add_argument("--seeds", type=int, default=20, help="seeds 0..K-1 (one world each, shared by all controllers)")
    p.add_argument("--guard", choices=("on", "off"), default="on",
                   help="on (default): goodput and ppo run behind the live hook's goodput guard and its fallback "
                        "(ppo to goodput; goodput reverted once, then to proportional), as live; off: the "
                        "controllers alone")
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--speeds", default=None, help="per-rank hardware factors, e.g. 1,1,2,4 (cycled over N ranks); "
                                                  "default: drawn per seed")
    p.add_argument("--target", type=float, default=None, help="target metric (default: derived from the curves)")
    p.add_argument("--interval-steps", type=int, default=None, help="steps per decision (default: auto)")
    p.add_argument("--base-batch", type=int, default=None, help="per-rank batch of the static plan (default: auto)")
    p.add_argument("--gns-model", default="run", choices=GNS_MODELS,
                   help="the noise scale the job measures: 'run' (the run measured at the batch running, as the "
                        "Pollux artifact's simulator; it jumps when the batch changes) or 'continuous' (its level "
                        "carries over a batch change, its trend follows the running batch's run); not with --scenario")
    p.add_argument("--sync-model", default="rank", choices=SYNC_MODELS,
                   help="whose compute hides the allreduce: 'rank' (each rank is charged the sync measured at its own "
                        "local batch) or 'collective' (every rank the sync measured where the compute lasts as long "
                        "as the slowest rank's: an allreduce leaves at the pacing rank's pace; docs/replay.md)")


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    try:
        names = parse_controllers(args.controllers)
        speeds = [float(x) for x in args.speeds.split(",")] if args.speeds else None
        if args.seeds < 1:
            raise ValueError(f"--seeds {args.seeds}: must be >= 1")
        if args.scenario is not None:
            given = [f for f, v in (("--speed-trace", args.speed_trace), ("--workers", args.workers),
                                    ("--speeds", args.speeds)) if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)}: not with --scenario (the scenario sets them)")
            if args.gns_model != "run":
                raise ValueError(f"--gns-model {args.gns_model}: not with --scenario "
                                 "(its captured workload is replayed as run)")
            if args.time_scale != "auto":
                try:
                    ts = float(args.time_scale)
                except ValueError:
                    ts = math.nan
                if not (ts > 0 and math.isfinite(ts)):
                    raise ValueError(f"--time-scale {args.time_scale!r}: 'auto' or a number > 0")
            world = make_scenario_world(args.workload, args.scenario, args.target, args.interval_steps,
                                        args.base_batch, args.time_scale, sync_model=args.sync_model)
        else:
            missing = [f for f, v in (("--speed-trace", args.speed_trace), ("--workers", args.workers)) if v is None]
            if missing:
                raise ValueError(f"{', '.join(missing)}: required (or give --scenario)")
            world = make_world(args.workload, args.speed_trace, args.workers, speeds, args.target,
                               args.interval_steps, args.base_batch, args.gns_model, args.sync_model)
    except ValueError as exc:      # TraceError and ScenarioError are ValueErrors
        print(f"dynamix replay: {exc}")
        return 2
    out = replay(world, names, list(range(args.seeds)), guard=args.guard == "on")
    out["settings"]["wall_s"] = round(time.perf_counter() - t0, 2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    hs = out["controllers"].get("hindsight", {}).get("median")
    print(f"{out['workload']}, N={out['workers']}, target {out['target_metric']:.4g}, {args.seeds} seeds, "
          f"speed trace {world.trace.label}" + ("" if args.sync_model == "rank" else f", sync model {args.sync_model}"))
    for c, r in out["controllers"].items():
        rel = f"  ({r['median'] / hs:.2f}x hindsight)" if hs and r["median"] else ""
        med = f"{r['median']:.1f} s" if r["median"] is not None else "not reached"
        vs = r.get("vs_goodput")
        vs = (f", {vs['ratio']:.3f}x goodput [{vs['interval'][0]:.2f}, {vs['interval'][1]:.2f}] ({vs['level']:.0%} "
              "paired interval)") if vs else ""
        print(f"  {c:>14}: median {med}, reached {r['reached_fraction']:.0%}{rel}{vs}")
    print(f"wrote {args.out} ({out['settings']['wall_s']:.1f} s)")
    return 0
