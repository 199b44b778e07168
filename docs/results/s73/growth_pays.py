"""Samples per second gained by growing every local batch 1.6x, at 3-60% of the memory cap (the replay's measured step times)."""
import numpy as np
from dynamix_hvd.replay.runner import resolve_workload
from dynamix_hvd.traces.pollux import load_pollux
from dynamix_hvd.replay.throughput import build_throughput
for w in ["bert","cifar10","deepspeech2","ncf","benchmarks/heldout_workloads/yolov3","benchmarks/heldout_workloads/imagenet"]:
    wl = load_pollux(resolve_workload(w))
    for n in (8,32):
        tp = build_throughput(wl.throughput, n)
        cap = tp.cap; h=np.ones(n)
        row=[]
        for f in (0.03,0.1,0.2,0.4,0.6):
            b = max(2,int(f*cap)); b2=min(cap,int(round(b*1.6)))
            t1=tp.rank_times(h,np.full(n,b)).max(); t2=tp.rank_times(h,np.full(n,b2)).max()
            # throughput gain from growing 1.6x: (b2/t2)/(b/t1)
            row.append(f"{f:.2f}:{(b2/t2)/(b/t1):.2f}")
        print(f"{w.split('/')[-1]:12s} N={n:2d} cap={cap:5d}", " ".join(row))
