"""Online PPO fine-tuning (``DynamixConfig(finetune=True)``): does it help, and what does it cost?

    .venv/bin/python benchmarks/bench_finetune.py [--scenario static_hetero --family small --workers 4]
        [--updates 60 --steps 32 --lr 1e-4 --ft-seeds 0,1,2 --eval-seeds 40] [--latency-workers 4,64,256]

1. Learning (simulator). The shipped policy is fine-tuned online by a ``PPOController(finetune=True)``
   on a stream of simulated episodes of one scenario (training seeds: even), exactly as on rank 0
   of a job: sampled actions, reward of ``controllers.live_reward.live_reward`` (the training reward
   with the live estimate of the oracle goodput), background PPO updates. The fine-tuned weights
   are then evaluated deterministically (``save_policy`` -> ``PPOController(policy=zip)``) on
   held-out odd seeds against the shipped policy and the proportional / goodput baselines, paired
   per seed. Simulated decisions are ~1 ms apart, so the loop waits for each update to finish
   (live, a decision interval is seconds and an update ~0.1 s).
2. Cost. Decision latency p50/p99 of ``decide`` with fine-tuning on, measured separately while no
   update runs and while a background update runs, the update duration, and the plain controller.
"""
from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dynamix_hvd.agent.rollout import evaluate_controller, factory
from dynamix_hvd.agent.sim import SimConfig
from dynamix_hvd.controllers import make_controller
from dynamix_hvd.agent.finetune_sim import finetune_in_sim
from dynamix_hvd.plan import Plan, PlanBounds
from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats


def finetune_stream(cfg: SimConfig, scenario: str, n: int, updates: int, steps: int, lr: float, epochs: int,
                    seed: int = 0, episodes: int | None = None) -> tuple[object, dict]:
    # support=False: the simulator's states are outside the replay-trained default's training support
    return finetune_in_sim(cfg, scenario, n, updates=updates, steps=steps, lr=lr, epochs=epochs, seed=seed,
                           episodes=episodes, support=False)


def stream_seeds(seed: int, episodes: int) -> list[int]:
    return [2 * (1000 * seed + ep) for ep in range(episodes)]


def _state(n: int, rng: np.random.Generator) -> ClusterState:
    ws = [WorkerStats(rank=r, batch_size=32, max_batch=256, compute_s=float(rng.uniform(0.01, 0.05)), step_s=0.08,
                      comm_s=0.03, allreduce_p50_s=0.02, nic_tx_Bps=1e8, nic_rx_Bps=1e8, link_capacity_Bps=1.25e9,
                      cpu_util=0.7, mem_headroom=0.5) for r in range(n)]
    return ClusterState(Plan.uniform(n, 32), ws, GlobalStats(progress=0.5, noise_scale=500.0, loss_trend=-0.01,
                                                             grad_var_trend=0.0, samples_per_s=400.0 * n))


def _pct(xs: list[float]) -> str:
    a = np.asarray(xs)
    return f"{np.percentile(a, 50):6.3f} {np.percentile(a, 99):7.3f} {a.max():7.3f}"


