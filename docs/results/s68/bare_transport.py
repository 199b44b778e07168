"""The decision's transport alone under Horovod (initialised, idle): Gather (40 float64 per rank) +
Bcast (200 float64) on a Dup of COMM_WORLD, 300 times after a Barrier and a short busy loop, waited
for by MPI_Wait (``block``) or by ``dynamix_hvd.comm.wait_yielding`` (``yield``); p50 / p90 of the
slowest rank's time. Session 61's bare_gather.py with the session-68 wait.
    mpirun --allow-run-as-root --oversubscribe -np 4 .venv/bin/python docs/results/s68/bare_transport.py block|yield
"""
import sys
import time

import horovod.torch as hvd
import numpy as np
from mpi4py import MPI

from dynamix_hvd.comm import wait_yielding

hvd.init()
mode = sys.argv[1]
c = MPI.COMM_WORLD.Dup()
r, n = c.Get_rank(), c.Get_size()
row, plan = np.zeros(40), np.zeros(200)
out = np.empty((n, 40)) if r == 0 else None
wait = (lambda q: q.Wait()) if mode == "block" else wait_yielding
ts = []
for i in range(300):
    c.Barrier()
    x = 0
    for _ in range(20000):
        x += 1
    t0 = time.perf_counter()
    wait(c.Igather(row, out, root=0))
    wait(c.Ibcast(plan, root=0))
    ts.append(time.perf_counter() - t0)
w = np.array(ts)
m = np.empty_like(w)
c.Allreduce(w, m, op=MPI.MAX)
if r == 0:
    print(f"np {n} {mode:<6} p50 {np.percentile(m[20:], 50) * 1e3:.3f} p90 {np.percentile(m[20:], 90) * 1e3:.3f} ms")
