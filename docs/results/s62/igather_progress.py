import time, sys, numpy as np
from mpi4py import MPI
use_hvd = sys.argv[1] == "1"
if use_hvd:
    import horovod.torch as hvd; hvd.init()
comm = MPI.COMM_WORLD.Dup(); r, n = comm.rank, comm.size
row = np.zeros(40); full = np.zeros((n, 40)); plan = np.zeros(200)
done = 0; tw = []
for i in range(200):
    comm.Barrier()
    req = comm.Igather(row, full, root=0)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.005: pass     # a step with no MPI call from this thread
    t1 = time.perf_counter(); ok = req.Test()
    if not ok: req.Wait()
    tw.append(time.perf_counter() - t1); done += ok
flags = comm.gather(done, root=0); w = comm.gather(np.median(tw), root=0)
if r == 0: print("hvd", use_hvd, "np", n, "completed during the step on each rank:", flags, "median wait ms", [round(x*1e3,3) for x in w])
