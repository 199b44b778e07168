"""Would knowing the workload's true efficiency at other batches tell when a departure pays?

Rolls ``causal_safe`` (the imitation expert, lookahead labels as in ``imitate.rollout``) out in
worlds drawn as the imitation recipe draws them and records, per decision, the observation the
policy sees (pooled over workers: mean / min / max), every global scale's regret, and four
features no job measures (``FEATURES``): the true statistical efficiency of 1.25 B and 0.8 B relative to the
running global batch B at the run's current metric level (samples per level from the measured
curves, as ``benchmarks/goodput_gap.py``'s ``trueE``), and their log error against goodput's
model ``(phi + B) / (phi + B')`` at the noise scale the job measures, and the true goodput ratio of
those batches over the coming interval (``oracle.causal_scores``: what the expert's one-step rule
reads). Then, as
``departure_auc.py``, the AUC of "a departure gains more than G" with each workload left out,
from the observation alone, the true-efficiency features, the true goodput ratios, and all, for "a larger global
batch pays" and "a smaller one pays" apart.

    python benchmarks/departure_oracle.py --worlds 24 --out runs/s37/oracle_states.npz
    python benchmarks/departure_oracle.py --worlds 40 --seed 1 --out runs/s37/oracle_states_s1.npz
    python benchmarks/departure_oracle.py --load runs/s37/oracle_states.npz,runs/s37/oracle_states_s1.npz
"""
from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import numpy as np

from dynamix_hvd.perfmodel import efficiency

_spec = importlib.util.spec_from_file_location("departure_auc", Path(__file__).resolve().parent / "departure_auc.py")
dauc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dauc)

FEATURES = ("log Etrue(1.25B)/Etrue(B)", "log Etrue(0.8B)/Etrue(B)", "error at 1.25B (true - model)", "error at 0.8B",
            "log true rate(1.25B)/rate(B)", "log true rate(0.8B)/rate(B)")


def true_log_rate(sim, B: float, ratios=(1.25, 0.8)) -> np.ndarray:
    """log of the causal oracle's one-interval score (true curves, the last interval's true speeds,
    equal-time splits: ``oracle.causal_scores``) of r x B over B's: the true goodput ratio."""
    from dynamix_hvd.replay.oracle import causal_scores
    sc = causal_scores(sim, np.array([B] + [r * B for r in ratios]))[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(sc[1:] / sc[0])
    return np.where(np.isfinite(out), out, np.nan)


def true_log_eff(sim, B: float, ratios=(1.25, 0.8)) -> np.ndarray:
    """log of the true efficiency of r x B over B at the current level
    (``ProgressModel.level_efficiency``); NaN where a batch does not reach the next level."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(sim.pm.level_efficiency(sim.P, B, [r * B for r in ratios]))


def model_log_eff(phi: float, B: float, ratios=(1.25, 0.8)) -> np.ndarray:
    """log of goodput's efficiency model of r x B over B (``perfmodel.efficiency``; 0 without a noise scale)."""
    return np.log([efficiency(r * B, B, phi) for r in ratios])


def collect(worlds: int, seed: int, horizon: int) -> dict[str, np.ndarray]:
    from dynamix_hvd.agent.imitate import TIE, draw_worlds, lookahead_label
    from dynamix_hvd.agent.replay_env import ReplayEnv, ReplayEnvConfig
    from dynamix_hvd.state import ObsConfig
    cfg = ReplayEnvConfig(history=0, obs=ObsConfig(frozenset({"system", "network"})))   # the recipe's observation and scales
    env = ReplayEnv(cfg)
    rng = np.random.default_rng([seed, 37])
    X, F, R, W = [], [], [], []
    t0 = time.perf_counter()
    for spec in draw_worlds(cfg, rng, worlds):
        obs, _ = env.reset(options={"spec": spec, "goodput_s": 1.0, "goodput_decisions": 201})
        n = env.sim.n
        while True:
            label, reg = lookahead_label(env, horizon, TIE)
            B = float(sum(env.plan.batch_sizes))
            te = true_log_eff(env.sim, B)
            me = model_log_eff(float(env.state.glob.noise_scale), B)
            X.append(dauc.pooled(obs[:n].astype(np.float32)))
            F.append(np.concatenate([te, te - me, true_log_rate(env.sim, B)]))
            R.append(reg)
            W.append(spec.workload)
            obs, _, term, trunc, _ = env.step(np.concatenate([np.full(cfg.n_max, cfg.action.k), [label]]))
            if term or trunc:
                break
        print(f"  {spec.label()}: {len(R)} states so far, {time.perf_counter() - t0:.0f}s", flush=True)
    return {"obs": np.array(X), "oracle": np.array(F), "regret": np.array(R), "workload": np.array(W, dtype=str)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--horizon", type=int, default=20)
    ap.add_argument("--out", default="", help="save the collected states (.npz, no pickle)")
    ap.add_argument("--load", default="", help="read states saved with --out (comma list) instead of collecting")
    ap.add_argument("--gain", default="0.01,0.03")
    ap.add_argument("--noop", type=int, default=2)
    args = ap.parse_args()
    if args.load:
        d = dauc.load_states(args.load)
    else:
        d = collect(args.worlds, args.seed, args.horizon)
        if args.out:
            np.savez_compressed(args.out, **d)
    reg = d["regret"].astype(float)
    keep = (np.ptp(reg, axis=1) > 0) & np.isfinite(d["oracle"]).all(1)
    obs, orc, reg, wl = d["obs"][keep], d["oracle"][keep], reg[keep], d["workload"][keep]
    obs = obs[:, obs.std(0) > 0]
    gains = {"up": reg[:, args.noop] - reg[:, args.noop + 1:].min(1),       # a larger global batch pays
             "down": reg[:, args.noop] - reg[:, :args.noop].min(1)}          # a smaller one pays
    print(f"{keep.sum()} states where the scales differ; workloads "
          + ", ".join(f"{w} {int((wl == w).sum())}" for w in np.unique(wl)))
    sets = {"observation": obs, "true efficiency": orc[:, :4], "true goodput ratio": orc[:, 4:],
            "observation + all true": np.concatenate([obs, orc], axis=1)}
    for G in (float(g) for g in args.gain.split(",")):
        for way, gain in gains.items():
            y = (gain > G).astype(int)
            for name, X in sets.items():
                parts = []
                for w in np.unique(wl):
                    m = wl == w
                    a = dauc.auc(dauc.fit_predict(X[~m], y[~m], X[m], 0), y[m])
                    parts.append(f"{w} {a:.3f} (pos {y[m].mean():.3f})")
                print(f"{way} by > {G:g}, logistic on {name}: AUC, workload left out: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
