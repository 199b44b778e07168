"""Session 58 experiment (not in the product): goodput with its overlap fitted over the mean (compute, exposed) of each
global batch of its 16-decision history (v1), or of the last 8 distinct global batches run, each the mean of its last 16
points (v2), against goodput as shipped, over the 24 shipped cells. Usage: overlap_memory.py FIRST_SEED SEEDS MODES OUT.json"""
"""Experiment: goodput's overlap fit over per-batch means (V1) and with a memory of distinct batches (V2)."""
import sys, math, json, itertools
from collections import OrderedDict, deque
import numpy as np
from multiprocessing import Pool
import dynamix_hvd.controllers.goodput as G
from dynamix_hvd.perfmodel import fit_overlap as _fit

MODE = None

class Mem:
    """(c, e, B) points; iterates per-distinct-B means over the last K distinct batches."""
    def __init__(self, history=16, K=8, window=True):
        self.raw = deque(maxlen=history); self.groups = OrderedDict(); self.K = K; self.h = history; self.window = window
    def append(self, p):
        self.raw.append(p)
        c, e, B = p
        g = self.groups.pop(B, None) or deque(maxlen=self.h)
        g.append((c, e)); self.groups[B] = g
        while len(self.groups) > self.K: self.groups.popitem(last=False)
    def __len__(self): return len(self.groups) if not self.window else len(self.raw)
    def __iter__(self):
        if self.window:   # V1: means per B over the window only
            d = {}
            for c, e, B in self.raw: d.setdefault(B, []).append((c, e))
            return iter([(float(np.mean([x[0] for x in v])), float(np.mean([x[1] for x in v])), B) for B, v in d.items()])
        return iter([(float(np.mean([x[0] for x in g])), float(np.mean([x[1] for x in g])), B) for B, g in self.groups.items()])
    def clear(self): self.raw.clear(); self.groups.clear()
    def extend(self, it):
        for p in it: self.append(p)

orig_init = G.GoodputController.__init__
def init(self, *a, **k):
    orig_init(self, *a, **k)
    if MODE == "v1": self.sync_history = Mem(window=True)
    elif MODE == "v2": self.sync_history = Mem(window=False)
G.GoodputController.__init__ = init

from dynamix_hvd.replay.runner import make_world, run_one
TR = {"none": "none", "job_3": "job_3_norm", "cov": "cov:coefficient_variation"}

def job(args):
    global MODE
    mode, wl, tr, n, seeds = args
    MODE = mode
    w = make_world(wl, TR[tr], n, None, None, None, None, "run")
    return (mode, wl, tr, n, [run_one(w.sim, "goodput", s)["time_to_target_s"] for s in seeds])

if __name__ == "__main__":
    seeds = list(range(int(sys.argv[1]), int(sys.argv[1]) + int(sys.argv[2])))
    modes = sys.argv[3].split(",")
    cells = [(m, wl, tr, n, seeds) for m in modes for wl in ("bert", "cifar10", "deepspeech2", "ncf") for tr in TR for n in (8, 32)]
    with Pool(2) as p:
        res = p.map(job, cells, chunksize=1)
    out = {}
    for m, wl, tr, n, t in res:
        out.setdefault(f"{wl}|{tr}|{n}", {})[m] = t
    json.dump(out, open(sys.argv[4], "w"))
    base = modes[0]
    for m in modes[1:]:
        r = []; per = {}
        for k, v in out.items():
            a = np.median([x if x else np.inf for x in v[m]]); b = np.median([x if x else np.inf for x in v[base]])
            r.append(a / b); per.setdefault(k.split("|")[0], []).append(a / b)
        print(m, "/", base, "geomean %.4f" % math.exp(np.mean(np.log(r))), "max %.3f" % max(r),
              {w: round(math.exp(np.mean(np.log(x))), 3) for w, x in per.items()})
