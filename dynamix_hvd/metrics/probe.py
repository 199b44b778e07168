"""`dynamix probe`: print one JSON snapshot of every metric on this rank (network per
interface, CPU, memory, GPU, collective stats). Needs no MPI: under mpirun each rank prints
its own line, tagged with the rank from the launcher's environment."""
from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
from dataclasses import asdict
from typing import Any

from dynamix_hvd.metrics.collector import Collector, CollectorConfig

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK", "RANK")
SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE", "WORLD_SIZE")


def _env_int(names: tuple[str, ...]) -> int | None:
    for n in names:
        v = os.environ.get(n, "")
        if v.strip().isdigit():
            return int(v)
    return None


def _clean(x: Any) -> Any:
    """NaN -> None so the output is strict JSON ("no data" is null, never 0)."""
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", type=float, default=0.5, help="seconds to measure rates over (default 0.5)")
    parser.add_argument("--period", type=float, default=0.1, help="sampling period in seconds (default 0.1)")
    parser.add_argument("--interfaces", default=None, help="comma-separated interfaces (default: auto)")
    parser.add_argument("--proc-root", default="/proc")
    parser.add_argument("--sys-root", default="/sys")
    parser.add_argument("--no-gpu", action="store_true", help="do not load NVML")
    parser.add_argument("--indent", type=int, default=None, help="pretty-print with this indent")


def snapshot(args: argparse.Namespace) -> dict[str, Any]:
    ifaces = tuple(i for i in args.interfaces.split(",") if i) if args.interfaces else None
    cfg = CollectorConfig(period_s=args.period, interfaces=ifaces, proc_root=args.proc_root,
                          sys_root=args.sys_root, gpu=not args.no_gpu)
    with Collector(cfg) as c:
        time.sleep(max(0.0, args.window))
        w = c.window()
        latest = c.latest() or {}
        links = {}
        for lw in w.links:
            d = asdict(lw)
            d["counters"] = (latest.get("links") or {}).get(lw.name)
            links[lw.name] = d
        out = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "rank": _env_int(RANK_VARS),
            "size": _env_int(SIZE_VARS),
            "window_s": w.duration_s,
            "samples": w.samples,
            "network": links,
            "nic_tx_Bps": w.nic_tx_Bps,
            "nic_rx_Bps": w.nic_rx_Bps,
            "cpu": {"node_util": w.node_cpu_util, "process_util": w.cpu_util, "process_cores": w.process_cpu_cores},
            "memory": {"headroom": w.mem_headroom, "available_bytes": w.mem_available_bytes, "rss_bytes": w.rss_bytes},
            "gpu": ({"util": w.gpu_util, "mem_headroom": w.gpu_mem_headroom} if not math.isnan(w.gpu_util)
                    else None),
            "gpu_status": c.gpu_status,
            "collectives": {"available": c.comm_available, "status": c.comm_status,
                            "window": {"allreduce": asdict(w.allreduce), "control": asdict(w.control)},
                            "totals": c.comm_totals() if c.comm_available else None},
            "sources": c.source_stats(),
        }
    return _clean(out)


def run(args: argparse.Namespace) -> int:
    try:
        snap = snapshot(args)
    except ValueError as exc:  # configuration error (unknown interface, bad period)
        print(f"dynamix probe: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(snap, indent=args.indent, sort_keys=False), flush=True)
    return 0
