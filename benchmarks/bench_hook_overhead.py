"""The hook's per-step cost: plain Horovod against the same loop with the dynamix hook.

    .venv/bin/python benchmarks/bench_hook_overhead.py                       # widths 256,768,2048 x np 2,4
    .venv/bin/python benchmarks/bench_hook_overhead.py --np 2 --widths 1024 --breakdown
    .venv/bin/python benchmarks/bench_hook_overhead.py --lock /tmp/dynamix-cpu.lock   # each job under flock

With ``--device-ms X`` every variant sleeps X ms per step between the forward and the backward: an
emulated accelerator, during which the CPU idles as on a GPU node. With all compute on this
machine's 2 cores, 4 ranks at ~15 ms steps are CPU-saturated (session 21: 4.3 ms of main-thread
CPU per 15.6 ms step per rank, plus Horovod's threads), so their ratio measures the total CPU
demand of the 4 processes, not what the hook costs a GPU job (null hook alone 0.94x, rounds 0.64-1.17).

Both sides train the same MLP (in 128 -> width -> (width -> width) x depth -> 10; ``--depth``,
default 1: 6 parameter tensors; a deeper one shows a cost per gradient) on the same random data with the
same per-rank batch (32) and SGD, under ``mpirun -np N``:
  plain   ``hvd.DistributedOptimizer(op=hvd.Average)``; the loop is zero_grad, loss.backward(),
          optimizer.step() over this rank's slice of a shared permutation;
  hook    ``Dynamix(model, optimizer, ...)`` with its defaults (static controller), iterating
          ``dyn.batches(epoch)``; the loop is the hook's documented one.
With ``--breakdown`` the hook also runs with one feature off at a time (gns, react, oom_redo,
collector), with all four off, and with a decision every 10 steps however short they are
(``min_decision_s=0``; the default spaces decisions at least 0.5 s apart). ``null hook`` is not
the hook: plain Horovod in the hook's loop shape (numpy index arrays from a generator, an
optimizer proxy), the floor of any Python-level hook with this API on the machine at hand.

One job runs every variant in the same processes, in rounds A B C .. C B A (A = plain): the
ratio of a variant in a round is the mean steps/s of its two blocks over plain's two blocks, so a
linear drift of the machine's load cancels. Prints the median ratio over the rounds and its
range (min-max), and the plain steps/s and step time; and the main thread's CPU time per step
over plain's (``time.thread_time``, largest over the ranks: the work the hook adds to the critical
path, less sensitive to other processes than the wall clock, though they still inflate it), and
each hook variant's decisions and early decisions (react) per 1000 timed steps and the median time of a decision on rank 0: on a loaded machine
timing noise used to fake a node change every ~9 steps. Each block builds a fresh model and
optimizer (and Dynamix), runs warm-up steps, then times a fixed number of steps (calibrated once
so that a plain block lasts about ``--block-s``). Timing-sensitive: run under the CPU lock.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,tcp",
          "--mca", "btl_tcp_if_include", "lo"]
BATCH, D_IN, CLASSES = 32, 128, 10
VARIANTS = {
    "hook": {},
    "gns=False": {"gns": False},
    "react=False": {"react": False},
    "oom_redo=False": {"oom_redo": False},
    "collector=False": {"collector": False},
    "stall_timeout_s=0": {"stall_timeout_s": 0},    # no watchdog thread
    "all four off": {"gns": False, "react": False, "oom_redo": False, "collector": False},
    "all five off": {"gns": False, "react": False, "oom_redo": False, "collector": False, "stall_timeout_s": 0},
    "min_decision_s=0": {"min_decision_s": 0},       # a decision every interval_steps (10) steps
    "min_decision_s=5": {"min_decision_s": 5},       # a decision every 5 s: what the decisions cost
    "gns_every=8": {"gns_every": 8},                 # gradient statistics on every 8th step (default 2)
    # the waiting decision of sessions 1-59 and session 60's default (decision_lag 1); since session 61: 2 (inflight.py)
    "decision_lag=0": {"decision_lag": 0},
    "min_decision_s=0 decision_lag=0": {"min_decision_s": 0, "decision_lag": 0},
    "goodput min_decision_s=0": {"controller": "goodput", "min_decision_s": 0},
    "goodput min_decision_s=0 decision_lag=0": {"controller": "goodput", "min_decision_s": 0, "decision_lag": 0},
    "decision_lag=1": {"decision_lag": 1},
    "goodput min_decision_s=0 decision_lag=1": {"controller": "goodput", "min_decision_s": 0, "decision_lag": 1},
    # the defaults with a controller that reads the noise scale (gns auto: on), uneven plans never
    # arise here (identical ranks, B held at B0 without an LR rule)
    "controller=goodput": {"controller": "goodput"},
    # the per-step flags as a Horovod tensor of their own (before session 13) instead of the probe element
    "horovod flags": {"_flags": "horovod"},
    # not the hook: the floor of any hook with its loop shape (a generator of numpy index arrays,
    # an optimizer proxy whose step() only forwards to Horovod's); no dynamix code runs
    "null hook": {"_null": True},
    # the null hook plus a busy wait of that many microseconds after each update (where the hook
    # does its step bookkeeping): how this machine turns a given per-step cost into steps/s
    "null hook +25us": {"_null": True, "_delay_us": 25},
    "null hook +50us": {"_null": True, "_delay_us": 50},
    "null hook +100us": {"_null": True, "_delay_us": 100},
}
# an A/A control: the same settings under a second name, so one job shows how far two medians of
# identical variants fall apart on this machine (the resolution of every other comparison)
VARIANTS["all five off (A/A)"] = dict(VARIANTS["all five off"])
_OFF = VARIANTS["all five off"]
for _f in ("gns", "react", "oom_redo", "collector", "stall_timeout_s"):   # one feature on, the rest off
    VARIANTS[f"only {_f}"] = {k: v for k, v in _OFF.items() if k != _f}
VARIANTS["only gns"]["gns"] = True       # (its default, auto, is off for the static controller)
VARIANTS["gns=True"] = {"gns": True}     # the defaults before session 15 (static with gradient statistics)


# ---------------------------------------------------------------------------------------------
# worker side (under mpirun)
def _model(width: int, depth: int = 1):  # noqa: ANN202
    import torch

    torch.manual_seed(0)
    hidden = [m for _ in range(depth) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    return torch.nn.Sequential(torch.nn.Linear(D_IN, width), torch.nn.ReLU(), *hidden, torch.nn.Linear(width, CLASSES))


def _block(variant: str, width: int, steps: int, warmup: int, data: tuple, depth: int = 1,
           device_ms: float = 0.0) -> tuple[float, ...]:
    """One block of ``variant``: (steps/s, main-thread CPU microseconds per step; the largest
    over the ranks; decisions and early decisions (react) per 1000 timed steps, and the median
    milliseconds a decision took on this rank (gather, decide, broadcast), 0 for plain) over
    ``steps`` timed steps after ``warmup``. ``device_ms``: the emulated accelerator's time per
    step, slept between the forward and the backward (the same in every variant)."""
    import horovod.torch as hvd
    import torch
    import torch.nn.functional as F

    x, y = data
    model = _model(width, depth)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = warmup + steps
    hvd.allreduce(torch.zeros(1), name="bench.sync")      # start the block together
    decisions = [0, 0]
    took: list[float] = []
    if variant == "plain":
        dopt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), op=hvd.Average)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        g = torch.Generator().manual_seed(1)
        perm = torch.randperm(len(x), generator=g)
        B, off = BATCH * hvd.size(), BATCH * hvd.rank()
        t0 = c0 = 0.0
        for s in range(total):
            if s == warmup:
                t0, c0 = time.perf_counter(), time.thread_time()
            start = (s * B) % (len(x) - B) + off
            idx = perm[start:start + BATCH]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            if device_ms:
                time.sleep(device_ms / 1e3)
            dopt.zero_grad()
            loss.backward()
            dopt.step()
        dt, cpu = time.perf_counter() - t0, time.thread_time() - c0
    elif VARIANTS[variant].get("_null"):
        dopt = _Proxy(hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), op=hvd.Average),
                      VARIANTS[variant].get("_delay_us", 0))
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1)).numpy()
        s, t0, c0 = 0, 0.0, 0.0
        for idx in _null_batches(perm, BATCH * hvd.size(), BATCH * hvd.rank(), total):
            if s == warmup:
                t0, c0 = time.perf_counter(), time.thread_time()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            if device_ms:
                time.sleep(device_ms / 1e3)
            dopt.zero_grad()
            loss.backward()
            dopt.step()
            s += 1
        dt, cpu = time.perf_counter() - t0, time.thread_time() - c0
    else:
        from dynamix_hvd import Dynamix

        from dynamix_hvd.config import DynamixConfig

        kw = {k: v for k, v in VARIANTS[variant].items() if k in DynamixConfig.__dataclass_fields__}
        if VARIANTS[variant].get("_flags") == "horovod":
            from dynamix_hvd.apply import StepFlags

            class Dynamix(Dynamix):  # type: ignore[no-redef]  # noqa: PLW0127 - bench-only A/B
                def _rehook(self) -> None:
                    super()._rehook()
                    if self._weighting.probe is not None:
                        self._weighting.probe, self._flags = None, StepFlags(self.hvd, self.rank, self.world)
        dyn = Dynamix(model, opt, dataset_size=len(x), base_batch=BATCH, **kw)
        new_api = getattr(dyn, "report", None) is not None
        _decide = dyn._decide              # noqa: SLF001 - counted: how often a decision (early or not) ran

        def counted(step: int) -> None:
            if step >= warmup:           # the timed window only
                decisions[0] += 1
                decisions[1] += int(getattr(dyn.local, "react_ranks", None) is not None)
            t = time.perf_counter()
            _decide(step)
            took.append(time.perf_counter() - t)

        dyn._decide = counted              # type: ignore[method-assign]
        optimizer = dyn.optimizer
        s, epoch, t0, c0 = 0, 0, 0.0, 0.0
        while s < total:
            for idx in dyn.batches(epoch):
                if s == warmup:
                    t0, c0 = time.perf_counter(), time.thread_time()
                loss = F.cross_entropy(model(x[idx]), y[idx])
                if device_ms:
                    time.sleep(device_ms / 1e3)
                optimizer.zero_grad()
                if new_api:          # the loop of a plain Horovod script
                    loss.backward()
                    optimizer.step()
                else:                # the hook's loop before issue 21
                    dyn.backward(loss)
                    optimizer.step()
                    dyn.step(loss)
                s += 1
                if s >= total:
                    break
            epoch += 1
        dt, cpu = time.perf_counter() - t0, time.thread_time() - c0
        dyn._pending.clear()   # noqa: SLF001 - the epoch's iterator is abandoned on purpose
        dyn.close()
    # the slowest rank's time is the job's
    dt, cpu = (float(v) for v in hvd.allreduce(torch.tensor([dt, cpu], dtype=torch.float64), op=hvd.Max,
                                               name="bench.dt"))
    ms = 1e3 * statistics.median(took) if took else 0.0
    return steps / dt, 1e6 * cpu / steps, 1e3 * decisions[0] / steps, 1e3 * decisions[1] / steps, ms


class _Proxy:
    """The "null hook" variants' optimizer: step() forwards (then busy-waits ``delay_us``), everything
    else is Horovod's."""

    def __init__(self, inner, delay_us: float = 0) -> None:  # noqa: ANN001
        self._inner = inner
        self._delay = delay_us * 1e-6

    def step(self, closure=None):  # noqa: ANN001, ANN201
        out = self._inner.step(closure)
        if self._delay:
            end = time.perf_counter() + self._delay
            while time.perf_counter() < end:
                pass
        return out

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._inner, name)


