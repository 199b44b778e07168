"""``dynamix select-policy``: keep the best of several training draws, judged on validation worlds.

One run of the imitation recipe is a *draw*: the same command with another ``--seed`` gives a policy
whose time to target ranges, over nine draws measured in session 56, from 0.954x to 0.991x goodput's
(24 cells x seeds 5-44). A draw's figure is a property of the draw, not of the evaluation's seeds: on
seeds 5-24 and 25-44 each draw's geometric mean moved by at most 0.007 while the draws spread by 0.035
(``docs/policy.md``, session 56). So worlds nobody evaluates on can tell the draws apart: this command
runs goodput and every draw on *validation* worlds (by default the workloads the draws were trained on,
no trace / PAI job 3 / a CoV draw, N = 8 and 32, seeds 1000-1009: disjoint from the training worlds,
seeds >= 1,000,000, and from the seeds ``dynamix eval-replay`` reports, 0-999), ranks them by the
geometric mean over cells of median(draw) / median(goodput), and copies the fastest, byte for byte, to
``--out``. Evaluate the chosen file afterwards on seeds it was not chosen on.

    dynamix select-policy runs/po_s0_box.zip runs/po_s1_box.zip runs/po_s2_box.zip --out runs/po_best.zip \\
        [--incumbent runs/po_s0_box.zip] \\
        [--seeds 10 --seed-offset 1000 --workers 8,32 --traces none,job_3_norm,cov:coefficient_variation] \\
        [--workloads W1,W2] [--jobs 2] [--cache runs/select_cache.json]

A draw whose median misses the target in some cell ranks after every draw that reaches it everywhere.
Near the top the draws tie within the validation seeds' noise (session 57: four draws within 0.004 of
each other, their order changed between 10 and 30 validation seeds), so with ``--incumbent`` (the
shipped policy, one of the draws) a challenger replaces it only when it is *measurably* faster: the
90% paired interval of the geometric mean of median(challenger) / median(incumbent) over the cells
(``replay.paired.geomean_interval``, seeds resampled as pairs) lies below 1 (``keep_draw``). Every
draw's interval against the kept one is printed. The episodes share ``dynamix eval-replay``'s cache
format and keys.
"""
from __future__ import annotations

import argparse
import math
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dynamix_hvd.agent.replay_eval import episode_key, median_time, policy_tag, read_cache, run_episodes
from dynamix_hvd.replay.paired import geomean_interval
from dynamix_hvd.replay.throughput import SYNC_MODELS

VALIDATION_SEED_OFFSET = 1000      # eval-replay reports seeds below it; training worlds use >= 1,000,000

Cell = tuple[str, str, int]        # (workload, trace, N)


def rank_draws(times: Mapping[str, Mapping[Cell, Sequence[float | None]]],
               goodput: Mapping[Cell, Sequence[float | None]]) -> list[dict[str, Any]]:
    """Every draw's figures on the validation cells, fastest first: ``geomean`` of median(draw) /
    median(goodput) over the cells, ``max_cell`` the largest such ratio, ``misses`` the cells where the
    draw's median is no finite time (a miss counts as infinitely slow; such draws rank last, by their
    number of misses). Ties keep the order the draws were given in. Pure: no episodes run here."""
    out = []
    for label, per_cell in times.items():
        if set(per_cell) != set(goodput):
            raise ValueError(f"draw {label!r}: cells {sorted(per_cell)} differ from goodput's {sorted(goodput)}")
        ratios = [median_time(per_cell[c]) / median_time(goodput[c]) for c in sorted(per_cell)]
        finite = [r for r in ratios if math.isfinite(r) and r > 0]
        misses = len(ratios) - len(finite)
        geo = float(np.exp(np.mean(np.log(finite)))) if finite and not misses else math.inf
        out.append({"label": label, "geomean": geo, "max_cell": max(ratios) if ratios else math.nan,
                    "misses": misses, "cells": len(ratios)})
    return sorted(out, key=lambda d: (d["misses"], d["geomean"]))      # stable: ties keep the given order


