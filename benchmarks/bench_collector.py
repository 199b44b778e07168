"""Cost of the native collector. Prints three figures and the command that reproduces them:

1. one full sample (2 network interfaces + node/process CPU + memory), median, in-process;
2. added cost per MPI_Allreduce call of the PMPI wrapper (1 double, mpirun -np 1, a C loop
   built with mpicc, run with and without LD_PRELOAD, alternated);
3. steps/s of a small torch training loop (gradients allreduced with mpi4py) with the
   collector + collective timing on vs off, alternated in blocks within the same process.

    python benchmarks/bench_collector.py            # all three (needs mpicc/mpirun)
    python benchmarks/bench_collector.py --quick    # shorter
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,tcp",
          "--mca", "btl_tcp_if_include", "lo"]

C_LOOP = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y); }
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int batches = atoi(argv[1]), per = atoi(argv[2]);
  double in = 1.0, out = 0.0, *ns = malloc(sizeof(double) * batches);
  for (int i = 0; i < per * 10; ++i) MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (int b = 0; b < batches; ++b) {
    double t0 = now();
    for (int i = 0; i < per; ++i) MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    ns[b] = (now() - t0) * 1e9 / per;
  }
  qsort(ns, batches, sizeof(double), cmp);
  printf("%.2f\n", ns[batches / 2]);
  MPI_Finalize();
  return 0;
}
"""