def _null_batches(perm, global_batch: int, offset: int, steps: int):  # noqa: ANN001, ANN202
    for s in range(steps):
        start = (s * global_batch) % (len(perm) - global_batch) + offset
        yield perm[start:start + BATCH]


def worker(args: argparse.Namespace) -> None:
    import horovod.torch as hvd
    import torch

    hvd.init()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(200_000, D_IN, generator=g), torch.randint(0, CLASSES, (200_000,), generator=g))
    variants = ["plain", *args.variants.split(",")]
    # calibrate: plain steps per block of about block_s seconds (same count on every rank)
    rate = _block("plain", args.width, 20, 5, data, args.depth, args.device_ms)[0]
    steps = max(20, int(round(rate * args.block_s)))
    rounds: list[dict[str, float]] = []
    cpu_rounds: list[dict[str, float]] = []
    dec_rounds: list[dict[str, list[float]]] = []
    for _ in range(args.rounds):
        got: dict[str, list[float]] = {v: [] for v in variants}
        cpu: dict[str, list[float]] = {v: [] for v in variants}
        dec: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
        for v in variants + variants[::-1]:
            r, c, d, e, ms = _block(v, args.width, steps, args.warmup, data, args.depth, args.device_ms)
            got[v].append(r)
            cpu[v].append(c)
            dec[v].append((d, e, ms))
        rounds.append({v: statistics.fmean(r) for v, r in got.items()})
        cpu_rounds.append({v: statistics.fmean(c) for v, c in cpu.items()})
        dec_rounds.append({v: [statistics.fmean(x[i] for x in d) for i in range(3)] for v, d in dec.items()})
    if hvd.rank() == 0:
        print("RESULT " + json.dumps({"np": hvd.size(), "width": args.width, "depth": args.depth,
                                      "device_ms": args.device_ms, "steps_per_block": steps,
                                      "rounds": rounds, "cpu_us": cpu_rounds, "decisions": dec_rounds}), flush=True)


