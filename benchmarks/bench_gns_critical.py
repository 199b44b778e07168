"""The gradient noise scale against the critical batch measured from steps to accuracy.

    .venv/bin/python benchmarks/bench_gns_critical.py [--workload mnist1d_cnn] [--seeds 1,2,3]

The goodput controller, and the PPO anchor and reward built on it, score a global batch B with
E(B) = (phi + B_ref) / (phi + B), where phi is the measured gradient noise scale B_simple. That
model predicts the optimizer steps needed to reach a target as steps(B) = S_min (1 + B_crit / B)
with B_crit = phi (McCandlish et al. 2018). This benchmark checks the prediction on the bench's
workload, in one process, with no emulated timing:

1. It trains with Adam (lr 0.01, the bench's setting) at several fixed global batches and records
   the steps to the target test accuracy, evaluated every 10 steps. It then fits
   S_min + S_min * B_crit / B to the steps by least squares in 1/B.
2. During the B = 64 runs (or the first --batches value without 64) it estimates B_simple every 25 steps. The estimator is the library's own
   (``dynamix_hvd.stats.gns_step_estimates``), fed with 4 equal shards of each batch, as 4 ranks
   would see them. It does this twice: on raw gradients, and on gradients preconditioned by Adam's
   second moment (sqrt(v_hat) + eps), as AdaptDL's AdamGradientNoiseScale does.

It prints the B_simple estimates and the fitted B_crit side by side. Close values mean E(B) ranks
global batches correctly on this workload.
"""
from __future__ import annotations

import argparse
import math
import statistics

import numpy as np
import torch
import torch.nn.functional as F

from dynamix_hvd import workloads
from dynamix_hvd.stats import gns_step_estimates


def _grads(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _sq(gs: list[torch.Tensor], pre: list[torch.Tensor] | None) -> float:
    if pre is None:
        return sum(float(g.pow(2).sum()) for g in gs)
    return sum(float((g / q).pow(2).sum()) for g, q in zip(gs, pre))


def _adam_preconditioner(opt: torch.optim.Adam, model: torch.nn.Module) -> list[torch.Tensor] | None:
    out = []
    beta2, eps = opt.param_groups[0]["betas"][1], opt.param_groups[0]["eps"]
    for p in model.parameters():
        st = opt.state.get(p, {})
        if not st or int(st.get("step", 0)) < 5:
            return None
        out.append(st["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** float(st["step"])) + eps)
    return out


def train(workload: str, B: int, seed: int, target: float, max_steps: int, probe: bool,
          shards: int = 4, probe_every: int = 25) -> tuple[int | None, dict[str, list[tuple[float, float]]]]:
    """Steps to ``target`` (None if not reached) and, with ``probe``, per-probe (S, G2) estimates."""
    model, data = workloads.build(workload, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(seed)
    n = len(data)
    perm, pos = torch.randperm(n, generator=gen), 0
    est: dict[str, list[tuple[float, float]]] = {"raw": [], "adam": []}
    for step in range(1, max_steps + 1):
        if pos + B > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos:pos + B]
        pos += B
        x, y = data.x_train[idx], data.y_train[idx]
        if probe and step % probe_every == 0:
            b = B // shards
            local = [_grads(model, x[i * b:(i + 1) * b], y[i * b:(i + 1) * b]) for i in range(shards)]
            mean = [sum(t) / shards for t in zip(*local)]
            for name, pre in (("raw", None), ("adam", _adam_preconditioner(opt, model))):
                if name == "adam" and pre is None:
                    continue
                a = sum(_sq(g, pre) for g in local) / shards
                est[name].append(gns_step_estimates(a, _sq(mean, pre), b * shards, shards))
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if step % 10 == 0 and workloads.accuracy(model, data.x_test, data.y_test) >= target:
            return step, est
    return None, est


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="mnist1d_cnn", choices=sorted(workloads.WORKLOADS))
    p.add_argument("--target", type=float, default=0.8)
    p.add_argument("--batches", default="32,64,128,256")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--max-steps", type=int, default=2000)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    batches = [int(b) for b in a.batches.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    steps: dict[int, list[int]] = {}
    probes: dict[str, list[tuple[float, float]]] = {"raw": [], "adam": []}
    probe_b = 64 if 64 in batches else batches[0]     # the batch whose runs estimate B_simple
    for B in batches:
        for s in seeds:
            hit, est = train(a.workload, B, s, a.target, a.max_steps, probe=(B == probe_b))
            if hit is not None:
                steps.setdefault(B, []).append(hit)
            for k, v in est.items():
                probes[k].extend(v)
        got = steps.get(B, [])
        print(f"B = {B:4d}: steps to {a.target} = {got} (median {statistics.median(got) if got else '-'})", flush=True)
    for name, v in probes.items():
        if v:
            s_sum, g_sum = sum(x for x, _ in v), sum(y for _, y in v)
            print(f"B_simple ({name} gradients, B = {probe_b} runs, {len(v)} probes, ratio of sums): "
                  f"{s_sum / g_sum:.0f}" if g_sum > 0 else f"B_simple ({name}): undefined (G2 sum <= 0)")
    bs = sorted(steps)
    if len(bs) >= 2:
        inv = np.array([1.0 / b for b in bs for _ in steps[b]])
        y = np.array([float(t) for b in bs for t in steps[b]])
        slope, s_min = np.polyfit(inv, y, 1)
        print(f"fit steps(B) = S_min (1 + B_crit / B): S_min = {s_min:.0f}, B_crit = {slope / s_min:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