def paired_interval(times: Mapping[str, Mapping[Cell, Sequence[float | None]]], a: str, b: str,
                    seed: int = 0) -> tuple[float, float]:
    """The 90% paired interval of the geometric mean over cells of median(``a``) / median(``b``), the
    validation seeds resampled as pairs (``replay.paired.geomean_interval``). Pure."""
    return geomean_interval([(times[a][c], times[b][c]) for c in sorted(times[a])], seed=seed)


def keep_draw(ranked: Sequence[Mapping[str, Any]], times: Mapping[str, Mapping[Cell, Sequence[float | None]]],
              incumbent: str | None = None) -> str:
    """The draw to keep: without an ``incumbent`` the first of ``ranked`` (``rank_draws``); with one,
    the fastest-ranked draw whose paired interval against the incumbent lies wholly below 1
    (measurably faster on the validation seeds), else the incumbent. Pure."""
    if incumbent is None:
        return str(ranked[0]["label"])
    if incumbent not in times:
        raise ValueError(f"incumbent {incumbent!r} is not one of the draws {sorted(times)}")
    for row in ranked:
        if row["label"] == incumbent:
            return incumbent           # every draw ranked above it tied with it (or missed a cell)
        if not row["misses"] and paired_interval(times, row["label"], incumbent)[1] < 1.0:
            return str(row["label"])
    return incumbent


def training_workloads(paths: Sequence[str]) -> list[str]:
    """The workloads the draws were trained on (their ``dynamix_config``), which must be the same for
    all: draws trained on different workloads are not draws of one recipe."""
    from dynamix_hvd.controllers.policy.io import read_policy_file
    from dynamix_hvd.replay.worlds import SHIPPED_WORKLOADS
    seen: dict[tuple[str, ...], str] = {}
    for p in paths:      # the file's configuration, checked as the loader checks it; no network built here
        cfg = read_policy_file(p).policy_kwargs["dynamix_config"]
        seen.setdefault(tuple(cfg.get("workloads") or SHIPPED_WORKLOADS), p)
    if len(seen) > 1:
        raise ValueError("the draws were trained on different workloads (" +
                         "; ".join(f"{p}: {','.join(w)}" for w, p in seen.items()) + "): give --workloads")
    return list(next(iter(seen)))


def validate(paths: Sequence[str], workloads: Sequence[str], traces: Sequence[str], workers: Sequence[int],
             seeds: Sequence[int], jobs: int = 1, cache_path: str | None = None, verbose: bool = True,
             incumbent: str | None = None, sync_model: str = "rank") -> tuple[list[dict[str, Any]], str]:
    """Run goodput and every draw on the validation cells (episodes cached as ``eval-replay`` caches
    them), rank the draws (``rank_draws``) and choose one (``keep_draw``); each row also names its
    ``path`` and ``vs_kept``, its paired interval against the kept draw; ``sync_model``: the worlds'
    (``dynamix replay --sync-model``). Returns (rows, kept path)."""
    cache = read_cache(cache_path)
    tags = {"goodput": "goodput", **{p: policy_tag(p) for p in paths}}
    cells = [(w, t, n) for w in workloads for t in traces for n in workers]

    def key(w: str, t: str, n: int, s: int, tag: str) -> str:
        return episode_key(w, t, n, s, tag, sync_model=sync_model)
    tasks = [((w, n, t, "goodput" if who == "goodput" else f"ppo:{who}", (s,), "run", False, sync_model),
              [key(w, t, n, s, tag)])
             for w, t, n in cells for who, tag in tags.items() for s in seeds
             if key(w, t, n, s, tag) not in cache]
    run_episodes(tasks, cache, jobs, cache_path, verbose)

    def per_cell(tag: str) -> dict[Cell, list[float | None]]:
        return {(w, t, n): [cache[key(w, t, n, s, tag)] for s in seeds] for w, t, n in cells}
    times = {p: per_cell(tags[p]) for p in paths}
    ranked = rank_draws(times, per_cell("goodput"))
    kept = keep_draw(ranked, times, incumbent)
    for row in ranked:
        row["path"] = row.pop("label")
        row["vs_kept"] = paired_interval(times, row["path"], kept) if row["path"] != kept else None
    return ranked, kept


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("policies", nargs="+", help="the draws: policy files of one recipe (train-policy's zips)")
    p.add_argument("--out", required=True,
                   help="where the kept draw (the fastest, or the incumbent) is copied, byte for byte")
    p.add_argument("--incumbent", default="",
                   help="one of the draws (e.g. the shipped policy): kept unless another is measurably faster "
                        "(paired 90%% interval of the ratio below 1)")
    p.add_argument("--workloads", default="",
                   help="comma list of validation workloads (default: the ones the draws were trained on)")
    p.add_argument("--traces", default="none,job_3_norm,cov:coefficient_variation", help="comma list of speed traces")
    p.add_argument("--workers", default="8,32", help="comma list of world sizes")
    p.add_argument("--seeds", type=int, default=10, help="validation seeds per cell")
    p.add_argument("--seed-offset", type=int, default=VALIDATION_SEED_OFFSET,
                   help=f"first validation seed (default {VALIDATION_SEED_OFFSET}: eval-replay reports seeds below it)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--cache", default="", help="episode cache (eval-replay's format; '' = none)")
    p.add_argument("--sync-model", default="rank", choices=SYNC_MODELS,
                   help="the validation worlds' sync model (dynamix replay --sync-model)")


