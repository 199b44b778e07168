"""`dynamix eval-replay`: the policy against the baselines and the hindsight oracle, per cell of
the replay world (workload x speed trace x N), over held-out seeds.

    nice -n 15 dynamix eval-replay --workloads bert,cifar10,deepspeech2,ncf \\
        --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --seeds 20 --jobs 2 \\
        [--policy ppo=PATH] [--policy new=PATH ...] [--loo bert=P1,cifar10=P2,...] \\
        [--cache runs/replay_eval_cache.json] [--out OUT.json]

Seeds 0..K-1 (training worlds use seeds >= 1,000,000); every controller runs the same world for a
seed (``dynamix replay``'s worlds: the unperturbed workloads, ``replay.worlds.build_sim``). Per cell
it prints the median time to target of static, proportional, goodput, the causal and hindsight
oracles (``replay.oracle``) and each policy
(``--policy LABEL=PATH``; default ``ppo`` = the shipped default) and, per policy, the issue's
summary statistics over cells (medians per cell, a miss counts as infinitely slow):

* geomean of median(policy) / median(goodput); the same over the cells where goodput / hindsight
  >= 1.15; the largest cell ratio;
* fraction of goodput's gap to the oracle closed: mean over cells of (g - p) / (g - h);
* how much of that gap a controller could close at all: mean over cells of (g - c) / (g - h), c the
  causal oracle (the true workload curves and the speeds of the interval just ended, no future),
  and the fraction of the causal gap the policy closed, mean over cells of (g - p) / (g - c) where
  g > c;
* the same statistics for ``causal_safe`` (the causal oracle behind the safety layer's limits on
  the global batch, ``oracle.run_causal_safe``): what a controller with a perfect model of the
  workload reaches greedily under the product's safety rules, the measured room for the policy
  (an estimate, not a ceiling: greedy);
* policy / static at 32 workers;
* per cell, the paired bootstrap interval of median(policy) / median(goodput) (``ratio_interval``: the
  seeds resampled with replacement, the same draw for both; 90%), and the number of cells whose whole
  interval lies above 1.03: a cell's ratio of medians over 20 seeds moves by several percent with the
  draw of seeds where the times spread widely (YOLOv3 with stragglers at N = 8: 1.103 over seeds 5-24,
  1.024 over seeds 25-44, session 47), so a cell above 1.03 is read with its interval;
* ``--loo W=PATH``: a policy trained without W evaluated on W's cells only (label ``loo``), and
  its geomean per workload.

Baseline and policy times are cached per (cell, seed, controller[, policy file hash]) in
``--cache``, so a new policy costs only its own episodes.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import os
import time
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.replay.paired import INTERVAL, NOT_ABOVE, ratio_interval
from dynamix_hvd.replay.sim import GNS_MODELS
from dynamix_hvd.replay.throughput import SYNC_MODELS
from dynamix_hvd.replay.worlds import SHIPPED_WORKLOADS

BASELINES = ("static", "proportional", "goodput", "causal4", "causal_safe", "causal", "hindsight")
ROOM = "causal_safe"     # the causal oracle behind the safety layer: the room a controller has there
GAP_CELL = 1.15


def _file_hash(path: str) -> str:
    """The policy file's content hash (the cache key), with any controller options after it
    (``PATH?trust=X``) kept in the key; no file: the shipped default's; an ensemble (``A+B+C``):
    its files' hashes joined by '+'. The guard's options are keyed as they run (``_keyed_options``)."""
    from dynamix_hvd.replay.runner import policy_files, split_policy_spec
    f, opts = split_policy_spec(path)
    files = policy_files(f)
    if not files:
        from dynamix_hvd.controllers.policy.io import default_policy_path
        files = [str(default_policy_path())]
    opts = _keyed_options(opts)
    return "+".join(hashlib.sha1(Path(x).read_bytes()).hexdigest()[:12] for x in files) + (f"?{opts}" if opts else "")


def _keyed_options(opts: str) -> str:
    """Controller options as a cache key: the options given, then the departure guard's defaults
    they leave out (``refute``, the PPO controller's default; ``warmup``, the anchor's history),
    so that a change of those defaults does not read episodes run under the old ones; ``warmup=0``
    is left out of the key, as in the caches written before the warm-up existed (session 42)."""
    import inspect

    from dynamix_hvd.controllers.policy.actions import ANCHOR_HISTORY
    from dynamix_hvd.controllers.ppo import PPOController
    parts = [kv for kv in opts.split("&") if kv]
    given = {kv.partition("=")[0] for kv in parts}
    defaults = {"refute": inspect.signature(PPOController).parameters["refute"].default, "warmup": ANCHOR_HISTORY}
    parts += [f"{k}={v}" for k, v in defaults.items() if k not in given]
    return "&".join(kv for kv in parts if not (kv.startswith("warmup=") and kv[7:].isdigit() and int(kv[7:]) == 0))


# (world, keys, cache); a world of six (no guard flag: the controller alone), seven (+ guard) or eight
# (+ the sync model, throughput.SYNC_MODELS; without it "rank")
World6 = tuple[str, int, str, str, tuple[int, ...], str]
Task = tuple[World6 | tuple[str, int, str, str, tuple[int, ...], str, bool]
             | tuple[str, int, str, str, tuple[int, ...], str, bool, str], list[str], str | None]


def _run_task(task: Task) -> dict[str, float | None]:
    (wl, n, trace, ctl, seeds, gns_model, *rest), keys, cache_path = task
    guard = bool(rest[0]) if rest else False      # (a task of six: the controller alone)
    sync_model = str(rest[1]) if len(rest) > 1 else "rank"
    from dynamix_hvd.replay.runner import run_one
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    done: dict = {}
    if cache_path and Path(cache_path).is_file():     # another evaluation may have run them meanwhile
        try:
            done = json.loads(Path(cache_path).read_text())
        except ValueError:
            done = {}
    out = {}
    for s, k in zip(seeds, keys):
        if k in done:
            out[k] = done[k]
            continue
        sim = build_sim(WorldSpec(wl, n, trace, s, gns_model=gns_model, sync_model=sync_model))
        out[k] = run_one(sim, ctl, s, guard=guard)["time_to_target_s"]
    return out


def _write_cache(cp: Path, new: dict[str, float | None]) -> None:
    """Merge ``new`` into the cache file (other evaluations may write it too), atomically. The
    read-merge-write holds an exclusive lock on ``CACHE.lock``: without it two evaluations sharing
    the cache (``--reverse``) overwrote each other's new episodes (seen: 29 of 6,720 lost)."""
    cp.parent.mkdir(parents=True, exist_ok=True)
    with open(cp.with_name(cp.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = json.loads(cp.read_text()) if cp.is_file() else {}
        merged.update(new)
        tmp = cp.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(merged))
        tmp.replace(cp)


def seed_range(text: str) -> range:
    """``LO-HI`` (e.g. ``5-14``, both included) as a range of seeds; ValueError naming the text otherwise
    (an ``argparse`` type for the benchmarks that read the caches)."""
    lo, _, hi = text.partition("-")
    if not (lo.isdigit() and hi.isdigit() and int(lo) <= int(hi)):
        raise ValueError(f"seeds {text!r}: expected LO-HI, e.g. 5-14")
    return range(int(lo), int(hi) + 1)


GUARD_TAG = f"|guard-r{DynamixConfig().guard_retries}"   # a guarded episode's key suffix (episode_key)


def episode_key(wl: str, trace: str, n: int, seed: int, tag: str, gns_model: str = "run", guard: bool = False,
                sync_model: str = "rank") -> str:
    """One episode's key in the cache: the cell, the seed, and the controller's tag (a baseline's
    name, or ``ppo#`` and the policy's ``_file_hash``); ``|guard-rK`` for a guarded controller run inside
    the live hook's Decider with the default ``guard_retries`` K (``replay.runner.run_controller``; the
    caches before session 65 hold the controllers alone, under the keys without it, and session 65's
    ``|guard`` the guard without retries); ``|sync=collective`` for the collective sync model (session 76)."""
    return (f"{wl}|{trace}|{n}|{seed}|{tag}" + ("" if gns_model == "run" else f"|gns={gns_model}")
            + ("" if sync_model == "rank" else f"|sync={sync_model}") + (GUARD_TAG if guard else ""))


def policy_tag(path: str) -> str:
    """The cache tag of policy ``path`` (``PATH[?options]``; '' = the shipped default)."""
    return f"ppo#{_file_hash(path)}"


def _one_thread() -> None:
    """A pool worker's torch runs one thread: the episodes' networks are small and the workers share the
    cores; and a forked child whose parent had started torch's thread pool (a policy built there: the
    selection of a draw, a test before) hangs in its first multi-threaded op (seen: ``orthogonal_`` in a
    policy's initialisation, waiting on a futex forever) unless it never asks for more than one."""
    import torch
    torch.set_num_threads(1)


def read_cache(cache_path: str | None) -> dict[str, float | None]:
    """The episodes cached in ``cache_path`` (none without a path or a file)."""
    return json.loads(Path(cache_path).read_text()) if cache_path and Path(cache_path).is_file() else {}


def run_episodes(tasks: Sequence[tuple[tuple, list[str]]], cache: dict[str, float | None], jobs: int = 1,
                 cache_path: str | None = None, verbose: bool = True) -> None:
    """Run ``tasks`` (``((workload, N, trace, controller, (seed,), gns_model[, guard]), [key])``) on ``jobs``
    processes into ``cache``, and into the cache file after every task (an interrupted evaluation
    keeps what it ran)."""
    if not tasks:
        return
    if verbose:
        print(f"running {len(tasks)} episodes on {jobs} processes", flush=True)
    with get_context("fork").Pool(max(1, jobs), initializer=_one_thread) as pool:
        for new in pool.imap(_run_task, [(t, k, cache_path) for t, k in tasks]):
            cache.update(new)
            if cache_path:
                _write_cache(Path(cache_path), new)


def median_time(xs: Sequence[float | None]) -> float:
    """The median time to target of a cell's episodes, a miss (None) counting as infinitely slow."""
    return float(np.median([math.inf if x is None else x for x in xs]))


def geomean(xs: Sequence[float]) -> float:
    v = np.asarray([x for x in xs if math.isfinite(x) and x > 0])
    return float(np.exp(np.log(v).mean())) if v.size else math.nan


def summarise(cells: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """The issue's statistics for one policy label over the cells that have it."""
    rows = [c for c in cells if label in c["median"]]
    r = [c["median"][label] / c["median"]["goodput"] for c in rows]
    gap = [c for c in rows if c["median"]["goodput"] / c["median"]["hindsight"] >= GAP_CELL]
    closed = [(c["median"]["goodput"] - c["median"][label]) / (c["median"]["goodput"] - c["median"]["hindsight"])
              for c in rows if c["median"]["goodput"] > c["median"]["hindsight"]]
    causal = [c for c in rows if "causal" in c["median"]]
    reachable = [(c["median"]["goodput"] - c["median"]["causal"]) / (c["median"]["goodput"] - c["median"]["hindsight"])
                 for c in causal if c["median"]["goodput"] > c["median"]["hindsight"]]
    closed_causal = [(c["median"]["goodput"] - c["median"][label]) / (c["median"]["goodput"] - c["median"]["causal"])
                     for c in causal if c["median"]["goodput"] > c["median"]["causal"]]
    n32 = [c["median"][label] / c["median"]["static"] for c in rows if c["workers"] == 32]
    per_wl = {w: geomean([c["median"][label] / c["median"]["goodput"] for c in rows if c["workload"] == w])
              for w in sorted({c["workload"] for c in rows})}
    sure_above = [c for c in rows if c.get("interval", {}).get(label, (math.nan,))[0] > NOT_ABOVE]
    return {"cells": len(rows), "geomean_vs_goodput": geomean(r),
            "cells_interval_above_1.03": len(sure_above),
            "cells_gap_ge_1.15": len(gap),
            "geomean_vs_goodput_in_gap_cells": geomean([c["median"][label] / c["median"]["goodput"] for c in gap]),
            "max_vs_goodput": max(r) if r else math.nan,
            "gap_closed_mean": float(np.mean(closed)) if closed else math.nan,
            "gap_reachable_mean": float(np.mean(reachable)) if reachable else math.nan,
            "cells_causal_below_goodput": len(closed_causal),
            "causal_gap_closed_mean": float(np.mean(closed_causal)) if closed_causal else math.nan,
            "vs_static_at_32": geomean(n32), "geomean_vs_goodput_per_workload": per_wl}


def evaluate(workloads: Sequence[str], traces: Sequence[str], workers: Sequence[int], seeds: Sequence[int],
             policies: dict[str, str], loo: dict[str, str], jobs: int = 1, cache_path: str | None = None,
             verbose: bool = True, baselines: bool = True, reverse: bool = False,
             oracles: Sequence[str] = (), gns_model: str = "run", guard: bool = True,
             sync_model: str = "rank") -> dict[str, Any]:
    """The evaluation table's episodes (cached) and summary. ``guard``: the guarded controllers
    (goodput, ppo) run behind the live hook's goodput guard and its fallback, as live (the default)."""
    from dynamix_hvd.replay.runner import is_guarded
    if gns_model not in GNS_MODELS:
        raise ValueError(f"gns_model={gns_model!r}: expected one of {GNS_MODELS}")
    if sync_model not in SYNC_MODELS:
        raise ValueError(f"sync_model={sync_model!r}: expected one of {SYNC_MODELS}")
    cache = read_cache(cache_path)
    hashes = {p: _file_hash(p) for p in set(policies.values()) | set(loo.values()) if p}
    ctl_of = {b: b for b in (*BASELINES, *oracles)}

    def name_for(label: str, wl: str) -> str | None:
        if label in ctl_of:
            return label
        path = loo.get(wl) if label == "loo" else policies[label]
        if label == "loo" and path is None:
            return None
        return f"ppo:{path}" if path else "ppo"

    def key(wl, tr, n, s, label) -> str:
        nm = name_for(label, wl)
        tag = nm if nm in ctl_of else f"ppo#{_file_hash('')}" if nm == "ppo" else f"ppo#{hashes[nm[4:]]}"
        return episode_key(wl, tr, n, s, tag, gns_model, guard and is_guarded(nm), sync_model)

    labels = list(BASELINES) + [o for o in oracles if o not in BASELINES] + list(policies) + (["loo"] if loo else [])
    tasks = []
    order = (lambda xs: list(xs)[::-1]) if reverse else list
    for wl in order(workloads):
        for tr in order(traces):
            for n in order(workers):
                for lb in labels:
                    nm = name_for(lb, wl)
                    if nm is None or (not baselines and lb in BASELINES and lb not in oracles):
                        continue
                    for s in seeds:      # one episode per task: balanced, and cached as it ends
                        if key(wl, tr, n, s, lb) not in cache:
                            tasks.append(((wl, n, tr, nm, (s,), gns_model, guard, sync_model), [key(wl, tr, n, s, lb)]))
    t0 = time.perf_counter()
    run_episodes(tasks, cache, jobs, cache_path, verbose)
    if not baselines:      # episodes cached only; the table comes from a run with the baselines
        return {"cells": [], "summary": {}, "seeds": list(seeds), "wall_s": round(time.perf_counter() - t0, 1)}
    cells = []
    for wl in workloads:
        for tr in traces:
            for n in workers:
                med, times = {}, {}
                for lb in labels:
                    if name_for(lb, wl) is None:
                        continue
                    times[lb] = [cache[key(wl, tr, n, s, lb)] for s in seeds]
                    med[lb] = median_time(times[lb])
                interval = {lb: ratio_interval(times[lb], times["goodput"]) for lb in times if lb not in BASELINES}
                cells.append({"workload": wl, "trace": tr, "workers": n, "median": med, "interval": interval})
    summary = {lb: summarise(cells, lb) for lb in labels if lb not in BASELINES}
    room = summarise(cells, ROOM) if any(ROOM in c["median"] for c in cells) else None
    return {"cells": cells, "summary": summary, "room": room, "seeds": list(seeds), "policies": policies, "loo": loo,
            "gns_model": gns_model, "guard": guard, "sync_model": sync_model,
            "wall_s": round(time.perf_counter() - t0, 1)}


def format_table(res: dict[str, Any]) -> str:
    cells = res["cells"]
    labels = list(cells[0]["median"]) if cells else []
    pol = [lb for lb in labels if lb not in BASELINES]
    hdr = ["workload", "trace", "N"] + labels + ["g/h"] + [f"{p}/g" for p in pol]
    lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for c in cells:
        m = c["median"]
        tr = c["trace"].replace("cov:coefficient_variation", "CoV").replace("_norm", "")
        row = [c["workload"], tr, str(c["workers"])] + [f"{m[lb]:.0f}" if lb in m else "-" for lb in labels]
        row.append(f"{m['goodput'] / m['hindsight']:.2f}")
        iv = c.get("interval", {})
        row += [(f"{m[p] / m['goodput']:.3f}" + (f" [{iv[p][0]:.2f}, {iv[p][1]:.2f}]" if p in iv else ""))
                if p in m else "-" for p in pol]
        lines.append("| " + " | ".join(row) + " |")
    summaries = list(res["summary"].items())
    if res.get("room"):
        summaries.append((ROOM, res["room"]))
    for p, s in summaries:
        if p == ROOM:
            lines.append(f"\n{ROOM}: the causal oracle (a perfect workload model, greedy) behind the safety "
                         "layer's limits, the room a controller with the product's safety rules has")
        lines.append(f"\n{p}: cells {s['cells']}, geomean {p}/goodput {s['geomean_vs_goodput']:.3f}, in the "
                     f"{s['cells_gap_ge_1.15']} cells with goodput/hindsight >= {GAP_CELL} "
                     f"{s['geomean_vs_goodput_in_gap_cells']:.3f}, max {s['max_vs_goodput']:.3f}" +
                     (f" ({s['cells_interval_above_1.03']} cells whose {INTERVAL:.0%} interval is above {NOT_ABOVE})"
                      if p != ROOM else "") + ", gap to hindsight "
                     f"closed {s['gap_closed_mean']:+.2f} (mean over cells; the causal oracle closes "
                     f"{s['gap_reachable_mean']:+.2f}; of the causal gap, in the {s['cells_causal_below_goodput']} cells "
                     f"where it is below goodput, {p} closes {s['causal_gap_closed_mean']:+.2f}), {p}/static at N=32 "
                     f"{s['vs_static_at_32']:.3f}; per workload " +
                     ", ".join(f"{w} {v:.3f}" for w, v in s["geomean_vs_goodput_per_workload"].items()))
    return "\n".join(lines)


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for it in items:
        for part in it.split(","):
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"{what} {part!r}: expected LABEL=PATH")
            k, v = part.split("=", 1)
            from dynamix_hvd.replay.runner import policy_files, split_policy_spec
            for f in policy_files(split_policy_spec(v)[0]):   # PATH?trust=X, A+B+C (an ensemble)
                if not Path(f).is_file():
                    raise ValueError(f"{what} {part!r}: policy file {f} not found")
            out[k] = v
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workloads", default=",".join(SHIPPED_WORKLOADS), help="comma list (names or Pollux dirs)")
    p.add_argument("--traces", default="none,job_3_norm,cov:coefficient_variation",
                   help="comma list of speed traces (none, a PAI file, cov:FILE)")
    p.add_argument("--workers", default="8,32", help="comma list of world sizes")
    p.add_argument("--seeds", type=int, default=20, help="held-out seeds 0..K-1")
    p.add_argument("--seed-offset", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--policy", action="append", default=[],
                   help="LABEL=PATH[+PATH...][?trust=X&ensemble=RULE] (repeatable; default ppo=shipped; trust: PPOController's "
                        "trust region; A+B+C: the ensemble of those policies, controllers.policy.ensemble)")
    p.add_argument("--loo", action="append", default=[], help="WORKLOAD=PATH: policy trained without WORKLOAD")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (run under nice -n 15)")
    p.add_argument("--cache", default="runs/replay_eval_cache.json", help="episode cache ('' = none)")
    p.add_argument("--out", default="", help="result JSON")
    p.add_argument("--reverse", action="store_true",
                   help="run the cells in reverse order (a second evaluation sharing the cache meets the first)")
    p.add_argument("--oracles", default="",
                   help="comma list of further replay controllers or oracles (dynamix replay's names, e.g. "
                        "hindsight_safe,causal_blind) evaluated and summarised like the policies")
    p.add_argument("--gns-model", default="run", choices=GNS_MODELS,
                   help="the replay's noise-scale model (dynamix replay --gns-model); cached apart from 'run'")
    p.add_argument("--sync-model", default="rank", choices=SYNC_MODELS,
                   help="the replay's sync model (dynamix replay --sync-model); cached apart from 'rank'")
    p.add_argument("--guard", choices=("on", "off"), default="on",
                   help="on (default): goodput and ppo run behind the live hook's goodput guard and its fallback "
                        "(ppo to goodput; goodput reverted once, then to proportional), as live; off: the "
                        "controllers alone (every evaluation before session 65); cached apart (|guard-rK, "
                        "K = guard_retries)")
    p.add_argument("--policies-only", action="store_true",
                   help="run and cache the policies' episodes only, and those of the --oracles named "
                        "(a baseline named there too, e.g. goodput; no table)")


def run(args: argparse.Namespace) -> int:
    try:
        policies = _pairs(args.policy, "--policy") or {"ppo": ""}
        loo = _pairs(args.loo, "--loo")
        workers = [int(x) for x in args.workers.split(",") if x]
        from dynamix_hvd.replay.runner import CONTROLLERS
        oracles = [o for o in args.oracles.split(",") if o]
        bad = [o for o in oracles if o not in CONTROLLERS or o.startswith("ppo")]
        if bad:
            raise ValueError(f"--oracles {args.oracles!r}: unknown {bad}; choose from "
                             f"{[c for c in CONTROLLERS if c not in BASELINES and c != 'ppo']}")
        if args.seeds < 1 or not workers or min(workers) < 1:
            raise ValueError(f"--seeds {args.seeds} / --workers {args.workers}: need >= 1")
    except ValueError as exc:
        print(f"dynamix eval-replay: {exc}")
        return 2
    seeds = list(range(args.seed_offset, args.seed_offset + args.seeds))
    res = evaluate([w for w in args.workloads.split(",") if w], [t for t in args.traces.split(",") if t], workers,
                   seeds, policies, loo, args.jobs, args.cache or None, baselines=not args.policies_only,
                   reverse=args.reverse, oracles=oracles, gns_model=args.gns_model, guard=args.guard == "on",
                   sync_model=args.sync_model)
    if args.policies_only:
        print(f"cached the policies' episodes in {args.cache} ({res['wall_s']:.0f} s)")
        return 0
    print(format_table(res))
    print(f"\n{len(seeds)} seeds ({seeds[0]}..{seeds[-1]}), noise-scale model {args.gns_model}, sync model "
          f"{args.sync_model}, goodput guard "
          f"{args.guard}, {res['wall_s']:.0f} s")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2))
    return 0
