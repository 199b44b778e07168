"""``dynamix capture-trace``: measure a scenario's workload on the emulated cluster at several global
batches and write a directory in the Pollux trace format, for ``dynamix replay --scenario``.

    dynamix capture-trace --scenario FILE|NAME --batches 64,128,256 --out DIR [--max-time-s S] [--no-netns]

Each global batch B runs the bench worker (``static`` controller) on the scenario's **reference
cluster**: every rank has the compute spec of the fastest rank at t = 0, no speed traces, no events,
the scenario's initial links and ``grad_mb``, local batch B / N. The replay then applies the
ranks' speed ratios, traces, link changes and events on top (``replay/scenario.py``).

Written (``write_pollux``, pure):
* ``validation-B.csv``: one row per evaluation: ``iteration`` (steps), ``progress`` (samples),
  ``metric`` (test accuracy), ``grad_sqr`` = 1 and ``grad_var`` = the hook's noise scale at that
  step / ``unit_batch`` (the smallest captured B), so that the replay's ``unit_batch x grad_var /
  grad_sqr`` is the hook's noise scale (rows before its first estimate take the first one);
* ``scalability.csv``: ``num_nodes = num_replicas = N``, ``local_bsz = B / N``, ``step_time`` =
  the median step time and ``sync_time`` = the median of step time minus compute phase, over all
  ranks and the full steps after the first decision interval;
* ``capture.json``: scenario name and file, batches, the reference worker, the run directories.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

from dynamix_hvd.emulate.scenario import Scenario, load_scenario

CAPTURE_FILE = "capture.json"   # read by replay/scenario.py


def reference_toml(sc: Scenario, global_batch: int) -> str:
    """TOML text of the reference cluster at global batch ``global_batch`` (see the module doc)."""
    n = sc.world_size
    if global_batch % n:
        raise ValueError(f"--batches {global_batch}: must be a multiple of the {n} ranks")
    b = global_batch // n
    ref = min(sc.workers, key=lambda w: w.per_sample_ms)
    if b > ref.max_batch:
        raise ValueError(f"--batches {global_batch}: local batch {b} above the reference worker's max_batch {ref.max_batch}")
    top = {"name": sc.name, "workload": sc.workload, "target_accuracy": sc.target_accuracy,
           "max_time_s": sc.max_time_s, "base_batch": b, "seed": sc.seed, "interval_steps": sc.interval_steps,
           "eval_every_steps": sc.eval_every_steps, "lr": sc.lr, "min_global_batch": global_batch,
           "grad_mb": sc.grad_mb}
    lines = [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    for w in sc.workers:
        lines += ["", "[[workers]]", f"fixed_ms = {ref.fixed_ms!r}", f"per_sample_ms = {ref.per_sample_ms!r}",
                  f"max_batch = {max(ref.max_batch, b)}", f"bandwidth_mbit = {w.bandwidth_mbit!r}",
                  f"latency_ms = {w.latency_ms!r}"]
    return "\n".join(lines) + "\n"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def run_rows(run_dir: Path, interval_steps: int) -> tuple[list[dict[str, float]], float, float]:
    """(evaluation rows with the noise scale, median step time, median sync time) of one run."""
    evals = _jsonl(run_dir / "evals.jsonl")
    if not evals:
        raise ValueError(f"{run_dir / 'evals.jsonl'}: no evaluation")
    ns = [(r["step"], r["glob"]["noise_scale"]) for r in _jsonl(run_dir / "events.jsonl")
          if isinstance(r.get("glob", {}).get("noise_scale"), (int, float))
          and math.isfinite(r["glob"]["noise_scale"]) and r["glob"]["noise_scale"] > 0]
    if not ns:
        raise ValueError(f"{run_dir / 'events.jsonl'}: no noise-scale estimate (train longer)")
    rows = []
    for e in evals:
        before = [v for s, v in ns if s <= e["step"]]
        rows.append({"iteration": e["step"], "progress": e["samples"], "metric": e["acc"],
                     "noise_scale": before[-1] if before else ns[0][1]})
    steps, syncs = [], []
    for f in sorted(run_dir.glob("rank*.jsonl")):
        for r in _jsonl(f):
            if r["step"] > interval_steps and r.get("full", True):
                steps.append(r["step_s"])
                syncs.append(max(0.0, r["step_s"] - r["compute_s"]))
    if not steps:
        raise ValueError(f"{run_dir}: no full step after the first {interval_steps}")
    return rows, statistics.median(steps), statistics.median(syncs)


def write_pollux(out: Path, sc: Scenario, runs: dict[int, Path], meta: dict[str, Any] | None = None) -> None:
    """Write validation-B.csv per run, scalability.csv and capture.json into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    n = sc.world_size
    unit = min(runs)
    scal = ["num_nodes,num_replicas,local_bsz,step_time,sync_time"]
    for B in sorted(runs):
        rows, step, sync = run_rows(runs[B], sc.interval_steps)
        lines = ["iteration,progress,metric,grad_sqr,grad_var"]
        lines += [f"{r['iteration']},{r['progress']},{r['metric']:.6g},1,{r['noise_scale'] / unit:.6g}" for r in rows]
        (out / f"validation-{B}.csv").write_text("\n".join(lines) + "\n")
        scal.append(f"{n},{n},{B // n},{step:.6g},{sync:.6g}")
    (out / "scalability.csv").write_text("\n".join(scal) + "\n")
    ref = min(sc.workers, key=lambda w: w.per_sample_ms)
    info = {"scenario": sc.name, "source": sc.source, "batches": sorted(runs), "ranks": n,
            "reference_worker": {"fixed_ms": ref.fixed_ms, "per_sample_ms": ref.per_sample_ms},
            "runs": {str(B): str(p) for B, p in sorted(runs.items())}, **(meta or {})}
    (out / CAPTURE_FILE).write_text(json.dumps(info, indent=1) + "\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", required=True, help="scenario TOML file or the name of a shipped one")
    p.add_argument("--batches", required=True, help="global batches, comma list (multiples of the ranks)")
    p.add_argument("--out", required=True, help="output directory (Pollux format)")
    p.add_argument("--max-time-s", type=float, default=None, help="training budget per batch (default: the scenario's)")
    p.add_argument("--no-netns", action="store_true", help="network-free variant (loopback, no shaping)")


