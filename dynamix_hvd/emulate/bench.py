"""``dynamix bench``: run several controllers on the same emulated scenario and seed, and
compare their wall-clock (training-clock) time to the target accuracy.

    dynamix bench --scenario hetero4x --controllers static,oracle,proportional,goodput --out runs/b

Each controller gets a fresh emulated cluster (namespaces + tc links, or the network-free
variant where namespaces are not permitted or with ``--no-netns``), one mpirun of
``dynamix_hvd.emulate.worker`` with one rank per scenario worker, and its own run directory
``OUT/<controller>/``. Then ``OUT/results.json`` and ``OUT/report.png`` are written:

    {"scenario": str, "target_accuracy": float,
     "controllers": {NAME: {"time_to_target_s": float|null, "final_accuracy": float,
                            "samples_per_s": float, "balance_efficiency": float, "decisions": int}}}

time_to_target_s  training-clock seconds until the first evaluation at or above the target
                  (evaluation pauses the clock); null when not reached within max_time_s
balance_efficiency mean over steps of  sum_i compute_i / (N * max_i compute_i)  (1 = no waiting)
decisions         number of plan changes the controller made
policy            (a learned policy only) how many of its decisions ended in each outcome of
                  ``controllers.ppo.POLICY_OUTCOMES`` (the decision log's ``policy`` field): whether
                  the policy departed from goodput's plan at all, or answered outside its support
With ``--repeats N`` each entry holds medians and the N runs under "repeats". Repeat k runs every
controller with the scenario's seed + k (``--seeds per-repeat``, the default: model initialisation
and sample order differ between repeats, so their medians average the evaluation noise, and the
controllers of one repeat stay paired); ``--seeds same`` repeats the scenario's seed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from dynamix_hvd.emulate.procs import kill_group
from dynamix_hvd.emulate.scenario import Scenario, ScenarioError, load_scenario, override
from dynamix_hvd.runlog import StepRecord, bench_run_dir, rank_logs, read_decisions, read_evals, read_summary
from dynamix_hvd.emulate.targets import final_accuracy, format_targets, targets_table

DEFAULT_CONTROLLERS = "static,oracle,proportional,goodput"
STARTUP_GRACE_S = 150.0   # mpirun + imports + data on a loaded 2-core host
LAUNCH_LOG = {"horovod": "mpirun.log", "ddp": "torchrun.log"}   # engine -> the launcher's output file
LABEL_SEP = "#"           # SPEC#LABEL: the same controller spec run again under another name (A/A)
AUTOTUNE = "+autotune"    # SPEC+autotune[#LABEL]: the same controller with Horovod's autotuner on


def controller_spec(name: str) -> str:
    """The worker's controller spec of a bench entry: ``proportional#twin`` -> ``proportional``,
    ``static+autotune`` -> ``static``."""
    spec = name.partition(LABEL_SEP)[0]
    return spec[:-len(AUTOTUNE)] if spec.endswith(AUTOTUNE) else spec


def autotuned(name: str) -> bool:
    """Whether a bench entry runs with Horovod's autotuner (``HOROVOD_AUTOTUNE=1``: Bayesian
    optimisation of the tensor-fusion threshold, the cycle time, response caching and hierarchical
    collectives; the baseline "Horovod autotune" of the README)."""
    return name.partition(LABEL_SEP)[0].endswith(AUTOTUNE)


def run_order(names: list[str], rep: int) -> list[str]:
    """Repeat ``rep``'s order of the controllers: rotated by one per repeat, so that no controller
    always runs right after the same other one (the host drifts by a few percent between runs:
    session 25 measured 0.96-1.04x per-step time between two runs of one plan, seed and trajectory)."""
    k = rep % len(names) if names else 0
    return names[k:] + names[:k]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", required=True, help="scenario TOML file or the name of a shipped one")
    p.add_argument("--controllers", default=DEFAULT_CONTROLLERS, help="comma-separated controller specs: NAME, oracle@B (fixed global batch B), "
                   "NAME:fixed (no early decisions, for A/B runs), ppo=PATH (a policy file), ppo?OPTS or ppo=PATH?OPTS (the PPO controller's options as dynamix replay takes them: refute=K, warmup=K, passguard=on, trust=X, margin=X, support=off, fallback=NAME, joined by &); SPEC#LABEL runs SPEC again under another name "
                   "(proportional,proportional#twin: an A/A pair, the bench's own noise floor); SPEC+autotune runs SPEC with "
                   "Horovod's autotuner on (HOROVOD_AUTOTUNE=1; static+autotune is the baseline 'Horovod autotune')")
    p.add_argument("--out", required=True, help="output directory (results.json, report.png, one dir per run)")
    p.add_argument("--no-netns", action="store_true", help="network-free variant: all ranks on loopback")
    p.add_argument("--max-time-s", type=float, default=None, help="override the scenario's training budget")
    p.add_argument("--until", choices=("target", "budget"), default="budget",
                   help="stop each run at the target accuracy or train the whole budget (default)")
    p.add_argument("--repeats", type=int, default=1,
                   help="run the controller list this many times, interleaved; report medians")
    p.add_argument("--seeds", choices=("per-repeat", "same"), default="per-repeat",
                   help="per-repeat (default): repeat k runs every controller with the scenario's seed + k "
                        "(model initialisation, sample order), so repeats are independent and paired; "
                        "same: every repeat with the scenario's seed (only the host's timing differs)")
    p.add_argument("--python", default=sys.executable, help="interpreter for the ranks")
    p.add_argument("--engine", choices=tuple(LAUNCH_LOG), default="horovod",
                   help="horovod: Horovod workers under mpirun; ddp: DistributedDataParallel workers, one torchrun per rank")


# ---- metrics from one run directory ------------------------------------------------------
def balance_efficiency(logs: list[list[StepRecord]]) -> float:
    """Mean over steps of sum_i c_i / (N max_i c_i), c_i = rank i's compute seconds."""
    if not logs or not all(logs):
        return float("nan")
    n = min(len(lg) for lg in logs)
    c = np.array([[lg[k].compute_s for k in range(n)] for lg in logs])  # (ranks, steps)
    mx = c.max(axis=0)
    ok = mx > 0
    return float(np.mean(c[:, ok].mean(axis=0) / mx[ok])) if ok.any() else float("nan")


