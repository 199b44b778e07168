"""The hook's own main-thread CPU per step, by section (issue 25), under mpirun:

    mpirun --allow-run-as-root --oversubscribe -np 2 .venv/bin/python benchmarks/hook_own_cpu.py \
        256 "hook,all five off,null hook" 5

Arguments: the MLP width, the variants of bench_hook_overhead.py, blocks per variant (1000 timed
steps each), optionally the depth (hidden width x width layers, default 1). Each section is timed with time.thread_time (the calling thread's CPU: not inflated
when the rank is preempted on shared cores; each timed call adds ~1 us of its own). Own CPU per
step = dyn.optimizer.step() minus Horovod's synchronize and the wrapped optimizer's update, plus
Horovod's compression wrapper (once per gradient, on steps that install it), the probe's gradient hook and the batches generator's next(); the null
hook's the same over its proxy's step and its generator (what a plain loop also pays inside
Horovod's and torch's step wrappers). Sections inside those (read_flags, raised, compressing,
host, after_update, record_step, detector, begin_micro, decide) are listed per step. Medians over
the blocks; every rank prints its line."""
import statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_hook_overhead as b
import horovod.torch as hvd
import horovod.torch.optimizer as hopt
import torch
from dynamix_hvd import apply as ap, core, horovod as dh, localstate, react

acc: dict[str, float] = {}
clk = time.thread_time


def timed(name, f):
    def w(*a, **k):
        t = clk()
        try:
            return f(*a, **k)
        finally:
            acc[name] = acc.get(name, 0.0) + clk() - t
    return w


def timed_gen(name, f):
    def w(*a, **k):
        it = f(*a, **k)
        while True:
            t = clk()
            try:
                x = next(it)
            except StopIteration:
                return
            finally:
                acc[name] = acc.get(name, 0.0) + clk() - t
            yield x
    return w


steps = [0]
if hasattr(dh, "GuardedOptimizer"):       # (before session 18: dyn.optimizer was a proxy)
    _gs = dh.GuardedOptimizer.step
    def gstep(self, closure=None):
        steps[0] += 1
        return _gs(self, closure)
    dh.GuardedOptimizer.step = timed("step", gstep)
else:                                       # dyn.optimizer is Horovod's, its step() the hook's
    _os = dh.Dynamix._optimizer_step
    def ostep(self, closure=None):
        steps[0] += 1
        return _os(self, closure)
    dh.Dynamix._optimizer_step = timed("step", ostep)
_ps = b._Proxy.step
def pstep(self, closure=None):
    steps[0] += 1
    return _ps(self, closure)
b._Proxy.step = timed("step", pstep)
hopt._DistributedOptimizer.synchronize = timed("hvd_sync", hopt._DistributedOptimizer.synchronize)
torch.optim.SGD.step = timed("update", torch.optim.SGD.step)
ap.Weighting.compress = timed("compress", ap.Weighting.compress)
if hasattr(ap, "ProbeOnly"):     # (session 18: installed instead of Weighting on uniform steps)
    ap.ProbeOnly.compress = timed("compress", ap.ProbeOnly.compress)
if hasattr(ap.FlagProbe, "_on_grad"):   # (since session 19: the probe's own gradient hook on uniform steps)
    ap.FlagProbe._on_grad = timed("probe_hook", ap.FlagProbe._on_grad)
core.DynamixCore.batches = timed_gen("next", core.DynamixCore.batches)
b._null_batches = timed_gen("next", b._null_batches)
dh.Dynamix._read_flags = timed("read_flags", dh.Dynamix._read_flags)
core.DynamixCore._after_update = timed("after_update", core.DynamixCore._after_update)
localstate.LocalState.record_step = timed("record_step", localstate.LocalState.record_step)
react.ChangeDetector.add = timed("detector", react.ChangeDetector.add)
localstate.LocalState.begin_micro = timed("begin_micro", localstate.LocalState.begin_micro)
ap.FlagProbe.raised = timed("raised", ap.FlagProbe.raised)
ap.FlagProbe._host = timed("host", ap.FlagProbe._host)
ap.FlagProbe.compressing = timed("compressing", ap.FlagProbe.compressing)
dh.Dynamix._exchange_flags = timed("exchange", dh.Dynamix._exchange_flags)
core.DynamixCore._decide = timed("decide", core.DynamixCore._decide)

hvd.init(); torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
data = (torch.randn(200_000, b.D_IN, generator=g), torch.randint(0, b.CLASSES, (200_000,), generator=g))
width = int(sys.argv[1]); variants = sys.argv[2].split(","); rounds = int(sys.argv[3])
depth = int(sys.argv[4]) if len(sys.argv) > 4 else 1
res = {v: [] for v in variants}
for v in variants:
    b._block(v, width, 200, 20, data, depth)
for r in range(rounds):
    for v in variants:
        acc.clear(); steps[0] = 0
        b._block(v, width, 1000, 60, data, depth)
        n = steps[0]
        own = acc["step"] - acc.get("hvd_sync", 0) - acc.get("update", 0) + acc.get("compress", 0) + acc.get("probe_hook", 0) + acc.get("next", 0)
        res[v].append((1e6 * own / n, {k: 1e6 * x / n for k, x in acc.items()}))
out = []
for v in variants:
    meds = statistics.median(o for o, _ in res[v])
    parts = {k: round(statistics.median(p[k] for _, p in res[v] if k in p), 1) for k in res[v][0][1]}
    out.append(f"rank {hvd.rank()} {v:14s} own CPU {meds:6.1f} us/step  (blocks {[round(o) for o, _ in res[v]]}) parts {parts}")
time.sleep(0.2 * hvd.rank())
print("\n".join(out), flush=True)
