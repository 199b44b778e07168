"""Issue 25: per-item cost of the hook at np N (main-thread CPU and wall per step, us).

mpirun -np 2 .venv/bin/python -m mpi4py /work/scratch/item_cost25.py   (env W=width STEPS=n)
Runs plain / hook (uninstrumented) / plain / hook alternately, measuring main-thread CPU per
step (thread_time) and wall per step, plus per-thread CPU from /proc (Horovod background thread,
collector, watchdog). Then a hook run with wrappers that time each item (thread_time + wall).
"""
import os, sys, time, statistics, json
import torch, torch.nn.functional as F
import horovod.torch as hvd

hvd.init()
torch.set_num_threads(1)
W = int(os.environ.get("W", "256")); STEPS = int(os.environ.get("STEPS", "1500"))
REPS = int(os.environ.get("REPS", "2"))
KW = json.loads(os.environ.get("KW", "{}"))
x = torch.randn(50000, 128); y = torch.randint(0, 10, (50000,))


def threads_cpu():
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            name = "main" if int(t) == os.getpid() else "other"
            f = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
            out[(t, name)] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return out


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(128, W), torch.nn.ReLU(), torch.nn.Linear(W, W), torch.nn.ReLU(),
                               torch.nn.Linear(W, 10))


def run(kind, steps, kw=None, instrument=None):
    m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.01)
    hvd.allreduce(torch.zeros(1), name="sync" + kind)
    dyn = None
    if kind == "plain":
        dopt = hvd.DistributedOptimizer(opt, named_parameters=m.named_parameters(), op=hvd.Average)
        hvd.broadcast_parameters(m.state_dict(), root_rank=0)
        perm = torch.randperm(len(x)); B = 32 * hvd.size(); off = 32 * hvd.rank()

        def gen():
            s = 0
            while True:
                st = (s * B) % (len(x) - B) + off; s += 1
                yield perm[st:st + 32]
    else:
        from dynamix_hvd import Dynamix
        dyn = Dynamix(m, opt, dataset_size=len(x), base_batch=32, **(kw or {}))
        dopt = dyn.optimizer
        if instrument:
            instrument(dyn)

        def gen():
            e = 0
            while True:
                for idx in dyn.batches(e):
                    yield idx
                e += 1
    it = gen()
    warm = 100
    for s in range(warm + steps):
        if s == warm:
            th0 = threads_cpu(); t0, c0 = time.perf_counter(), time.thread_time()
        idx = next(it)
        loss = F.cross_entropy(m(x[idx]), y[idx])
        dopt.zero_grad(); loss.backward(); dopt.step()
    dt, cpu = time.perf_counter() - t0, time.thread_time() - c0
    th1 = threads_cpu()
    per_thread = {}
    for k, v in th1.items():
        if k in th0:
            per_thread[k[1]] = per_thread.get(k[1], 0.0) + (v - th0[k]) * 1e6 / steps
    if dyn is not None:
        dyn.local.pending.clear(); dyn.close()
    return 1e6 * dt / steps, 1e6 * cpu / steps, per_thread


TIMES = {}


def wrap(obj, name, label):
    f = getattr(obj, name)

    def w(*a, **k):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        try:
            return f(*a, **k)
        finally:
            e = TIMES.setdefault(label, [0, 0, 0])
            e[0] += time.thread_time_ns() - c0; e[1] += time.perf_counter_ns() - t0; e[2] += 1
    setattr(obj, name, w)


def instrument(dyn):
    loc = dyn.local
    wrap(dyn._weighting, "compress", "Weighting.compress (all, per tensor)")
    wrap(dyn._weighting.inner, "compress", "  inner compress")
    if dyn._flags is not None:
        wrap(dyn._flags, "submit", "  StepFlags.submit (allreduce_async_)")
        wrap(dyn._flags, "wait", "StepFlags.wait")
    wrap(loc.gns, "on_local", "  GradNoise.on_local (per tensor)")
    wrap(loc.gns, "finish", "GradNoise.finish (in record_step)")
    wrap(dyn, "_reduced_grads", "  _reduced_grads list")
    wrap(loc, "begin_micro", "LocalState.begin_micro")
    wrap(dyn, "_new_step", "  _new_step")
    wrap(dyn, "_optimizer_step", "_optimizer_step (all)")
    wrap(dyn.hvd_optimizer, "step", "  inner.step (Horovod sync + SGD)")
    wrap(dyn.hvd_optimizer, "synchronize", "    inner.synchronize")
    wrap(dyn, "_after_update", "  _after_update")
    wrap(loc, "record_step", "    record_step")
    wrap(loc.meter, "add", "      StepMeter.add")
    if loc.detector is not None:
        wrap(loc.detector, "add", "      ChangeDetector.add")
    wrap(dyn, "_decide", "    _decide")
    wrap(dyn, "_check_step_call", "  _check_step_call")


res = {"plain": [], "hook": []}
for r in range(REPS):
    for kind in ("plain", "hook", "hook", "plain"):
        res[kind].append(run(kind, STEPS, KW))
TIMES.clear()
run("hook", STEPS, KW, instrument)
# rank-local printing (each rank prints; rank 0 does the reduced norm)
lines = [f"rank {hvd.rank()} W={W} steps={STEPS} KW={KW}"]
for kind, rs in res.items():
    wall = statistics.median(r[0] for r in rs); cpu = statistics.median(r[1] for r in rs)
    th = {}
    for r in rs:
        for k, v in r[2].items():
            th.setdefault(k, []).append(v)
    ths = " ".join(f"{k}={statistics.median(v):.0f}" for k, v in sorted(th.items()) if statistics.median(v) >= 1)
    lines.append(f"  {kind:6s} wall {wall:7.1f} us/step  main CPU {cpu:7.1f} us/step  [{' '.join(f'{r[0]:.0f}/{r[1]:.0f}' for r in rs)}]  threads: {ths}")
lines.append("  instrumented hook, per step (cpu us / wall us), calls per step:")
for k, (c, t, n) in TIMES.items():
    lines.append(f"    {k:42s} {c / 1e3 / (STEPS + 100):7.1f} / {t / 1e3 / (STEPS + 100):7.1f}   ({n / (STEPS + 100):.2f}/step)")
out = "\n".join(lines)
allout = hvd.allgather_object(out)
if hvd.rank() == 0:
    print("\n".join(allout), flush=True)
