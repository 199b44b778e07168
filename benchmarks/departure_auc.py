"""Does the policy's observation tell when a departure from goodput pays?

Reads DAgger aggregates (``imitate.save_samples``: observations and each global scale's regret
under ``causal_safe``'s lookahead), keeps the states where some scale leads elsewhere than the
no-op, and fits a classifier of "a departure gains more than G" (the no-op's regret minus the
best other scale's, relative rate) on the observation pooled over workers (mean, min, max of every
column). Prints the held-out AUC, by world (30% of the worlds held out) and leaving each workload
out: 0.5 = the observation says nothing about when to depart, 1.0 = it tells exactly.

    python benchmarks/departure_auc.py runs/s37/t02_samples.npz,runs/s37/t1_samples.npz --gain 0.01,0.03
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from dynamix_hvd.agent.imitate import load_samples, workload_of


def pooled(obs: np.ndarray) -> np.ndarray:
    x = obs[obs[:, 0] > 0, 1:]
    return np.concatenate([x.mean(0), x.min(0), x.max(0)])


def auc(score: np.ndarray, y: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half); NaN with one class only."""
    pos, neg = score[y == 1], score[y == 0]
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    allv = np.concatenate([pos, neg])[order]
    ranks = np.empty(allv.size)
    i = 0
    while i < allv.size:                   # average ranks over ties
        j = i
        while j + 1 < allv.size and allv[j + 1] == allv[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    r = np.empty(allv.size)
    r[order] = ranks
    return float((r[:pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def fit_predict(Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, hidden: int, seed: int = 0) -> np.ndarray:
    torch.manual_seed(seed)
    mu, sd = Xtr.mean(0), Xtr.std(0) + 1e-6
    a, b = torch.as_tensor((Xtr - mu) / sd, dtype=torch.float32), torch.as_tensor((Xte - mu) / sd, dtype=torch.float32)
    net = (torch.nn.Sequential(torch.nn.Linear(a.shape[1], hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
           if hidden else torch.nn.Linear(a.shape[1], 1))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=1e-4)
    t = torch.as_tensor(ytr, dtype=torch.float32)
    w = torch.as_tensor(np.where(ytr == 1, 0.5 / max(ytr.mean(), 1e-3), 0.5 / max(1 - ytr.mean(), 1e-3)), dtype=torch.float32)
    for _ in range(300):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(net(a)[:, 0], t, weight=w)
        loss.backward()
        opt.step()
    with torch.no_grad():
        return net(b)[:, 0].numpy()


def load_states(paths: str) -> dict[str, np.ndarray]:
    """States saved by ``departure_oracle.py`` / ``departure_model.py`` ``--out`` (comma list of .npz,
    read without pickle), concatenated key by key."""
    parts = []
    for f in paths.split(","):
        with np.load(f, allow_pickle=False) as z:
            parts.append({k: z[k] for k in z.files})
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("samples", help="comma list of .npz aggregates")
    ap.add_argument("--gain", default="0.01,0.03", help="comma list of gains G (relative rate)")
    ap.add_argument("--noop", type=int, default=2, help="index of the no-op global scale")
    ap.add_argument("--hidden", default="0,64", help="classifiers: 0 = logistic regression, H = one tanh layer of H")
    args = ap.parse_args()
    S = [s for f in args.samples.split(",") for s in load_samples(f)]
    S = [s for s in S if np.ptp(s.regret) > 0]          # some scale leads elsewhere than the others
    X = np.stack([pooled(s.obs) for s in S])
    keep = X.std(0) > 0
    X = X[:, keep]
    reg = np.stack([s.regret for s in S]).astype(float)
    other = np.delete(reg, args.noop, axis=1).min(1)
    gain = reg[:, args.noop] - other
    wl = np.array([workload_of(s) for s in S])
    worlds = np.array([s.world for s in S])
    print(f"{len(S)} states where the scales differ, {X.shape[1]} pooled features; workloads "
          + ", ".join(f"{w} {int((wl == w).sum())}" for w in np.unique(wl)))
    rng = np.random.default_rng(0)
    uw = np.unique(worlds)
    test_w = set(rng.choice(uw, size=max(1, int(0.3 * uw.size)), replace=False))
    te = np.array([w in test_w for w in worlds])
    for G in (float(g) for g in args.gain.split(",")):
        y = (gain > G).astype(int)
        for h in (int(x) for x in args.hidden.split(",")):
            name = "logistic" if h == 0 else f"mlp{h}"
            parts = [f"worlds held out {auc(fit_predict(X[~te], y[~te], X[te], h), y[te]):.3f} (pos {y[te].mean():.2f})"]
            for w in np.unique(wl):
                m = wl == w
                parts.append(f"{w} {auc(fit_predict(X[~m], y[~m], X[m], h), y[m]):.3f} (pos {y[m].mean():.2f})")
            print(f"gain > {G:g}, {name}: AUC " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
