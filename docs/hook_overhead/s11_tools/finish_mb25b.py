import sys, time, torch, importlib.util
torch.set_num_threads(1)
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod
mods = {"before": load("/work/wt-i25-before/dynamix_hvd/measure.py", "m_before"), "after": load("/work/main/dynamix_hvd/measure.py", "m_after")}
for W in (256, 768):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(128, W), torch.nn.ReLU(), torch.nn.Linear(W, W), torch.nn.ReLU(), torch.nn.Linear(W, 10))
    grads = [torch.randn_like(p) for p in m.parameters()]
    fns = {}
    for k, M in mods.items():
        for rank in (0, 1):
            g = M.GradNoise(rank, 2, 2, 0.9)
            red = grads if (rank == 0 or k == "after") else None
            def one(g=g, red=red):
                g.begin(True)
                for t in grads:
                    g.on_local(t)
                g.finish(64, 32, red)
            fns[(k, rank)] = one
    best = {k: 1e9 for k in fns}
    for _ in range(40):
        for k, f in fns.items():
            c = time.thread_time_ns()
            for _ in range(20): f()
            best[k] = min(best[k], (time.thread_time_ns() - c) / 20 / 1e3)
    print(f"W {W}: " + "  ".join(f"{k[0]} r{k[1]} {v:6.1f}" for k, v in best.items()) + "  us per sampled step (min)")
# the passes alone
for W in (256, 768):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(128, W), torch.nn.ReLU(), torch.nn.Linear(W, W), torch.nn.ReLU(), torch.nn.Linear(W, 10))
    grads = [torch.randn_like(p) for p in m.parameters()]
    b = 1e9
    for _ in range(40):
        c = time.thread_time_ns()
        for _ in range(20): torch._foreach_add_(grads, grads, alpha=0.0)
        b = min(b, (time.thread_time_ns() - c) / 20 / 1e3)
    print(f"W {W}: reference SGD-like pass {b:.1f} us")