def plan_changes(run_dir: Path) -> int:
    """The last decided plan's version (0: the plan never changed, or no decision records)."""
    return max((rec.next_plan.version for rec in read_decisions(run_dir / "events.jsonl")), default=0)


def policy_outcomes(run_dir: Path) -> dict[str, int]:
    """How many decisions of a run ended in each outcome of a learned policy's choice (empty for
    a controller without a policy)."""
    counts = Counter(rec.policy for rec in read_decisions(run_dir / "events.jsonl") if rec.policy is not None)
    return dict(sorted(counts.items()))


def run_metrics(run_dir: Path) -> dict[str, Any]:
    """The results.json entry of one run, plus extra figures (train_time_s, steps, ...)."""
    s = read_summary(run_dir)
    evals = read_evals(run_dir / "evals.jsonl")
    return {"time_to_target_s": s.time_to_target_s,
            # one evaluation moves by 1-2 points: the mean of the last five (targets.LAST_K)
            "final_accuracy": final_accuracy(evals) if evals else s.final_accuracy,
            "final_accuracy_last": s.final_accuracy,
            "samples_per_s": s.samples_per_s, "balance_efficiency": balance_efficiency(rank_logs(run_dir)),
            "decisions": plan_changes(run_dir), "train_time_s": s.train_time_s, "steps": s.steps,
            "wall_s": s.wall_s, "final_plan": s.final_plan, **_policy_entry(policy_outcomes(run_dir))}


def _policy_entry(counts: dict[str, int]) -> dict[str, Any]:
    return {"policy": counts} if counts else {}


# ---- running ----------------------------------------------------------------------------------
def network_mode(no_netns: bool) -> tuple[bool, str]:
    """(use namespaces?, why not)"""
    if no_netns:
        return False, "--no-netns given"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return False, "iproute2 (ip, tc) not installed"
    from dynamix_hvd.emulate.netns import netns_available

    return netns_available()


