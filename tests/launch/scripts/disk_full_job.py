"""Test job for tests/launch/test_disk_full.py: the hook's loop with a checkpoint every
``--every`` steps to ``--checkpoint`` (on a small tmpfs). After the checkpoint of step
``--fill-at`` rank 0 fills that file system to the last byte (another writer filling the disk);
at step ``--free-at`` it deletes the filler again. After every checkpoint call rank 0 prints
whether it was written and which step the checkpoint on disk holds (read back with
``checkpoint.load``, weights_only). Each checkpoint is 1 KiB larger than the previous one.

    mpirun -np 2 python tests/launch/scripts/disk_full_job.py --checkpoint /mnt/small/ck.pt \
        --every 10 --fill-at 20 --free-at 45 --on-error continue
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import horovod.torch as hvd
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from mnist1d_horovod import load_mnist1d  # noqa: E402

from dynamix_hvd import Dynamix  # noqa: E402
from dynamix_hvd import checkpoint as ckpt  # noqa: E402


def fill(directory: Path) -> int:
    """Write a filler file until the file system is full; returns the bytes written."""
    n = 0
    chunk = b"\0" * 4096
    with open(directory / "filler.bin", "wb", buffering=0) as f:
        try:
            while True:
                n += f.write(chunk)
        except OSError:
            pass
    return n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--fill-at", type=int, default=20)
    p.add_argument("--free-at", type=int, default=-1)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--on-error", default="stop")
    p.add_argument("--run-dir", default=None)
    p.add_argument("--report", default=None, help="rank 0 appends one JSON line per checkpoint call")
    args = p.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    x, y, _, _ = load_mnist1d(2000)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), dataset_size=len(x),
                  base_batch=8, controller="static", checkpoint_on_error=args.on_error, run_dir=args.run_dir,
                  tensorboard=False, collector=False)
    optimizer = dyn.optimizer
    disk = Path(args.checkpoint).parent
    done = False
    for epoch in range(100):
        for idx in dyn.batches(epoch):
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step = dyn.step_count
            if step % args.every == 0:
                print(f"SAVING rank={hvd.rank()} step={step} at={time.time():.3f}", flush=True)
                # the checkpoint grows by 1 KiB per step (as a model's state may): overwriting the
                # previous file in place would not fit either, so only an atomic write keeps it
                ok = dyn.save(args.checkpoint, pad=torch.zeros(256 * step))
                if hvd.rank() == 0:
                    on_disk = ckpt.load(args.checkpoint)["dynamix"]["sampler"]["step"]
                    print(f"SAVE step={step} written={ok} on_disk_step={on_disk}", flush=True)
                    if args.report:       # the same, for the test (stdout of two ranks may interleave)
                        with open(args.report, "a") as f:
                            f.write(json.dumps({"step": step, "written": ok, "on_disk_step": on_disk}) + "\n")
            if hvd.rank() == 0 and step == args.fill_at:
                print(f"FILLED {fill(disk)} bytes; free now {os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize}",
                      flush=True)
            if hvd.rank() == 0 and step == args.free_at:
                (disk / "filler.bin").unlink()
                print("FREED", flush=True)
            if step >= args.steps:
                done = True
                break
        if done:
            break
    print(f"FINISHED rank {hvd.rank()}", flush=True)
    dyn.close()


if __name__ == "__main__":
    main()