def latency(n: int, steps: int, repeats: int) -> dict[str, list[float]]:
    """decide() latency (ms): plain controller, fine-tuning idle, fine-tuning while an update runs."""
    rng = np.random.default_rng(0)
    bounds = PlanBounds(max_batch=(256,) * n)
    plain = make_controller("ppo", bounds, 32)
    ft = make_controller("ppo", bounds, 32, finetune=True, finetune_steps=steps)
    states = [_state(n, rng) for _ in range(16)]
    res: dict[str, list[float]] = {"plain": [], "idle": [], "updating": [], "update_s": []}
    for i in range(10):
        plain.decide(states[i % 16])
    for i in range(repeats):
        st = states[i % 16]
        t = time.perf_counter()
        plain.decide(st)
        res["plain"].append(1e3 * (time.perf_counter() - t))
    while len(res["updating"]) < repeats:
        st = states[len(res["idle"]) % 16]
        busy = ft.finetuner.updating
        t = time.perf_counter()
        ft.decide(st)
        dt = 1e3 * (time.perf_counter() - t)
        (res["updating"] if busy else res["idle"]).append(dt)
    ft.finetuner.wait()
    res["update_s"] = [1e3 * s for s in ft.finetuner.update_s]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="static_hetero")
    ap.add_argument("--family", default="small")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--ft-seeds", default="0,1,2", help="fine-tuning runs (training-episode streams)")
    ap.add_argument("--eval-seeds", type=int, default=40)
    ap.add_argument("--latency-workers", default="4,64,256")
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--skip-learning", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"python {platform.python_version()}, torch {torch.__version__}, 1 torch thread")

    if not args.skip_learning:
        cfg = SimConfig(model_family=args.family)
        sc, n = args.scenario, args.workers
        seeds = [2 * i + 1 for i in range(args.eval_seeds)]
        print(f"\n== learning: {sc}, family {args.family}, {n} workers; {args.updates} updates x {args.steps} "
              f"decisions, lr {args.lr}, {args.epochs} epochs; fine-tuning seeds {args.ft_seeds}")
        rows = {name: np.array([r.ret for r in evaluate_controller(factory(name), seeds, cfg, sc, n)])
                for name in ("ppo", "proportional", "goodput")}
        base = rows["ppo"]
        diffs, online, upd = [], [], []
        for fs in (int(x) for x in args.ft_seeds.split(",")):
            ctl, info = finetune_stream(cfg, sc, n, args.updates, args.steps, args.lr, args.epochs, fs)
            eps = info["episodes"]
            # the same training episodes with the shipped policy: greedy, and sampled without updates
            det = np.array([r.ret for r in evaluate_controller(factory("ppo"), stream_seeds(fs, eps), cfg, sc, n)])
            _, frozen = finetune_stream(cfg, sc, n, 0, 100_000, args.lr, args.epochs, fs, episodes=eps)
            with tempfile.TemporaryDirectory() as d:
                zip_path = ctl.save_policy(Path(d) / "finetuned.zip")
                r = np.array([x.ret for x in evaluate_controller(factory("ppo", policy=str(zip_path)), seeds, cfg,
                                                                 sc, n)])
            d = r - base
            diffs.append(d.mean())
            upd += info["update_s"]
            on = np.asarray(info["online_returns"])
            online.append((on.mean(), np.mean(frozen["online_returns"]), det.mean()))
            err = np.asarray(info["reward_est_err"])
            print(f"  seed {fs}: {eps} episodes, {info['wall_s']:.0f}s; held-out {r.mean():6.2f} vs shipped "
                  f"{base.mean():6.2f}: {d.mean():+5.2f} +- {d.std(ddof=1) / np.sqrt(d.size):.2f} (paired); "
                  f"online return while fine-tuning {on.mean():6.2f} (sampled, no updates {online[-1][1]:6.2f}; "
                  f"greedy shipped {det.mean():6.2f}); live reward - sim reward {err.mean():+.3f} (sd {err.std():.3f})",
                  flush=True)
        print(f"\nheld-out return, {len(seeds)} odd seeds, deterministic:")
        for name, r in rows.items():
            print(f"  {name:14s} {r.mean():7.2f} +- {r.std(ddof=1) / np.sqrt(r.size):.2f}")
        print(f"  fine-tuned     mean over {len(diffs)} fine-tuning runs: {base.mean() + np.mean(diffs):7.2f} "
              f"(vs shipped {np.mean(diffs):+.2f}; runs {', '.join(f'{x:+.2f}' for x in diffs)})")
        print(f"update duration: median {1e3 * np.median(upd):.0f} ms, p90 {1e3 * np.percentile(upd, 90):.0f} ms, "
              f"max {1e3 * np.max(upd):.0f} ms ({len(upd)} updates timed, the last <= 100 per run; {args.steps} "
              f"transitions x {args.epochs} epochs)")

    if args.skip_latency:
        return 0
    print("\n== decision latency (ms), decide() on a ClusterState; fine-tuning steps", args.steps)
    print("workers  controller             p50     p99     max")
    for n in (int(x) for x in args.latency_workers.split(",") if x):
        res = latency(n, args.steps, args.repeats)
        print(f"{n:7d}  plain ppo          {_pct(res['plain'])}")
        print(f"{n:7d}  finetune, idle     {_pct(res['idle'])}")
        print(f"{n:7d}  finetune, updating {_pct(res['updating'])}   ({len(res['updating'])} decisions during "
              f"{len(res['update_s'])} updates of {np.median(res['update_s']):.0f} ms median)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
