"""Session 74: what a rank that leaves a batch or a micro-batch without backward does (not a test; findings in the
session note on issue 19). Run from the repository root:

    mpirun --allow-run-as-root --oversubscribe -np 2 .venv/bin/python docs/results/s74/skip_micro_job.py --acc 1 --skip-micro 62:0
        # rank 1 takes the job's last batch (step 62 of 63) without optimizer.step(): StepSkippedError, the job ends
    mpirun --allow-run-as-root --oversubscribe -np 2 .venv/bin/python docs/results/s74/skip_micro_job.py --acc 2 --skip-micro 7:0
        # accumulation 2: rank 1 skips backward on micro-batch 0 of step 7, still steps: the job ended normally (silent)
        # in session 74; since session 75 rank 1 raises StepSkippedError at that step's optimizer.step() and the job ends
"""
import argparse, sys, time
from pathlib import Path
import horovod.torch as hvd
import torch
import torch.nn.functional as F
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from mnist1d_horovod import load_mnist1d
from dynamix_hvd import Dynamix

p = argparse.ArgumentParser()
p.add_argument("--acc", type=int, default=1)
p.add_argument("--controller", default="static")
p.add_argument("--skip-micro", default="")   # step:j  rank 1 skips backward of micro j
p.add_argument("--epochs", type=int, default=1)
a = p.parse_args()
hvd.init(); torch.set_num_threads(1)
x, y, xt, yt = load_mnist1d(2500)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(40, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), dataset_size=len(x),
              base_batch=8, controller=a.controller, interval_steps=10, accumulation=a.acc)
opt = dyn.optimizer
ss, sj = (int(v) for v in a.skip_micro.split(":")) if a.skip_micro else (-1, -1)
for epoch in range(a.epochs):
    j = 0
    for idx in dyn.batches(epoch):
        step = dyn.step_count
        if hvd.rank() == 1 and step == ss and j == sj:
            print(f"FAULT-AT {time.time():.3f} skip micro {j} of step {step}", flush=True)
            j = (j + 1) % a.acc
            if j == 0 and a.acc > 1:
                opt.step()
            continue
        loss = F.cross_entropy(model(x[idx]), y[idx])
        if j == 0:
            opt.zero_grad()
        loss.backward()
        j = (j + 1) % a.acc
        if j == 0:
            opt.step()
print(f"rank {hvd.rank()} done step {dyn.step_count} w0 {model[0].weight.sum().item():.6f}", flush=True)
dyn.close()