def run_one(sc: Scenario, scenario_file: Path, controller: str, run_dir: Path, use_netns: bool,
            until: str, python: str, log: Any = print, engine: str = "horovod",
            seed: int | None = None, autotune: bool = False) -> tuple[int, str]:
    """One job of the worker (mpirun, or one torchrun per rank for the ddp engine); returns
    (exit code, the command line). ``autotune``: Horovod's autotuner on, its samples logged to
    ``run_dir/autotune.csv``."""
    from dynamix_hvd.emulate.netns import Cluster, mpmd_command, netem_available
    from dynamix_hvd.emulate.worker import LINK_ENV

    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    repo = str(Path(__file__).resolve().parents[2])
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH", "")])),
           "HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi", "OMP_NUM_THREADS": "1",
           "HOROVOD_STALL_CHECK_TIME_SECONDS": "30"}
    # the controllers' network view: the collector watches the rank's emulated link, and the PMPI
    # library records every allreduce (bytes, duration) in each rank
    from dynamix_hvd.emulate.netns import RANK_DEV
    env["DYNAMIX_IFACES"] = RANK_DEV if use_netns else "lo"
    if autotune:
        if engine != "horovod":
            raise ValueError(f"{AUTOTUNE} is Horovod's autotuner; engine {engine!r} has none")
        env.update({"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": str(run_dir / "autotune.csv")})
    try:
        from dynamix_hvd.launch import preload_path
        env["LD_PRELOAD"] = str(preload_path())
    except FileNotFoundError as exc:
        log(f"  warning: {exc}; allreduce timings will be missing")
    worker = [python, "-m", "dynamix_hvd.emulate.worker", "--scenario", str(scenario_file),
              "--controller", controller, "--run-dir", str(run_dir), "--max-time-s", str(sc.max_time_s),
              "--until", until, "--engine", engine]
    if seed is not None:
        worker += ["--seed", str(seed)]
    netem = use_netns and netem_available()
    if not netem:
        worker.append("--emulate-latency")
    timeout = sc.max_time_s * 2.5 + STARTUP_GRACE_S
    cluster = Cluster([(w.bandwidth_mbit, w.latency_ms) for w in sc.workers]) if use_netns else None
    with open(run_dir / LAUNCH_LOG[engine], "w") as out:
        if cluster is not None:
            cluster.__enter__()
        try:
            if cluster is not None:
                env.update({LINK_ENV.format(rank=r): lk.to_str() for r, lk in enumerate(cluster.links)})
            if engine == "ddp":
                from dynamix_hvd.emulate import torchrun

                cmds = torchrun.node_commands(cluster, python, worker[2:], sc.world_size)
                (run_dir / "command.txt").write_text("".join(" ".join(c) + "\n" for c in cmds))
                rc = torchrun.run_nodes(cmds, torchrun.node_env(cluster, env), out, timeout, log)
                return rc, " ".join(cmds[0])
            cmd, full_env = mpmd_command(cluster, [worker] * sc.world_size, env)
            (run_dir / "command.txt").write_text(" ".join(cmd) + "\n")
            p = subprocess.Popen(cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log(f"  {controller}: timed out after {timeout:.0f} s; killing the job")
                kill_group(p)
                rc = 124
            except BaseException:
                kill_group(p)
                raise
        finally:
            if cluster is not None:
                cluster.__exit__(None, None, None)
    return rc, " ".join(cmd)


def format_table(results: dict[str, Any]) -> str:
    rows = [("controller", "time_to_target_s", "vs static", "final_acc", "samples/s", "balance_eff", "decisions")]
    ctl = results["controllers"]
    base = (ctl.get("static") or {}).get("time_to_target_s")
    for name, m in ctl.items():
        if "error" in m:
            rows.append((name, "FAILED", "", "", "", "", m["error"][:40]))
            continue
        ttt = m["time_to_target_s"]
        rel = f"{ttt / base:.2f}x" if ttt is not None and base else "-"
        rows.append((name, f"{ttt:.1f}" if ttt is not None else "not reached", rel, f"{m['final_accuracy']:.3f}",
                     f"{m['samples_per_s']:.0f}", f"{m['balance_efficiency']:.2f}", str(m["decisions"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    for name, m in ctl.items():
        if m.get("policy"):
            lines.append(format_policy(name, m["policy"], len(m.get("repeats", [m]))))
    return "\n".join(lines)


def format_policy(name: str, counts: dict[str, int], repeats: int) -> str:
    """One line: what became of a learned policy's choice over its decisions (all repeats)."""
    n = sum(counts.values())
    parts = ", ".join(f"{k} {v} ({v / n:.0%})" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{name}: the policy's choice at its {n} decisions ({repeats} run{'s' * (repeats != 1)}): {parts}"


def combine(ms: list[dict[str, Any]]) -> dict[str, Any]:
    """One controller's entry from its repeats: medians (time to target: median of the repeats,
    null when most did not reach it), plus the per-repeat entries under "repeats"."""
    ok = [m for m in ms if "error" not in m]
    if not ok:
        return ms[0]
    if len(ms) == 1:
        return ok[0]
    out = dict(ok[0])
    ttt = [m["time_to_target_s"] for m in ok]
    reached = sorted(t for t in ttt if t is not None)
    out["time_to_target_s"] = float(np.median(reached)) if 2 * len(reached) > len(ttt) else None
    for k in ("final_accuracy", "samples_per_s", "balance_efficiency", "train_time_s", "wall_s"):
        out[k] = float(np.median([m[k] for m in ok]))
    out["decisions"] = int(np.median([m["decisions"] for m in ok]))
    total: Counter[str] = Counter()
    for m in ok:                     # the policy's outcomes summed over the repeats
        total.update(m.get("policy", {}))
    out.update(_policy_entry(dict(sorted(total.items()))))
    out["final_accuracy_last"] = float(np.median([m.get("final_accuracy_last", m["final_accuracy"]) for m in ok]))
    out["repeats"] = ms
    return out


def bench(scenario: str, controllers: list[str], out: Path, no_netns: bool = False,
          max_time_s: float | None = None, until: str = "budget", python: str = sys.executable,
          log: Any = print, repeats: int = 1, engine: str = "horovod",
          seeds: str = "per-repeat") -> dict[str, Any]:
    sc = override(load_scenario(scenario), max_time_s=max_time_s)
    out.mkdir(parents=True, exist_ok=True)
    scenario_file = out / "scenario.toml"
    src = Path(sc.source) if sc.source else None
    if src and src.exists():
        shutil.copyfile(src, scenario_file)   # the record; the workers read the original (speed_trace
        scenario_file = src.resolve()          # paths are relative to it)
    from dynamix_hvd import workloads  # generate and cache the data once, before the ranks start

    workloads.load_data(workloads.get_workload(sc.workload).data)
    use_netns, why = network_mode(no_netns)
    if use_netns:
        from dynamix_hvd.emulate.netns import netem_available

        net = "netns+tc " + ("netem (bandwidth+latency)" if netem_available() else
                             "tbf (bandwidth; sch_netem missing, latency emulated in the worker)")
    else:
        net = f"network-free (loopback TCP, no link shaping): {why}"
    log(f"dynamix bench: engine {engine}, scenario {sc.name} ({sc.world_size} ranks, {sc.workload}, target "
        f"{sc.target_accuracy}, budget {sc.max_time_s:.0f} s, until {until}); network: {net}")
    results: dict[str, Any] = {"scenario": sc.name, "target_accuracy": sc.target_accuracy, "controllers": {},
                               "network": net, "until": until, "max_time_s": sc.max_time_s,
                               "world_size": sc.world_size, "workload": sc.workload, "repeats": repeats,
                               "engine": engine,
                               "seeds": [sc.seed + (rep if seeds == "per-repeat" else 0) for rep in range(repeats)]}
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in controllers}
    for rep in range(repeats):               # interleaved, so slow drifts of the host hit all alike
        seed = results["seeds"][rep]         # the same for every controller of a repeat (paired)
        for name in run_order(list(controllers), rep):
            t0 = time.time()
            run_dir = bench_run_dir(out, name, rep)
            rc, cmd = run_one(sc, scenario_file, controller_spec(name), run_dir, use_netns, until, python, log, engine,
                              seed=seed if seed != sc.seed else None, autotune=autotuned(name))
            tag = name if repeats == 1 else f"{name} #{rep + 1}"
            if rc == 0 and (run_dir / "summary.json").exists():
                m = run_metrics(run_dir)
                runs[name].append(m)
                ttt = m["time_to_target_s"]
                log(f"  {tag:<13} time to target {('%.1f s' % ttt) if ttt is not None else 'not reached':>12}  "
                    f"final acc {m['final_accuracy']:.3f}  {m['samples_per_s']:.0f} samples/s  "
                    f"balance {m['balance_efficiency']:.2f}  plan {m['final_plan']}  ({time.time() - t0:.0f} s wall)")
            else:
                launch_log = run_dir / LAUNCH_LOG[engine]
                tail = launch_log.read_text()[-1500:] if launch_log.exists() else ""
                runs[name].append({"error": f"exit code {rc}", "log_tail": tail})
                log(f"  {tag}: FAILED (exit {rc}); see {launch_log}\n{tail}")
            results["controllers"] = {n: combine(r) for n, r in runs.items() if r}
            results["accuracy_targets"] = targets_table(
                {n: [read_evals(bench_run_dir(out, n, k) / "evals.jsonl") for k in range(len(r))]
                 for n, r in runs.items() if r})
            (out / "results.json").write_text(json.dumps(_clean(results), indent=1))
    try:
        from dynamix_hvd.report import plot_bench

        plot_bench(out)
    except Exception as exc:  # noqa: BLE001 - the figures are a convenience; results.json stands
        log(f"report.png not written: {exc}")
    return results


def _clean(o: Any) -> Any:
    """NaN -> null so results.json is strict JSON."""
    if isinstance(o, float) and o != o:
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def run(args: argparse.Namespace) -> int:
    names = [c.strip() for c in args.controllers.split(",") if c.strip()]
    from dynamix_hvd.controllers import REGISTRY

    from dynamix_hvd.emulate.worker import parse_controller

    unknown = []
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        print(f"dynamix bench: controller(s) {twice} given twice; name the second SPEC{LABEL_SEP}LABEL "
              f"(e.g. {twice[0]}{LABEL_SEP}twin) for an A/A pair", file=sys.stderr)
        return 2
    for n in names:
        _, sep, label = n.partition(LABEL_SEP)
        spec = controller_spec(n)
        if autotuned(n) and args.engine != "horovod":
            print(f"dynamix bench: controller {n!r}: {AUTOTUNE} is Horovod's autotuner; the {args.engine} "
                  "engine has none", file=sys.stderr)
            return 2
        if sep and (not label or not label.replace("_", "").replace("-", "").isalnum()):
            print(f"dynamix bench: controller {n!r}: the label after {LABEL_SEP!r} must be letters, digits, "
                  "'-' or '_'", file=sys.stderr)
            return 2
        try:
            parsed = parse_controller(spec)
            if parsed.name not in REGISTRY:
                unknown.append(n)
            if parsed.policy is not None and not Path(parsed.policy).is_file():
                raise ValueError(f"controller {n!r}: policy file {parsed.policy} not found")
        except ValueError as exc:
            print(f"dynamix bench: {exc}", file=sys.stderr)
            return 2
    if unknown:
        print(f"dynamix bench: unknown controller(s) {unknown}; choose from {sorted(REGISTRY)}", file=sys.stderr)
        return 2
    try:
        results = bench(args.scenario, names, Path(args.out), args.no_netns, args.max_time_s, args.until,
                        args.python, repeats=max(1, args.repeats), engine=args.engine, seeds=args.seeds)
    except ScenarioError as exc:
        print(f"dynamix bench: {exc}", file=sys.stderr)
        return 2
    print()
    print(format_table(results))
    print()
    print(format_targets(results["accuracy_targets"]))
    print(f"\nwrote {Path(args.out) / 'results.json'} and {Path(args.out) / 'report.png'}")
    return 0 if all("error" not in m for m in results["controllers"].values()) else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="dynamix bench")
    add_arguments(p)
    sys.exit(run(p.parse_args()))