def bench_sample(n: int) -> dict:
    from dynamix_hvd import load_native
    nat = load_native()
    names = nat.list_interfaces("/sys")
    ifaces = (["lo"] + [i for i in names if i != "lo"])[:2]
    cfg = nat.SamplerConfig()
    cfg.interfaces, cfg.infiniband, cfg.nvml = ifaces, False, False
    s = nat.Sampler(cfg)
    s.bench(200)  # warm
    costs = sorted(s.bench(n))
    from dynamix_hvd.metrics import Collector, CollectorConfig
    c = Collector(CollectorConfig(interfaces=tuple(ifaces), infiniband=False, gpu=False))
    w = []
    for _ in range(500):
        t0 = time.perf_counter_ns()
        c.window()
        w.append(time.perf_counter_ns() - t0)
    w.sort()
    return {"interfaces": ifaces, "samples": n, "median_us": costs[n // 2] / 1e3, "p90_us": costs[int(n * 0.9)] / 1e3,
            "window_call_us": w[len(w) // 2] / 1e3}


def bench_pmpi(rounds: int, batches: int, per: int) -> dict:
    from dynamix_hvd.launch import preload_path
    if not shutil.which("mpicc") or not shutil.which("mpirun"):
        return {"skipped": "mpicc/mpirun not found"}
    lib = str(preload_path())
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "loop.c", Path(d) / "loop"
        src.write_text(C_LOOP)
        subprocess.run(["mpicc", "-O2", "-o", str(exe), str(src)], check=True)
        off, on = [], []
        for _ in range(rounds):
            for preload, sink in ((False, off), (True, on)):
                extra = ["-x", f"LD_PRELOAD={lib}"] if preload else []
                out = subprocess.run([*MPIRUN, "-np", "1", *extra, str(exe), str(batches), str(per)],
                                     check=True, capture_output=True, text=True).stdout
                sink.append(float(out.strip().splitlines()[-1]))
    m_off, m_on = statistics.median(off), statistics.median(on)
    return {"off_ns": m_off, "on_ns": m_on, "added_ns": m_on - m_off, "runs_off": off, "runs_on": on}


def train_worker(blocks: int, block_s: float) -> None:
    """Runs inside `mpirun -np 1 -x LD_PRELOAD=...`: alternates off/on blocks."""
    import numpy as np
    import torch
    from mpi4py import MPI

    from dynamix_hvd.metrics import Collector, CollectorConfig

    torch.set_num_threads(1)
    torch.manual_seed(0)
    comm = MPI.COMM_WORLD
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    params = list(model.parameters())
    flat = np.zeros(sum(p.numel() for p in params), dtype=np.float32)
    out = np.empty_like(flat)
    collector = Collector(CollectorConfig(gpu=False))

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        off = 0
        for p in params:
            k = p.numel()
            flat[off:off + k] = p.grad.numpy().ravel()
            off += k
        comm.Allreduce(flat, out)
        off = 0
        for p in params:
            k = p.numel()
            p.grad.copy_(torch.from_numpy(out[off:off + k]).view_as(p.grad))
            off += k
        opt.step()

    def block(on: bool) -> float:
        collector.set_timing(on)
        if on:
            collector.start()
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < block_s:
            step()
            steps += 1
            if on and steps % 20 == 0:
                collector.window()  # what the hook does once per decision interval (20 steps)
        rate = steps / (time.perf_counter() - t0)
        collector.stop()
        return rate

    for _ in range(50):
        step()
    ratios, on_rates, off_rates = [], [], []
    for i in range(blocks):
        first_on = i % 2 == 1  # ABBA order cancels drift
        a = block(first_on)
        b = block(not first_on)
        r_on, r_off = (a, b) if first_on else (b, a)
        on_rates.append(r_on)
        off_rates.append(r_off)
        ratios.append(r_on / r_off)
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    print(json.dumps({"comm_available": collector.comm_available, "on_steps_s": statistics.median(on_rates),
                      "ratio_q1": q[0], "ratio_q3": q[2],
                      "off_steps_s": statistics.median(off_rates), "ratio_median": statistics.median(ratios),
                      "ratios": ratios}), flush=True)


def bench_train(blocks: int, block_s: float) -> dict:
    from dynamix_hvd.launch import preload_path
    cmd = [*MPIRUN, "-np", "1", "-x", f"LD_PRELOAD={preload_path()}", sys.executable, __file__,
           "--train-worker", "--blocks", str(blocks), "--block-s", str(block_s)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--train-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--block-s", type=float, default=1.0)
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    args = ap.parse_args()
    if args.train_worker:
        train_worker(args.blocks, args.block_s)
        return 0
    q = args.quick
    sample = bench_sample(2000 if q else 20000)
    pmpi = bench_pmpi(rounds=3 if q else 5, batches=200, per=200 if q else 1000)
    train = bench_train(blocks=4 if q else args.blocks, block_s=1.0 if q else args.block_s)
    print(f"host: {os.uname().nodename}, {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print(f"1. full sample ({' + '.join(sample['interfaces'])} + CPU + memory): median {sample['median_us']:.2f} us, "
          f"p90 {sample['p90_us']:.2f} us over {sample['samples']} samples   [target <= 20 us]")
    print(f"   Collector.window() from Python (sample + rates + collective summary): median "
          f"{sample['window_call_us']:.1f} us per call (once per decision interval)")
    if "skipped" in pmpi:
        print(f"2. PMPI wrapper: skipped ({pmpi['skipped']})")
    else:
        print(f"2. PMPI wrapper, MPI_Allreduce(1 double) on -np 1: {pmpi['off_ns']:.0f} ns without, "
              f"{pmpi['on_ns']:.0f} ns with preload -> added {pmpi['added_ns']:.0f} ns/call (median of runs)"
              f"   [target <= 1000 ns]")
    print(f"3. training loop steps/s: collector+timing on {train['on_steps_s']:.1f}, off {train['off_steps_s']:.1f}, "
          f"on/off ratio median {train['ratio_median']:.4f} (IQR {train['ratio_q1']:.3f}-{train['ratio_q3']:.3f}) "
          f"over {len(train['ratios'])} ABBA block pairs "
          f"(timing recorder active: {train['comm_available']})   [target >= 0.99]")
    if "added_ns" in pmpi and train["on_steps_s"] > 0:
        step_s = 1.0 / train["off_steps_s"]
        modelled = (pmpi["added_ns"] * 1e-9 + sample["window_call_us"] * 1e-6 / 20) / step_s \
            + sample["median_us"] * 1e-6 / 0.1 / (os.cpu_count() or 1)
        print(f"   modelled overhead of this loop (1 allreduce/step, window() every 20 steps, 10 samples/s): "
              f"{100 * modelled:.3f}% -> expected ratio {1 - modelled:.4f}")
    if args.json:
        print(json.dumps({"sample": sample, "pmpi": pmpi, "train": train}))
    print(f"reproduce: cd {REPO} && {sys.executable} "
          f"benchmarks/bench_collector.py{' --quick' if q else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
