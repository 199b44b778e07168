"""Soak: 10,000 decisions with the native collector, PMPI collective timing and online PPO
fine-tuning on (controller ppo, finetune=True, a decision every step), on a tiny model. Prints
RSS at the start, after warm-up, every --every decisions and at the end on every rank, and the
size of every container reachable from the hook object (histories, deques, buffers, rings:
len() of lists / deques / dicts / sets / tuples, len() and capacity of native rings), listing
each one whose size changed after warm-up and whether it kept growing until the end.

    mpirun --allow-run-as-root --oversubscribe -np 2 \
        -x LD_PRELOAD=$(.venv/bin/python -m dynamix_hvd.launch --print-preload) \
        .venv/bin/python -m mpi4py benchmarks/bench_soak.py --decisions 10000

Targets (issue 23): RSS growth after warm-up < 2% on every rank, and no structure that grows
without bound. Figures only; nothing here is asserted by the unit tests.
"""
from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
import types
import warnings
from typing import Any

import horovod.torch as hvd
import numpy as np
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix

CONTAINERS = (list, dict, set, frozenset, tuple, collections.deque)
SKIP_TYPES = (str, bytes, int, float, bool, type(None), torch.Tensor, np.ndarray, type, types.ModuleType,
              types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _key(k: Any) -> str:
    return repr(k) if isinstance(k, (str, int, float)) else f"<{type(k).__name__}>"


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def container_sizes(root: Any, name: str = "dyn", max_depth: int = 9) -> dict[str, int]:
    """{path: size} of every container reachable from ``root`` through attributes, dict values
    and sequence items (first path found per object; tensors and arrays are fixed-size leaves).
    Objects with ``capacity`` and ``__len__`` (native rings) report ``len`` and ``capacity``."""
    out: dict[str, int] = {}
    seen: set[int] = set()
    queue = collections.deque([(name, root, 0)])      # breadth first: each object under its shortest path
    while queue:
        path, obj, depth = queue.popleft()
        if isinstance(obj, SKIP_TYPES) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, CONTAINERS):
            out[path] = len(obj)
        else:
            cap = getattr(type(obj), "capacity", None)
            if cap is not None and hasattr(obj, "__len__"):
                try:
                    out[path + ".len"], out[path + ".capacity"] = len(obj), int(obj.capacity)
                except Exception:  # noqa: BLE001 - a native object that cannot answer
                    pass
        if depth >= max_depth:
            continue
        if isinstance(obj, dict):
            items = [(f"{path}[{_key(k)}]", v) for k, v in list(obj.items())[:256]]
        elif isinstance(obj, (list, tuple, collections.deque)):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(list(obj)[:64])]
        elif isinstance(obj, (set, frozenset)):
            items = []
        else:
            attrs = getattr(obj, "__dict__", None)
            slots = [s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ()) if hasattr(obj, s)]
            items = [(f"{path}.{k}", v) for k, v in (attrs or {}).items()]
            items += [(f"{path}.{s}", getattr(obj, s)) for s in slots]
        queue.extend((p, v, depth + 1) for p, v in items)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--decisions", type=int, default=10_000, help="decisions after warm-up")
    p.add_argument("--warmup", type=int, default=500, help="decisions before the reference RSS")
    p.add_argument("--every", type=int, default=1000)
    p.add_argument("--samples", type=int, default=4096, help="data set size (many epochs)")
    p.add_argument("--finetune-steps", type=int, default=32)
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(args.samples, 16), torch.randint(0, 4, (args.samples,))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    run_dir = tempfile.mkdtemp(prefix="dynamix-soak-") if hvd.rank() == 0 else None
    rss_start = rss_bytes()
    decisions = [0]
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.01), dataset_size=args.samples, base_batch=16,
                  controller="ppo", finetune=True, finetune_steps=args.finetune_steps, interval_steps=1,
                  min_decision_s=0.0, collector=True, run_dir=run_dir, max_batch=64,
                  guard_patience=10**6,       # no fallback to proportional: PPO and its fine-tuning all the way
                  decision_lag=0,             # a decision after every step
                  metrics_fn=lambda ws: decisions.__setitem__(0, decisions[0] + 1))
    total = args.warmup + args.decisions
    marks: list[tuple[int, float, int]] = []        # (decisions, seconds, RSS)
    sizes: list[tuple[int, dict[str, int]]] = []
    t0 = time.perf_counter()
    next_mark, epoch, steps = args.warmup, 0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        while decisions[0] < total:
            for idx in dyn.batches(epoch):
                loss = F.cross_entropy(model(x[idx]), y[idx])
                dyn.optimizer.zero_grad()
                loss.backward()
                dyn.optimizer.step()
                dyn.report(loss=loss)
                steps += 1
                if decisions[0] >= next_mark:
                    marks.append((decisions[0], time.perf_counter() - t0, rss_bytes()))
                    sizes.append((decisions[0], container_sizes(dyn)))
                    next_mark += args.every
                if decisions[0] >= total:
                    break
            epoch += 1
    wall = time.perf_counter() - t0
    marks.append((decisions[0], wall, rss_bytes()))
    sizes.append((decisions[0], container_sizes(dyn)))
    ctl = dyn.controller
    ft = ctl.finetune_info() if ctl is not None and hasattr(ctl, "finetune_info") else None
    ctl_name = ctl.name if ctl is not None else None
    comm_on = dyn.collector is not None and dyn.collector.comm_available
    recorded = sum(c["count"] for op in dyn.collector.comm_totals().values() for c in op.values()) if comm_on else 0
    dyn.close()
    rows = hvd.allgather_object((hvd.rank(), rss_start, marks, sizes, comm_on, recorded), name="soak")
    if hvd.rank() != 0:
        return
    print(f"soak: {decisions[0]} decisions ({args.warmup} warm-up) over {steps} steps and {epoch + 1} epochs in "
          f"{wall:.0f} s on {hvd.size()} ranks; controller ppo, finetune on (finetune_steps {args.finetune_steps}), "
          f"collector on, PMPI timing {'on' if comm_on else 'OFF (not preloaded)'}; run_dir {run_dir}")
    print("collectives recorded by PMPI per rank: " + ", ".join(str(r[5]) for r in rows))
    print(f"controller at the end: {ctl_name}; fine-tuning: {ft}")
    worst = 0.0
    unbounded = 0
    for rank, r0, mk, sz in ((r[0], r[1], r[2], r[3]) for r in rows):
        ref = mk[0][2]
        print(f"\nrank {rank}: RSS at start {r0 / 2**20:.1f} MiB (before Dynamix), after warm-up "
              f"({mk[0][0]} decisions) {ref / 2**20:.1f} MiB")
        for d, t, rss in mk:
            print(f"  decisions {d:6d}  t {t:6.0f} s  RSS {rss / 2**20:7.1f} MiB  {100 * (rss - ref) / ref:+6.2f}%")
        growth = 100 * (mk[-1][2] - ref) / ref
        worst = max(worst, growth)
        first, last = sz[0][1], sz[-1][1]
        grew = sorted(k for k in last if last[k] > first.get(k, 0))
        shrank = [k for k in first if first[k] > last.get(k, 0)]
        growing = []
        for k in grew:
            tail = [s.get(k, 0) for _, s in sz][len(sz) // 2:]
            if len(tail) > 2 and all(b > a for a, b in zip(tail, tail[1:])):
                growing.append(k)
        print(f"  containers reachable from the hook: {len(last)} (after warm-up {len(first)}); items "
              f"{sum(last.values())} (after warm-up {sum(first.values())}); {len(grew)} larger at the end, "
              f"{len(shrank)} smaller or gone; {len(growing)} grew at every mark of the second half")
        for k in grew:
            series = [s.get(k, 0) for _, s in sz]
            flag = "  GROWING" if k in growing else ""
            print(f"    {k}: {series[0]} -> {series[-1]} (min {min(series)}, max {max(series)}){flag}")
        unbounded += len(growing)
        big = sorted(last.items(), key=lambda kv: -kv[1])[:12]
        print("  largest at the end: " + ", ".join(f"{k}={v}" for k, v in big))
    print(f"\nworst RSS growth after warm-up: {worst:+.2f}% (target < 2%); containers growing at every mark of "
          f"the second half: {unbounded}")


if __name__ == "__main__":
    main()
