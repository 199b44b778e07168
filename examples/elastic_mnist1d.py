"""Horovod elastic (Gloo) training with dynamix: workers may join or leave; the plan is
recomputed for the new world and the sampler keeps exact-once coverage of committed steps.

    echo localhost:3 > hosts.txt
    printf '#!/bin/sh\ncat hosts.txt\n' > discover_hosts.sh; chmod +x discover_hosts.sh
    horovodrun -np 3 --min-np 2 --max-np 3 --network-interface lo \
        --host-discovery-script ./discover_hosts.sh python examples/elastic_mnist1d.py --epochs 2

Write `localhost:2` into hosts.txt while it runs: one worker leaves, the other two re-plan and
go on. `--network-interface` is required with a single host: without it Horovod's elastic
driver waits for a second host to compare network interfaces and looks hung.
With --log-dir, rank 0 appends one line per committed step to LOG_DIR/committed.<pid>:
`epoch step world_size sizes idx...` (sizes: the step's per-rank sample counts, comma-separated;
idx: the step's sample indices of all ranks).
"""
from __future__ import annotations

import argparse
import os
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

from dynamix_hvd import Dynamix
from dynamix_hvd.elastic import DynamixState


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples", type=int, default=3000)
    p.add_argument("--base-batch", type=int, default=16)
    p.add_argument("--step-sleep", type=float, default=0.0, help="slow each step down (tests)")
    p.add_argument("--log-dir", default=None, help="rank 0 logs each committed step's indices here")
    args = p.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    from mnist1d.data import get_dataset_args, make_dataset

    a = get_dataset_args()
    a.num_samples = args.samples
    d = make_dataset(a)
    x, y = torch.as_tensor(d["x"], dtype=torch.float32), torch.as_tensor(d["y"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dyn = Dynamix(model, opt, dataset_size=len(x), base_batch=args.base_batch, controller="proportional",
                  interval_steps=5, collector=False)  # under elastic it leaves the initial broadcast to state.sync()
    state = DynamixState(dyn)
    log = open(os.path.join(args.log_dir, f"committed.{os.getpid()}"), "a") if args.log_dir else None  # noqa: SIM115

    def on_reset() -> None:  # runs after DynamixState's own reset callback has re-planned
        if hvd.rank() == 0:
            print(f"world changed: {hvd.size()} workers, plan {list(dyn.plan.batch_sizes)}", flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state: DynamixState) -> None:
        dyn = state.dyn
        for epoch in range(dyn.epoch, args.epochs):
            for idx in dyn.batches(epoch):
                sl = dyn.current_slice
                loss = F.cross_entropy(model(x[idx]), y[idx])
                dyn.optimizer.zero_grad()
                dyn.backward(loss)
                dyn.optimizer.step()
                dyn.step(loss)
                time.sleep(args.step_sleep)
                if log is not None and hvd.rank() == 0:
                    sizes = ",".join(map(str, sl.sizes))
                    idx_all = " ".join(map(str, dyn.step_indices(sl).tolist()))
                    log.write(f"{sl.epoch} {sl.step} {hvd.size()} {sizes} {idx_all}\n")
                    log.flush()
                state.commit()
            if hvd.rank() == 0:
                print(f"epoch {epoch} done on {hvd.size()} workers, plan {list(dyn.plan.batch_sizes)}", flush=True)

    train(state)
    if hvd.rank() == 0:
        print(f"finished on {hvd.size()} workers at step {dyn.step_count}", flush=True)


if __name__ == "__main__":
    main()
