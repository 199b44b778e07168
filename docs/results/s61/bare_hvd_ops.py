import time, sys, numpy as np, torch
import horovod.torch as hvd; hvd.init()
r, n = hvd.rank(), hvd.size()
mode = sys.argv[1]
row = torch.zeros(1, 40, dtype=torch.float64); plan = torch.zeros(200, dtype=torch.float64)
full = torch.zeros(n, 40, dtype=torch.float64)
ts = []
for i in range(300):
    hvd.allreduce(torch.zeros(1), name="bar")
    x = 0
    for _ in range(20000): x += 1
    t0 = time.perf_counter()
    if mode == "ag":
        hvd.allgather(row, name="g"); hvd.broadcast(plan, 0, name="p")
    elif mode == "ar":   # both in one allreduce (rows in own slot) then plan
        hvd.allreduce(full, op=hvd.Sum, name="g"); hvd.allreduce(plan, op=hvd.Sum, name="p")
    ts.append(time.perf_counter() - t0)
m = hvd.allreduce(torch.tensor(ts, dtype=torch.float64), op=hvd.Max, name="res").numpy()
if r == 0: print(mode, "p50 %.3f p90 %.3f ms" % (np.percentile(m[20:],50)*1e3, np.percentile(m[20:],90)*1e3))
