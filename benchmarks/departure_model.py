"""Does goodput's own view of the job tell when departing from it pays?

Session 37 measured that the policy's observation, and even the workload's *true* efficiency,
rank "a larger global batch pays" at chance or inverted on a workload left out; session 38 found
paying departures more common and somewhat more recognisable once goodput continues after them.
What a residual policy on goodput has not been shown is goodput's own model: how flat its predicted
goodput is around its choice (its gain at 1.25 B and 0.8 B, the throughput and efficiency parts
apart), why it holds (the noise-scale estimate's stability, its relative error, the room it leaves
to grow), and the throughput curve it fitted against the one the job measured over the batches it
ran (fixed-cost share, fitted overlap, measured and predicted step-time elasticity). All of it is
measurable on a live job (the anchor holds it).

This rolls goodput (the policy's no-op) out in worlds drawn as the imitation recipe draws them,
labels each state with ``imitate.lookahead_label`` (goodput continuing after the priced scale,
``--continuation goodput`` as in session 38) and records, beside the pooled observation, those
model features (``MODEL_FEATURES``), read from a copy of the anchor that has observed the state.
Then the AUC of "a larger (smaller) global batch gains more than G" with each workload left out,
logistic, from the observation, the model features, and both.

    python benchmarks/departure_model.py --worlds 30 --seed 0 --every 2 --out runs/s40/model_states_r0.npz
    python benchmarks/departure_model.py --worlds 30 --seed 1 --every 2 --out runs/s40/model_states_r1.npz
    python benchmarks/departure_model.py --load runs/s40/model_states_r0.npz,runs/s40/model_states_r1.npz
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import math
import time
from pathlib import Path

import numpy as np

_spec = importlib.util.spec_from_file_location("departure_auc", Path(__file__).resolve().parent / "departure_auc.py")
dauc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dauc)

MODEL_FEATURES = (
    "log G(1.25B)/G(B)", "log G(0.8B)/G(B)",                 # goodput's predicted goodput ratios
    "log X(1.25B)/X(B)", "log X(0.8B)/X(B)",                 # their throughput parts (samples per second)
    "log E(1.25B)/E(B)",                                     # the efficiency part (noise-scale model)
    "stable", "rel_err", "log2 room/B",                      # why goodput holds
    "overlap", "fixed share", "exposed comm share",          # its fitted throughput model
    "measured elasticity", "predicted elasticity", "history span",   # step time vs B over the batches run
    "log B_goodput/B", "log best G over grid",               # where goodput wants to go, and how much it sees
)


def model_features(env) -> np.ndarray:
    """``MODEL_FEATURES`` of the env's current state, from a copy of its goodput anchor that has
    observed it (the anchor itself is left as it was)."""
    from dynamix_hvd.controllers.goodput import candidate_scales
    from dynamix_hvd.perfmodel import efficiency
    anc = copy.deepcopy(env.ctl.anchor)
    state = env.state
    anc.observe(state, env.ctl.last_scale)
    gp = anc.goodput
    B = float(sum(state.plan.batch_sizes))
    f = np.full(len(MODEL_FEATURES), np.nan)
    glob = state.glob
    f[5] = float(bool(glob.noise_scale_stable))
    f[6] = float(glob.noise_scale_rel_err) if math.isfinite(glob.noise_scale_rel_err) else 1.0
    room = float(glob.noise_scale_room)
    f[7] = float(np.clip(np.log2(room / B), -4, 4)) if room > 0 else -4.0
    fit = gp.last_fit
    step = np.array([w.step_s for w in state.workers], dtype=float)
    st = float(np.nanmedian(step)) if np.isfinite(step).any() else math.nan
    if fit:
        alpha, beta = np.asarray(fit["alpha"]), np.asarray(fit["beta"])
        b = np.asarray(state.plan.batch_sizes, dtype=float)
        tc = alpha + beta * b
        slow = int(np.argmax(tc))
        f[8] = float(fit["overlap"])
        f[9] = float(alpha[slow] / tc[slow]) if tc[slow] > 0 else 0.0
        f[10] = float(fit["comm"] / st) if st > 0 else 0.0
        # predicted throughput (no efficiency) and goodput of 1.25 B and 0.8 B against B's, shares kept
        shares = b / b.sum()
        phi = float(glob.noise_scale)
        b_ref = float(gp.base_batch * len(b))
        cands = [B, 1.25 * B, 0.8 * B]
        g, sp = gp.predict(alpha, beta, cands, fit["comm"], fit["overlap"], phi if phi > 0 else math.inf, b_ref, shares)
        x = g.copy()
        if phi > 0 and math.isfinite(phi):
            e = np.array([efficiency(c, b_ref, phi) for c in cands])
            x = g / e
            f[4] = math.log(e[1] / e[0])
        else:
            f[4] = 0.0
        f[0], f[1] = math.log(g[1] / g[0]), math.log(g[2] / g[0])
        f[2], f[3] = math.log(x[1] / x[0]), math.log(x[2] / x[0])
        # predicted elasticity of the step time: d log T / d log B at B
        T = np.asarray(cands) / x
        f[12] = math.log(T[1] / T[0]) / math.log(1.25)
        grid = [s * b_ref for s in candidate_scales(gp.scales, max(2.0, 4 * B / b_ref))]
        gg = gp.predict(alpha, beta, grid + [B], fit["comm"], fit["overlap"], phi if phi > 0 else math.inf, b_ref, shares)[0]
        f[15] = math.log(max(gg[:-1].max(), 1e-12) / gg[-1])
    else:
        f[[0, 1, 2, 3, 4, 8, 9, 10, 12, 15]] = 0.0
    hist = list(gp.sync_history)
    if len(hist) >= 2:
        c, ex, Bs = (np.array(v) for v in zip(*hist))
        lb, lt = np.log(Bs), np.log(c + ex)
        f[13] = float(lb.max() - lb.min())
        f[11] = float(np.polyfit(lb, lt, 1)[0]) if f[13] > 0.05 else 0.0
    else:
        f[13], f[11] = 0.0, 0.0
    f[14] = math.log(anc.B / B) if anc.B and B > 0 else 0.0
    return np.clip(np.nan_to_num(f, nan=0.0), -10, 10)


def collect(worlds: int, seed: int, horizon: int, continuation: str, every: int = 1) -> dict[str, np.ndarray]:
    from dynamix_hvd.agent.imitate import TIE, draw_worlds, lookahead_label
    from dynamix_hvd.agent.replay_env import ReplayEnv, ReplayEnvConfig
    from dynamix_hvd.state import ObsConfig
    cfg = ReplayEnvConfig(history=0, obs=ObsConfig(frozenset({"system", "network"})))   # the recipe's observation and scales
    env = ReplayEnv(cfg)
    rng = np.random.default_rng([seed, 40])
    X, M, R, W, L = [], [], [], [], []
    noop = np.concatenate([np.full(cfg.n_max, cfg.action.k), [cfg.action.noop_global]])
    t0 = time.perf_counter()
    for spec in draw_worlds(cfg, rng, worlds):
        obs, _ = env.reset(options={"spec": spec, "goodput_s": 1.0, "goodput_decisions": 201})
        n = env.sim.n
        for t in range(600):
            if t % every == 0:
                _, reg = lookahead_label(env, horizon, TIE, continuation)
                X.append(dauc.pooled(obs[:n].astype(np.float32)))
                M.append(model_features(env))
                R.append(reg)
                W.append(spec.workload)
                L.append(spec.label())
            obs, _, term, trunc, _ = env.step(noop)          # goodput's path: the states the learner mostly sees
            if term or trunc:
                break
        print(f"  {spec.label()}: {len(R)} states so far, {time.perf_counter() - t0:.0f}s", flush=True)
    return {"obs": np.array(X), "model": np.array(M), "regret": np.array(R), "workload": np.array(W, dtype=str),
            "world": np.array(L, dtype=str)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--horizon", type=int, default=20)
    ap.add_argument("--every", type=int, default=1, help="label every k-th state of goodput's path")
    ap.add_argument("--continuation", default="goodput", choices=("goodput", "causal"))
    ap.add_argument("--out", default="", help="save the collected states (.npz, no pickle)")
    ap.add_argument("--load", default="", help="read states saved with --out (comma list) instead of collecting")
    ap.add_argument("--gain", default="0.01,0.03")
    ap.add_argument("--noop", type=int, default=2)
    ap.add_argument("--hidden", default="0", help="classifiers: 0 = logistic, H = one tanh layer of H (comma list)")
    args = ap.parse_args()
    if args.load:
        d = dauc.load_states(args.load)
    else:
        d = collect(args.worlds, args.seed, args.horizon, args.continuation, args.every)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(args.out, **d)
    reg = d["regret"].astype(float)
    keep = np.ptp(reg, axis=1) > 0
    obs, mod, reg, wl = d["obs"][keep], d["model"][keep], reg[keep], d["workload"][keep]
    obs = obs[:, obs.std(0) > 0]
    mod = mod[:, mod.std(0) > 0]
    gains = {"up": reg[:, args.noop] - reg[:, args.noop + 1:].min(1),
             "down": reg[:, args.noop] - reg[:, :args.noop].min(1)}
    print(f"{keep.sum()} of {len(keep)} states where the scales differ; workloads "
          + ", ".join(f"{w} {int((wl == w).sum())}" for w in np.unique(wl)))
    sets = {"observation": obs, "goodput's model": mod, "both": np.concatenate([obs, mod], axis=1)}
    for G in (float(g) for g in args.gain.split(",")):
        for way, gain in gains.items():
            y = (gain > G).astype(int)
            for h in (int(x) for x in args.hidden.split(",")):
                for name, X in sets.items():
                    parts = []
                    for w in np.unique(wl):
                        m = wl == w
                        a = dauc.auc(dauc.fit_predict(X[~m], y[~m], X[m], h), y[m])
                        parts.append(f"{w} {a:.3f} (pos {y[m].mean():.3f})")
                    clf = "logistic" if h == 0 else f"mlp{h}"
                    print(f"{way} by > {G:g}, {clf} on {name}: AUC, workload left out: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
