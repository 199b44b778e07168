import time, sys, numpy as np
from mpi4py import MPI
use_hvd = sys.argv[1] == "1"
if use_hvd:
    import horovod.torch as hvd; hvd.init()
c = MPI.COMM_WORLD.Dup(); r = c.Get_rank(); n = c.Get_size()
row = np.zeros(40); out = np.empty((n, 40)) if r == 0 else None; plan = np.zeros(200)
ts = []
for i in range(300):
    c.Barrier()
    # some compute like a step
    x = 0
    for _ in range(20000): x += 1
    t0 = time.perf_counter()
    c.Gather(row, out, root=0)
    if r == 0:
        s = 0
        for _ in range(int(sys.argv[2])): s += 1
    c.Bcast(plan, root=0)
    ts.append(time.perf_counter() - t0)
w = np.array(ts); m = np.empty_like(w); c.Allreduce(w, m, op=MPI.MAX)
if r == 0: print(sys.argv[1:], "p50 %.3f p90 %.3f ms" % (np.percentile(m[20:],50)*1e3, np.percentile(m[20:],90)*1e3))