def parse_batches(text: str) -> list[int]:
    try:
        bs = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        bs = []
    if not bs or bs[0] < 1:
        raise ValueError(f"--batches {text!r}: a comma list of integers >= 1")
    return bs


def capture(scenario: str, batches: Sequence[int], out: Path, max_time_s: float | None = None,
            no_netns: bool = False, python: str = sys.executable, log: Any = print) -> dict[int, Path]:
    from dynamix_hvd import workloads
    from dynamix_hvd.emulate.bench import network_mode, run_one
    from dynamix_hvd.emulate.scenario import override, parse_scenario

    sc = override(load_scenario(scenario), max_time_s=max_time_s)
    texts = {B: reference_toml(sc, B) for B in batches}       # every batch checked before any run
    workloads.load_data(workloads.get_workload(sc.workload).data)
    use_netns, why = network_mode(no_netns)
    runs: dict[int, Path] = {}
    for B, text in texts.items():
        f = out / "runs" / f"B{B}.toml"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
        ref = parse_scenario(text, source=str(f))
        run_dir = out / "runs" / f"B{B}"
        log(f"capture-trace: {sc.name} at B = {B} ({B // sc.world_size} per rank), {ref.max_time_s:.0f} s")
        rc, _ = run_one(ref, f, "static", run_dir, use_netns, "budget", python, log)
        if rc != 0:
            raise RuntimeError(f"capture-trace: the run at B = {B} failed (exit {rc}); see {run_dir}")
        runs[B] = run_dir
    write_pollux(out, sc, runs, {"network": "namespaces" if use_netns else f"network-free ({why})"})
    return runs


def run(args: argparse.Namespace) -> int:
    try:
        batches = parse_batches(args.batches)
        runs = capture(args.scenario, batches, Path(args.out), args.max_time_s, args.no_netns)
    except (ValueError, RuntimeError) as exc:     # ScenarioError is a ValueError
        print(f"dynamix capture-trace: {exc}")
        return 2
    print(f"wrote {args.out}: validation-{{{','.join(map(str, runs))}}}.csv, scalability.csv, {CAPTURE_FILE}")
    return 0


__all__ = ["reference_toml", "run_rows", "write_pollux", "capture", "parse_batches", "CAPTURE_FILE"]
