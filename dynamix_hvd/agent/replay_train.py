"""PPO training in the replay world (``dynamix train-policy --world replay``).

    nice -n 15 dynamix train-policy --world replay --timesteps 60000 --seed 0 --out policy.zip \\
        [--workloads bert,cifar10,deepspeech2,ncf] [--anchor goodput|balanced] [--history 8|0] \\
        [--disable network,statistical] [--global-scales 1.0] [--no-curriculum]

Writes ``policy.zip`` (the existing stable-baselines3 save path; the replay env's configuration
travels inside it as the policy's ``dynamix_config``: observation, action, history window),
``policy.json`` (training configuration, wall time, curriculum pool summary, versions) and
``policy_curve.csv`` / ``.png`` (mean return and mean time / goodput's over the last 50 training
episodes vs timesteps). Seeds: PPO and the world pool are seeded by ``--seed``; training worlds use
sim seeds >= 1,000,000, evaluation (``dynamix eval-replay``) seeds below.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from dynamix_hvd.controllers.policy.actions import ActionConfig
from dynamix_hvd.agent.run_files import save_run
from dynamix_hvd.agent.replay_env import REPLAY_SCALES, ReplayEnvConfig, make_replay_env
from dynamix_hvd.replay.worlds import SHIPPED_WORKLOADS, TRACE_FAMILIES, PerturbRange, parse_loss_noise
from dynamix_hvd.state import ObsConfig

REPLAY_PPO: dict[str, Any] = dict(
    n_steps=64, batch_size=128, n_epochs=4, learning_rate=3e-4, gamma=0.98, gae_lambda=0.95,
    clip_range=0.2, ent_coef=0.005, vf_coef=0.5, max_grad_norm=0.5,
)


def config_from_args(args) -> ReplayEnvConfig:
    wl = tuple(w for w in args.workloads.split(",") if w) if args.workloads else SHIPPED_WORKLOADS
    tr = tuple(t for t in args.traces.split(",") if t) if args.traces else TRACE_FAMILIES
    scales = tuple(float(s) for s in args.global_scales.split(",")) if args.global_scales else REPLAY_SCALES
    if getattr(args, "pass_action", False):
        if not args.pass_hold:
            raise ValueError("--pass-action needs --pass-hold (the pass action is goodput's batch with the hold passed)")
        scales = scales + (1.0,)
    if getattr(args, "pass_only", False) and not getattr(args, "pass_action", False):
        raise ValueError("--pass-only needs --pass-action (only the pass action passes the hold)")
    if getattr(args, "pass_head", False):
        if not getattr(args, "pass_action", False):
            raise ValueError("--pass-head needs --pass-action (the head decides the pass action)")
        if getattr(args, "method", "imitate") != "imitate":
            raise ValueError("--pass-head needs --method imitate (the head is fitted to the expert's regrets; "
                             "PPO's action distribution has no term for it)")
    lo, hi = (int(x) for x in args.workers.split(","))
    return ReplayEnvConfig(workloads=wl, traces=tr, n_range=(lo, hi), curriculum=not args.no_curriculum,
                           action=ActionConfig(global_scales=scales, anchor=args.anchor,
                                                pass_hold=args.pass_hold,
                                                pass_only=getattr(args, "pass_only", False),
                                                pass_head=getattr(args, "pass_head", False)),
                           obs=ObsConfig.from_lists(args.disable, args.enable),
                           history=int(args.history), n_max=max(args.n_max, hi),
                           loss_penalty=float(args.loss_penalty), gns_model=args.gns_model,
                           loss_noise=parse_loss_noise(args.loss_noise),
                           sync_model=getattr(args, "sync_model", "rank"),
                           ranges=PerturbRange(getattr(args, "warp_min", PerturbRange.warp_min),
                                               getattr(args, "gns_sigma_max", PerturbRange.gns_sigma_max)))


def train_replay(cfg: ReplayEnvConfig, timesteps: int, seed: int, out: Path, n_envs: int = 8, hidden: int = 64,
                 threads: int = 1, verbose: bool = True, command: str = "") -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from dynamix_hvd.agent.curriculum import WorldPool
    from dynamix_hvd.controllers.policy.net import SharedRowPolicy

    torch.set_num_threads(max(1, threads))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pool = WorldPool(cfg.worlds, seed, curriculum=cfg.curriculum)
    venv = DummyVecEnv([make_replay_env(cfg, pool, seed=seed * 1000 + i) for i in range(n_envs)])
    dyn = cfg.to_dict()
    model = PPO(SharedRowPolicy, venv, seed=seed, verbose=0, device="cpu",
                policy_kwargs=dict(hidden=hidden, dynamix_config=dyn), **REPLAY_PPO)
    episodes: list[tuple[float, float]] = []      # (return, time / goodput's)
    curve: list[tuple[int, float, float, float]] = []
    t0 = time.perf_counter()
    ret = np.zeros(n_envs)

    class Track(BaseCallback):
        def _on_step(self) -> bool:
            ret[:] += self.locals["rewards"]
            for i, (d, info) in enumerate(zip(self.locals["dones"], self.locals["infos"])):
                if d:
                    episodes.append((float(ret[i]), float(info.get("ratio_to_goodput", np.nan))))
                    ret[i] = 0.0
            return True

        def _on_rollout_end(self) -> None:
            if episodes:
                last = np.array(episodes[-50:])
                curve.append((self.num_timesteps, float(last[:, 0].mean()), float(np.nanmean(last[:, 1])),
                              time.perf_counter() - t0))
                if verbose and len(curve) % 5 == 0:
                    print(f"  {self.num_timesteps:>7d} steps  {len(episodes):5d} episodes  mean return "
                          f"{curve[-1][1]:+.3f}  time/goodput {curve[-1][2]:.3f}  {curve[-1][3]:5.0f}s", flush=True)

    model.learn(total_timesteps=timesteps, callback=Track())
    elapsed = time.perf_counter() - t0
    meta = save_run(model, out, curve,
                    ["timesteps", "mean_return_last50", "mean_time_over_goodput_last50", "wall_s"],
                    {"world": "replay", "timesteps": timesteps, "seed": seed, "n_envs": n_envs, "hidden": hidden,
                     "threads": threads, "ppo": REPLAY_PPO, "env": dyn, "wall_s": round(elapsed, 1),
                     "episodes": len(episodes), "pool": pool.summary(),
                     "final_mean_return_last50": curve[-1][1] if curve else None,
                     "final_time_over_goodput_last50": curve[-1][2] if curve else None,
                     "command": command}, _plot)
    venv.close()
    return meta


def _plot(curve: list[tuple[int, float, float, float]], path: Path, title: str) -> None:
    """Mean return and mean time / goodput's (last 50 training episodes) vs timesteps."""
    if not curve:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    c = np.asarray(curve)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(c[:, 0], c[:, 2], label="time to target / goodput's (training worlds)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("timesteps (decisions)")
    ax.set_ylabel("time / goodput")
    ax.set_title(f"replay-world PPO: {title}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
