"""Session 80: a pass head fitted on top of a trained policy whose every other weight is kept (an experiment script,
not a `train-policy` option). The base is a draw of the default's recipe (no pass head); the new file is the base's
network and configuration with `action.pass_head` set and a pass head (`RowNet.pass_pi`) fitted alone, by the same
binary cross-entropy `train-policy --pass-head` uses (`imitate.fit`: the other weights frozen, so their terms are
constants), on the base's own final DAgger aggregate (`--save-samples`). In place of the no-op its global head picks,
the new policy passes the noise-scale hold where the head's logit is > 0; every other choice is the base's.
    .venv/bin/python docs/results/s80/frozen_pass.py BASE.zip AGGREGATE.npz OUT.zip
then `dynamix policy-support OUT.zip --worlds 24 --large-worlds 24 --box-only --out OUT_box.zip`."""
import argparse
import copy
import dataclasses
import sys

import numpy as np
import torch

from dynamix_hvd.agent.imitate import Trainer, accuracy, fit, load_samples, pass_targets, world_weights
from dynamix_hvd.agent.replay_train import config_from_args
from dynamix_hvd.agent.train import add_arguments
from dynamix_hvd.controllers.policy.actions import ActionConfig
from dynamix_hvd.controllers.policy.io import load_policy

RECIPE = ("--world replay --method imitate --disable system,network --enable mem_use --history 0 --dagger-iters 3 "
          "--worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only")
base, agg, out = sys.argv[1:4]
bpol, dyn = load_policy(base)
dyn = copy.deepcopy(dyn)
dyn["action"]["pass_head"] = True
# the env configuration as train-policy builds it for the default's recipe + --pass-head on the base's workloads
parser = argparse.ArgumentParser()
add_arguments(parser)
cfg = config_from_args(parser.parse_args(RECIPE.split() + ["--pass-head", "--workloads", ",".join(dyn["workloads"])]))
cfg = dataclasses.replace(cfg, action=ActionConfig.from_dict(dyn["action"]))   # the base's actions (its scales)
tr = Trainer(cfg, seed=0, hidden=int(bpol.hidden), meta=dyn.get("imitation", {}))
tr.dyn.clear()
tr.dyn.update(dyn)                              # the base's configuration (support included), pass_head set
missing, unexpected = tr.policy.load_state_dict(bpol.state_dict(), strict=False)
assert not unexpected and all(k.startswith("mlp_extractor.pass_pi.") for k in missing), (missing, unexpected)
for name, p in tr.policy.named_parameters():
    p.requires_grad_(name.startswith("mlp_extractor.pass_pi."))
samples = load_samples(agg)
before = {k: v.clone() for k, v in tr.policy.state_dict().items() if "pass_pi" not in k}
losses = fit(tr.policy, samples, cfg.action.k, epochs=20, seed=0, weights=world_weights(samples, "worlds"))
after = tr.policy.state_dict()
assert all(torch.equal(before[k], after[k]) for k in before), "a frozen weight moved"
net = tr.policy.mlp_extractor
y = np.concatenate([pass_targets(s.regret[None], *net.pass_indices) for s in samples])
print(f"{len(samples)} samples, pass targets 1 at {int(y.sum())}; loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
      f"the global head's accuracy {accuracy(tr.policy, samples):.3f} (the base's weights)")
tr.save(out, [], {"world": "replay", "method": "the base's network + a pass head fitted alone (frozen_pass.py)",
                  "base": base, "aggregate": agg, "final_loss": losses[-1]})
print("->", out)
