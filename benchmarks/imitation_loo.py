"""Leave-one-workload-out imitation of causal_safe (agent/imitate.py), offline and as policy files.

    python benchmarks/imitation_loo.py --collect 40 --collect-seed 1 --save-samples S.npz   # expert roll-outs
    python benchmarks/imitation_loo.py --samples S1.npz,S2.npz --disable system,network \\
        --epochs 30 --out-dir runs/imit_stat

For every shipped workload W, a policy is fitted (from scratch, ``imitate.fit``) to the expert's
samples of the *other* workloads, and one to all of them. Printed per held-out workload: the mean
one-decision regret (``imitate.expert_label``: the relative loss of rate of progress against the
best global scale by the causal oracle's score) of the policy's deterministic choice, of the
no-op (goodput's own choice) and the share of decisions the policy departs from the no-op. The
policies are written as ``OUT/loo_W.zip`` and ``OUT/all.zip`` for ``dynamix eval-replay --policy
imit=OUT/all.zip --loo W=OUT/loo_W.zip ...`` (time to target in held-out worlds).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from dynamix_hvd.agent.imitate import (Trainer, accuracy, draw_worlds, load_samples, rollout, save_samples,
                                       with_noop_bonus, with_observation, workload_of)
from dynamix_hvd.agent.replay_env import ReplayEnv, ReplayEnvConfig
from dynamix_hvd.replay.worlds import SHIPPED_WORKLOADS
from dynamix_hvd.state import ObsConfig


def regrets(policy, samples, noop: int) -> tuple[float, float, float]:
    net = policy.mlp_extractor
    pred = np.array([net.act_rows(s.obs[:, 1:])[1] for s in samples])
    R = np.stack([s.regret for s in samples])
    return float(R[np.arange(len(samples)), pred].mean()), float(R[:, noop].mean()), float((pred != noop).mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", default="", help="comma list of sample files (imitate.save_samples)")
    ap.add_argument("--collect", type=int, default=0, help="roll the expert out in this many new worlds")
    ap.add_argument("--collect-seed", type=int, default=1)
    ap.add_argument("--save-samples", default="", help="write the collected samples here")
    ap.add_argument("--disable", default="system,network", help="feature groups zeroed ('' = none)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--noop-bonus", type=float, default=0.0,
                    help="extra no-op bonus on top of the labelling's (imitate.with_noop_bonus)")
    ap.add_argument("--only-all", action="store_true", help="fit only the policy on all workloads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default="", help="write loo_W.zip and all.zip here")
    args = ap.parse_args()
    cfg = ReplayEnvConfig(history=0, obs=ObsConfig(frozenset(g for g in args.disable.split(",") if g)))
    samples = [s for f in args.samples.split(",") if f for s in load_samples(f)]
    if args.collect:
        t0 = time.perf_counter()
        env = ReplayEnv(ReplayEnvConfig(history=0))       # full observation; ablations zero columns later
        new = []
        for spec in draw_worlds(env.cfg, np.random.default_rng(args.collect_seed), args.collect):
            s, T, reached = rollout(env, spec)
            new.extend(s)
            print(f"{spec.label()}: {len(s)} decisions, {T:.1f} s, reached {reached}", flush=True)
        print(f"collected {len(new)} samples in {time.perf_counter() - t0:.0f} s")
        if args.save_samples:
            save_samples(args.save_samples, new)
        samples.extend(new)
    if not samples:
        ap.error("no samples: give --samples or --collect")
    samples = with_noop_bonus(with_observation(samples, cfg), args.noop_bonus, cfg.action.noop_global)
    wls = [w for w in SHIPPED_WORKLOADS if any(workload_of(s) == w for s in samples)]
    print(f"{len(samples)} samples: " + ", ".join(f"{w} {sum(workload_of(s) == w for s in samples)}" for w in wls)
          + f"; disabled {sorted(cfg.obs.disabled_groups)}")
    print("| held out | train: policy regret | train: no-op regret | test: policy regret | test: no-op regret "
          "| test: departures | test regret / no-op |")
    print("|---|---|---|---|---|---|---|")
    tr = Trainer(cfg, args.seed, meta={"from": "benchmarks/imitation_loo.py", "disable": args.disable})
    for held in (["all"] if args.only_all else wls + ["all"]):
        train = [s for s in samples if workload_of(s) != held]
        test = [s for s in samples if workload_of(s) == held]
        t0 = time.perf_counter()
        losses = tr.fit(train, args.epochs, args.seed)
        a = regrets(tr.policy, train, cfg.action.noop_global)
        if test:
            b = regrets(tr.policy, test, cfg.action.noop_global)
            print(f"| {held} | {a[0]:.4f} | {a[1]:.4f} | {b[0]:.4f} | {b[1]:.4f} | {b[2]:.2f} | {b[0] / b[1]:.2f} |",
                  flush=True)
        else:
            print(f"| (none: all four) | {a[0]:.4f} | {a[1]:.4f} | | | | |", flush=True)
        if args.out_dir:
            name = "all" if held == "all" else f"loo_{held}"
            tr.save(Path(args.out_dir) / f"{name}.zip", [(len(train), losses[-1], accuracy(tr.policy, train),
                                                          time.perf_counter() - t0)],
                    {"world": "replay", "method": "imitate (behaviour cloning of causal_safe's roll-outs)",
                     "held_out": None if held == "all" else held, "samples": len(train), "epochs": args.epochs,
                     "command": "python benchmarks/imitation_loo.py " + " ".join(
                         f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v not in ("", 0))})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