def run(args: argparse.Namespace) -> int:
    from dynamix_hvd.controllers.policy.io import PolicyLoadError
    try:
        missing = [p for p in args.policies if not Path(p).is_file()]
        if missing:
            raise ValueError(f"policy file(s) not found: {missing}")
        if len(set(args.policies)) != len(args.policies):
            raise ValueError(f"a policy is given twice: {args.policies}")
        workers = [int(x) for x in args.workers.split(",") if x]
        traces = [t for t in args.traces.split(",") if t]
        if args.seeds < 1 or not workers or min(workers) < 1 or not traces:
            raise ValueError(f"--seeds {args.seeds} / --workers {args.workers!r} / --traces {args.traces!r}: "
                             "need >= 1 of each")
        if Path(args.out).resolve() in {Path(p).resolve() for p in args.policies}:
            raise ValueError(f"--out {args.out}: is one of the draws")
        incumbent = None
        if args.incumbent:            # the draw of that file, however its path is written
            same = [p for p in args.policies if Path(p).resolve() == Path(args.incumbent).resolve()]
            if not same:
                raise ValueError(f"--incumbent {args.incumbent}: is not one of the draws {args.policies}")
            incumbent = same[0]
        workloads = [w for w in args.workloads.split(",") if w] or training_workloads(args.policies)
    except (ValueError, OSError, PolicyLoadError) as exc:
        print(f"dynamix select-policy: {exc}")
        return 2
    seeds = list(range(args.seed_offset, args.seed_offset + args.seeds))
    ranked, kept = validate(args.policies, workloads, traces, workers, seeds, args.jobs, args.cache or None,
                            incumbent=incumbent, sync_model=args.sync_model)
    print(f"validation: {len(workloads)} workloads x {len(traces)} traces x N {workers} x seeds "
          f"{seeds[0]}..{seeds[-1]}; median(draw) / median(goodput) per cell"
          + (f"; incumbent {incumbent}" if incumbent else ""))
    for row in ranked:
        miss = f", misses the target in {row['misses']} cells" if row["misses"] else ""
        vs = (f", / the kept draw (90% paired) [{row['vs_kept'][0]:.3f}, {row['vs_kept'][1]:.3f}]"
              if row["vs_kept"] else "")
        print(f"{'*' if row['path'] == kept else ' '} {row['path']}: geomean {row['geomean']:.3f}, largest cell "
              f"{row['max_cell']:.3f}{miss}{vs}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kept, args.out)
    print(f"kept {kept} -> {args.out}")
    return 0
