"""`dynamix train-policy`: train the shared-row PPO policy in the cluster simulator.

    dynamix train-policy --timesteps 300000 --seed 0 --out policy.zip

Writes ``policy.zip`` (stable-baselines3; the env/obs/action config travels inside it as the
policy's ``dynamix_config``), ``policy.json`` (training configuration, wall time, versions),
``policy_curve.csv`` and ``policy_curve.png`` (mean training-episode return vs timesteps).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from dynamix_hvd.controllers.policy.actions import ANCHORS, ActionConfig
from dynamix_hvd.agent.env import EnvConfig, make_env
from dynamix_hvd.agent.imitate import BALANCES, OBJECTIVES
from dynamix_hvd.agent.reward import RewardWeights
from dynamix_hvd.agent.run_files import save_run
from dynamix_hvd.agent.sim import SimConfig
from dynamix_hvd.replay.sim import GNS_MODELS
from dynamix_hvd.replay.throughput import SYNC_MODELS
from dynamix_hvd.replay.worlds import PerturbRange
from dynamix_hvd.state import GROUPS, ObsConfig

PPO_DEFAULTS: dict[str, Any] = dict(
    n_steps=128, batch_size=256, n_epochs=4, learning_rate=5e-4, gamma=0.9, gae_lambda=0.9,
    clip_range=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timesteps", type=int, default=300_000, help="environment steps (decisions)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="policy.zip", help="output zip (json/csv/png written next to it)")
    p.add_argument("--n-envs", type=int, default=8)
    p.add_argument("--n-max", type=int, default=64, help="padded worker rows in training observations")
    p.add_argument("--workers", default="2,64", help="min,max workers drawn per episode")
    p.add_argument("--family", default="any", choices=["any", "small", "large"], help="model-size family")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--disable", default="", help=f"comma list of feature groups to zero, from {list(GROUPS)}")
    p.add_argument("--enable", default="", help="comma list of single features kept although their group is "
                                                "disabled (e.g. mean_comm_frac with --disable network)")
    p.add_argument("--global-scales", default="0.8,1.0,1.25", help="global-batch multipliers ('1.0' = off)")
    p.add_argument("--anchor", default=ActionConfig().anchor, choices=ANCHORS,
                   help="what the action moves from: the goodput model's plan (default), the model-balanced "
                        "split of the policy's own target, or the current plan (first shipped policy)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    p.add_argument("--quiet", action="store_true")
    r = p.add_argument_group("replay world (--world replay; agent/replay_train.py)")
    r.add_argument("--world", default="sim", choices=["sim", "replay"],
                   help="sim: the goodput-formula simulator (agent/sim.py); replay: measured traces (replay/)")
    r.add_argument("--workloads", default="", help="replay: comma list of workloads (default: the shipped four)")
    r.add_argument("--traces", default="", help="replay: comma list of speed-trace families (default: all, + synthetic)")
    r.add_argument("--history", type=int, default=8, help="replay: per-worker history window (0 = no history features)")
    r.add_argument("--loss-penalty", type=float, default=0.0,
                   help="replay: extra cost of ending slower than goodput, x the shortfall (0 = plain return)")
    r.add_argument("--gns-model", default="run", choices=list(GNS_MODELS),
                   help="replay: the worlds' noise-scale model (replay.sim.GNS_MODELS; as `dynamix replay --gns-model`)")
    r.add_argument("--sync-model", default="rank", choices=list(SYNC_MODELS),
                   help="replay: the worlds' sync model (replay.throughput.SYNC_MODELS; as `dynamix replay --sync-model`)")
    r.add_argument("--warp-min", default=PerturbRange.warp_min, type=_range_arg("warp_min"), metavar="G",
                   help=f"replay: the perturbed worlds' lowest batch warp, the first exponent g of (B / B_0)^g on the "
                        f"samples a level needs (replay.worlds.PerturbRange; default {PerturbRange.warp_min}); lower "
                        "draws workloads whose large batches cost few more samples (session 77)")
    r.add_argument("--gns-sigma-max", default=PerturbRange.gns_sigma_max, type=_range_arg("gns_sigma_max"), metavar="X",
                   help=f"replay: the perturbed worlds' largest factor on the noise-scale measurement's spread "
                        f"(replay.worlds.PerturbRange; default {PerturbRange.gns_sigma_max}); higher draws workloads "
                        "whose estimate stays unstable longer (session 77)")
    r.add_argument("--loss-noise", default="", metavar="LO,HI", type=_loss_noise_arg,
                   help="replay: draw each world's loss-trend observation noise log-uniform in [LO, HI] (default: "
                        "off, the evaluation worlds' 0.005; live trends are steeper and noisier, session 45)")
    r.add_argument("--pass-hold", action="store_true",
                   help="replay: the policy's global departures pass the safety layer's hold on an unstable "
                        "noise-scale estimate (ActionConfig.pass_hold; its 1.5x-per-decision limit stays): the policy "
                        "learns when an unstable estimate may be acted on (the expert's continuation is not held either)")
    r.add_argument("--pass-action", action="store_true",
                   help="replay, with --pass-hold: one more global action, goodput's own global batch with the hold "
                        "passed (a second 1.0 at the end of the scales: ActionConfig.pass_global)")
    r.add_argument("--pass-only", action="store_true",
                   help="replay, with --pass-action: only the pass action passes the hold; the fixed global scales "
                        "stay held by it (ActionConfig.pass_only)")
    r.add_argument("--pass-head", action="store_true",
                   help="replay, imitate, with --pass-action: the pass is decided by a binary head of its own, in place "
                        "of the no-op the global head picks, fitted to where passing the hold costs no more than the "
                        "no-op's bonus (ActionConfig.pass_head; imitate.pass_targets)")
    r.add_argument("--no-curriculum", action="store_true", help="replay: sample pooled worlds uniformly")
    r.add_argument("--method", default="ppo", choices=["ppo", "imitate"],
                   help="replay: PPO on the progress reward, or DAgger imitation of causal_safe (agent/imitate.py)")
    r.add_argument("--dagger-iters", type=int, default=3, help="replay, imitate: DAgger iterations")
    r.add_argument("--worlds-per-iter", type=int, default=24, help="replay, imitate: worlds rolled out per iteration")
    r.add_argument("--epochs", type=int, default=20, help="replay, imitate: passes over the aggregate per iteration")
    r.add_argument("--samples", default="", help="replay, imitate: expert samples to start from (imitate.save_samples; "
                   "comma list; only those of --workloads are kept): every DAgger iteration then rolls the policy out")
    r.add_argument("--noop-bonus", type=float, default=0.01,
                   help="replay, imitate: a departure from goodput's choice must gain more than this (relative rate)")
    r.add_argument("--horizon", type=int, default=0,
                   help="replay, imitate: price each scale by that many further decisions of causal_safe "
                        "(imitate.lookahead_label; 0: the one-interval regret)")
    r.add_argument("--continuation", default="causal", choices=["causal", "goodput", "policy"],
                   help="replay, imitate, --horizon > 0: who decides the further decisions a scale is priced by: "
                        "causal_safe (the true curves), goodput (the no-op), or the policy being trained "
                        "(imitate.lookahead_label)")
    r.add_argument("--temperature", type=float, default=0.02,
                   help="replay, imitate: the policy is fitted to exp(-regret / T) over the scales (imitate.soft_targets); "
                        "small T = the expert's label")
    r.add_argument("--fit", default="soft", choices=OBJECTIVES,
                   help="replay, imitate: fit the global head to the soft targets exp(-regret / T) by cross-entropy, "
                        "or regress its logits on -regret / T so the policy acts on the least expected regret "
                        "(imitate.fit)")
    r.add_argument("--balance", default="decisions", choices=BALANCES,
                   help="replay, imitate: weigh every decision equally, or every training world (job) equally "
                        "whatever its number of decisions (imitate.world_weights)")
    r.add_argument("--save-samples", default="",
                   help="replay, imitate: write the final DAgger aggregate here (imitate.save_samples, .npz): "
                        "refits and ablations start from it with --samples and --dagger-iters 0")


def _range_arg(name: str):
    """A ``PerturbRange`` field's option, checked at parse time (argparse names the option in its error)."""
    def parse(text: str) -> float:
        try:
            return float(getattr(PerturbRange(**{name: text}), name))
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _loss_noise_arg(text: str) -> str:
    from dynamix_hvd.replay.worlds import parse_loss_noise
    try:
        parse_loss_noise(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def env_config_from_args(args: argparse.Namespace) -> EnvConfig:
    lo, hi = (int(x) for x in args.workers.split(","))
    scales = tuple(float(s) for s in args.global_scales.split(","))
    n_max = max(args.n_max, hi)
    return EnvConfig(sim=SimConfig(n_workers=(lo, hi), model_family=args.family),
                     obs=ObsConfig.from_lists(args.disable, args.enable),
                     action=ActionConfig(global_scales=scales, anchor=args.anchor),
                     reward=RewardWeights(), n_max=n_max)


def train(env_cfg: EnvConfig, timesteps: int, seed: int, out: Path, n_envs: int = 8, hidden: int = 64,
          threads: int = 1, verbose: bool = True, ppo_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train, save zip + json + curve; return the run's metadata."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    from dynamix_hvd.controllers.policy.net import SharedRowPolicy

    torch.set_num_threads(max(1, threads))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    venv = VecMonitor(DummyVecEnv([make_env(env_cfg, seed=seed * 1000 + i) for i in range(n_envs)]))
    hp = dict(PPO_DEFAULTS, **(ppo_kwargs or {}))
    dyn_cfg = env_cfg.to_dict()
    model = PPO(SharedRowPolicy, venv, seed=seed, verbose=0, device="cpu",
                policy_kwargs=dict(hidden=hidden, dynamix_config=dyn_cfg), **hp)
    curve: list[tuple[int, float, float, float]] = []
    t0 = time.perf_counter()

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            buf = self.model.ep_info_buffer
            if buf:
                rets = [e["r"] for e in list(buf)[-50:]]
                curve.append((self.num_timesteps, float(np.mean(rets)), float(np.std(rets)),
                              time.perf_counter() - t0))
                if verbose and len(curve) % 20 == 0:
                    print(f"  {self.num_timesteps:>8d} steps  mean return {curve[-1][1]:7.2f}  "
                          f"{curve[-1][3]:6.0f}s", flush=True)

    model.learn(total_timesteps=timesteps, callback=Curve())
    elapsed = time.perf_counter() - t0
    meta = save_run(model, out, curve, ["timesteps", "mean_return_last50", "std_return_last50", "wall_s"], {
        "timesteps": timesteps, "seed": seed, "n_envs": n_envs, "hidden": hidden, "threads": threads,
        "ppo": hp, "env": dyn_cfg, "wall_s": round(elapsed, 1),
        "final_mean_return_last50": curve[-1][1] if curve else None,
        "command": f"dynamix train-policy --timesteps {timesteps} --seed {seed} "
                   f"--anchor {env_cfg.action.anchor} --out {out.name}",
    }, lambda c, path, title: _plot_curve(c, path, title=title))
    venv.close()
    return meta


def _plot_curve(curve: list[tuple[int, float, float, float]], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if not curve:
        return
    c = np.asarray(curve)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(c[:, 0], c[:, 1], label="mean return (last 50 training episodes)")
    ax.fill_between(c[:, 0], c[:, 1] - c[:, 2], c[:, 1] + c[:, 2], alpha=0.2)
    ax.set_xlabel("timesteps (decisions)")
    ax.set_ylabel("episode return")
    ax.set_title(f"PPO learning curve: {title}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.world == "replay":
        return _run_replay(args)
    cfg = env_config_from_args(args)
    if not args.quiet:
        print(f"training {args.timesteps} steps, seed {args.seed}, workers {cfg.sim.n_workers}, "
              f"family {cfg.sim.model_family}, disabled {sorted(cfg.obs.disabled_groups)} -> {args.out}", flush=True)
    meta = train(cfg, args.timesteps, args.seed, Path(args.out), args.n_envs, args.hidden, args.threads,
                 verbose=not args.quiet)
    print(f"saved {args.out} in {meta['wall_s']:.0f}s; final mean return {meta['final_mean_return_last50']}")
    return 0


def _run_replay(args: argparse.Namespace) -> int:
    import sys
    from dynamix_hvd.agent.replay_train import config_from_args, train_replay
    if args.global_scales == "0.8,1.0,1.25":      # the sim default: the replay policies use REPLAY_SCALES
        args.global_scales = ""
    if args.workers == "2,64" or not args.workers:
        args.workers = "2,64"
    try:
        cfg = config_from_args(args)
    except ValueError as exc:        # a flag combination or a scale list the action config refuses
        print(f"dynamix train-policy: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"training in the replay world: {args.timesteps} steps, seed {args.seed}, workloads {cfg.workloads}, "
              f"anchor {cfg.action.anchor}, history {cfg.history}, disabled {sorted(cfg.obs.disabled_groups)}, "
              f"curriculum {cfg.curriculum} -> {args.out}", flush=True)
    if args.method == "imitate":
        from dynamix_hvd.agent.imitate import load_samples, train_imitation
        start = [s for f in args.samples.split(",") if f for s in load_samples(f)]
        meta = train_imitation(cfg, args.seed, Path(args.out), iters=args.dagger_iters,
                               worlds_per_iter=args.worlds_per_iter, epochs=args.epochs, hidden=args.hidden,
                               tie=args.noop_bonus, samples=start, horizon=args.horizon,
                               save_samples_to=args.save_samples or None, verbose=not args.quiet,
                               temperature=args.temperature, continuation=args.continuation, balance=args.balance,
                               objective=args.fit, command="dynamix " + " ".join(sys.argv[1:]))
        last = meta["dagger"][-1] if meta["dagger"] else "none (fitted to --samples)"
        print(f"saved {args.out} in {meta['wall_s']:.0f}s; DAgger {last}")
        return 0
    meta = train_replay(cfg, args.timesteps, args.seed, Path(args.out), args.n_envs, args.hidden, args.threads,
                        verbose=not args.quiet, command="dynamix " + " ".join(sys.argv[1:]))
    print(f"saved {args.out} in {meta['wall_s']:.0f}s; {meta['episodes']} episodes; time / goodput over the "
          f"last 50 training episodes {meta['final_time_over_goodput_last50']}")
    return 0