# ---------------------------------------------------------------------------------------------
# driver
def summarise(res: dict) -> list[str]:
    rounds = res["rounds"]
    plain = [r["plain"] for r in rounds]
    p50 = statistics.median(plain)
    depth = f" depth {res['depth']}" if res.get("depth", 1) != 1 else ""
    depth += f" device {res['device_ms']:g} ms" if res.get("device_ms") else ""
    lines = [f"np {res['np']}  width {res['width']:5d}{depth}  plain {p50:7.1f} steps/s ({1e3 / p50:5.1f} ms/step), "
             f"{len(rounds)} ABBA rounds x {res['steps_per_block']} steps per block"]
    cpu = res.get("cpu_us")
    if cpu:
        lines[0] += f"; plain main-thread CPU {statistics.median(r['plain'] for r in cpu):.0f} us/step"
    for v in rounds[0]:
        if v == "plain":
            continue
        ratios = [r[v] / r["plain"] for r in rounds]
        line = f"    {v:16s} {statistics.median(ratios):.3f}x  ({min(ratios):.3f}-{max(ratios):.3f})"
        if cpu:
            extra = [c[v] - c["plain"] for c in cpu]
            line += (f"   main-thread CPU {statistics.median(extra):+.0f} us/step "
                     f"({min(extra):+.0f}..{max(extra):+.0f}) over plain")
        dec = res.get("decisions")
        if dec:
            line += (f"   decisions {statistics.median(d[v][0] for d in dec):.1f}/1000 steps "
                     f"(early {statistics.median(d[v][1] for d in dec):.1f})")
            if len(dec[0][v]) > 2:
                line += f", {statistics.median(d[v][2] for d in dec):.2f} ms each (rank 0)"
        lines.append(line)
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--np", default="2,4", help="world sizes (comma-separated)")
    p.add_argument("--widths", default="256,768,2048", help="MLP hidden widths (step times ~3/15/50 ms at np 2)")
    p.add_argument("--width", type=int, default=256, help=argparse.SUPPRESS)
    p.add_argument("--depth", type=int, default=1, help="hidden width x width layers (default 1: 6 parameter tensors)")
    p.add_argument("--device-ms", type=float, default=0.0,
                   help="an emulated accelerator: this many ms slept per step between forward and backward, "
                        "in every variant (the CPU idles as on a GPU node; default 0: all compute on the CPU)")
    p.add_argument("--breakdown", action="store_true", help="also the hook with each feature off")
    p.add_argument("--variants", default=None, help="hook variants to run (comma-separated names of the "
                   "breakdown: hook,gns=False,...; default: hook, or all with --breakdown)")
    p.add_argument("--rounds", type=int, default=5, help="ABBA rounds per job")
    p.add_argument("--block-s", type=float, default=1.0, help="seconds per plain block")
    p.add_argument("--warmup", type=int, default=60,
                   help="untimed steps per block (60: past the first decision at step 10 and its short interval)")
    p.add_argument("--lock", default=None, help="run each mpirun job under `flock LOCK`")
    p.add_argument("--json", type=Path, default=None, help="append each job's result as a JSON line")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    variants = list(VARIANTS) if args.breakdown else ["hook"]
    if args.variants:
        variants = args.variants.split(",")
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            p.error(f"--variants: unknown {unknown}; known: {', '.join(VARIANTS)}")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    print(f"reproduce: {' '.join(sys.argv)}", flush=True)
    for np_ in (int(n) for n in args.np.split(",")):
        for width in (int(w) for w in args.widths.split(",")):
            cmd = [*MPIRUN, "-np", str(np_), sys.executable, "-m", "mpi4py", __file__, "--worker",
                   "--width", str(width), "--depth", str(args.depth), "--device-ms", str(args.device_ms), "--variants", ",".join(variants), "--rounds", str(args.rounds),
                   "--block-s", str(args.block_s), "--warmup", str(args.warmup)]
            if args.lock:
                cmd = ["flock", args.lock, *cmd]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                print(f"np {np_} width {width}: job failed ({proc.returncode})\n{proc.stdout[-3000:]}\n"
                      f"{proc.stderr[-3000:]}", flush=True)
                continue
            res = json.loads(line[len("RESULT "):])
            res["load1"] = os.getloadavg()[0]
            print("\n".join(summarise(res)) + f"   (load {res['load1']:.1f})", flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
