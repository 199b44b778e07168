"""The shipped policy's global logits over the states of its own DAgger aggregate (every 10th state):
mean, spread and argmax counts per workload, and the head's bias (session 59).

    python docs/results/s59/logits.py POLICY.zip AGGREGATE.npz
"""
import sys

import numpy as np
import torch

from dynamix_hvd.agent.imitate import load_samples, workload_of
from dynamix_hvd.controllers.policy.io import load_policy



def r2(xs) -> list[float]:
    return [round(float(v), 2) for v in xs]


pol, cfg = load_policy(sys.argv[1])
net = pol.mlp_extractor
samples = load_samples(sys.argv[2])[::10]
with torch.no_grad():
    logits = np.array([net.actor_logits(torch.as_tensor(s.obs[None]))[1][0].numpy() for s in samples])
work = np.array([workload_of(s) for s in samples])
print("global scales", cfg["action"]["global_scales"], "(the last: the pass)")
print("head bias", r2(net.global_pi.bias.detach().numpy()))
for w in sorted(set(work)):
    lw = logits[work == w]
    print(f"{w:12s} {lw.shape[0]:4d} states  mean {r2(lw.mean(0))}  std {r2(lw.std(0))}  "
          f"argmax counts {np.bincount(lw.argmax(1), minlength=lw.shape[1]).tolist()}")
