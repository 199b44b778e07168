"""Issue 19, session 24: can an online search find goodput's missing batch-size correction?

The goodput controller with its global batch multiplied by ``exp(x +/- delta)`` in ABBA blocks of
``L`` decisions; after each block of 4 L decisions ``x`` moves along the measured difference of
progress per second (the replay's loss proxy, the normalised gap of the metric to its best, with
``--sigma`` of extra noise per reading; 0 = exact). Prints time to target per cell against goodput
and the fraction of goodput's gap to the hindsight oracle it closes.

    .venv/bin/python benchmarks/probe_multiplier.py --seeds 3 --workers 8 --traces none --sigma 0
"""
import argparse, math, sys, time
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from dynamix_hvd.replay.worlds import WorldSpec, build_sim
from dynamix_hvd.replay.runner import build_controller, run_one
from dynamix_hvd.decide import control_loop
from dynamix_hvd.safety import MoveLimits
from dynamix_hvd.plan import Plan
from dynamix_hvd.controllers.base import Controller


class Probe(Controller):
    name = "probe"
    guarded = True
    def __init__(self, inner, sim, sigma, L, delta, lr, seed, xmax=math.log(4)):
        super().__init__(inner.bounds, inner.base_batch)
        self.inner, self.sim, self.sigma, self.L, self.d, self.lr = inner, sim, sigma, L, delta, lr
        self.rng = np.random.default_rng([seed, 99])
        self.x = 0.0; self.k = 0; self.xmax = xmax
        self.pattern = [1, -1, -1, 1]
        self.acc = {1: [0.0, 0.0], -1: [0.0, 0.0]}
        self.last = None   # (gap_obs, time)
        self.cur = None

    def decide(self, state):
        prop = np.asarray(self.inner.decide(state), float)
        g_obs = state.glob.loss + self.sigma * self.rng.standard_normal()
        t = self.sim.time
        if self.last is not None and self.cur is not None:
            self.acc[self.cur][0] += self.last[0] - g_obs
            self.acc[self.cur][1] += t - self.last[1]
        self.last = (g_obs, t)
        phase = (self.k // self.L) % 4
        if self.k > 0 and self.k % (4 * self.L) == 0:
            rp = self.acc[1][0] / max(self.acc[1][1], 1e-12)
            rm = self.acc[-1][0] / max(self.acc[-1][1], 1e-12)
            if rp > 0 and rm > 0:
                g = (math.log(rp) - math.log(rm)) / (2 * self.d)
                self.x = float(np.clip(self.x + np.clip(self.lr * g, -self.d, self.d), -self.xmax, self.xmax))
            elif rp > 0 >= rm: self.x = min(self.x + self.d, self.xmax)
            elif rm > 0 >= rp: self.x = max(self.x - self.d, -self.xmax)
            self.acc = {1: [0.0, 0.0], -1: [0.0, 0.0]}
        s = self.pattern[phase]
        self.cur = s
        self.k += 1
        return (prop * math.exp(self.x + s * self.d)).tolist()


def run_probe(sim, seed, sigma, L, delta, lr):
    sim.reset(seed)
    inner = build_controller("goodput", sim, seed)
    ctl = Probe(inner, sim, sigma, L, delta, lr, seed)
    plan = Plan.uniform(sim.n, sim.base_batch)
    for _ in control_loop(sim, ctl, sim.bounds(), plan, limits=MoveLimits()):
        pass
    return (sim.time if sim.reached else math.inf), ctl.x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", default="bert,cifar10,deepspeech2,ncf")
    p.add_argument("--traces", default="none,job_3_norm")
    p.add_argument("--workers", default="8,32")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--sigma", type=float, default=0.01)
    p.add_argument("--L", type=int, default=3)
    p.add_argument("--delta", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--ref", default="goodput,hindsight")
    a = p.parse_args()
    t0 = time.time()
    allc = []
    for wl in a.workloads.split(","):
        for tr in a.traces.split(","):
            for n in map(int, a.workers.split(",")):
                res = {c: [] for c in a.ref.split(",")}; pr = []; xs = []
                for s in range(a.seeds):
                    seed = 5 + s
                    sim = build_sim(WorldSpec(wl, n, tr, seed))
                    for c in res:
                        t = run_one(sim, c, seed)["time_to_target_s"]
                        res[c].append(math.inf if t is None else t)
                    t, x = run_probe(sim, seed, a.sigma, a.L, a.delta, a.lr)
                    pr.append(t); xs.append(x)
                g = np.median(res["goodput"]); h = np.median(res["hindsight"]); q = np.median(pr)
                closed = (g - q) / (g - h) if g - h > 1e-9 * g else float("nan")
                allc.append((wl, q / g, closed, g / h))
                print(f"{wl:12s} {tr:12s} N={n:3d} probe/goodput {q/g:.3f} goodput/hind {g/h:.3f} closed {closed:+.2f} x_end {np.round(xs,2).tolist()}", flush=True)
    r = np.array([c[1] for c in allc]); cl = np.array([c[2] for c in allc])
    print(f"geomean probe/goodput {np.exp(np.mean(np.log(r))):.3f} max {r.max():.3f} mean closed {np.nanmean(cl):+.2f} ({time.time()-t0:.0f} s)")
    for wl in a.workloads.split(","):
        rr = np.array([c[1] for c in allc if c[0] == wl]); print(f"  {wl} {np.exp(np.mean(np.log(rr))):.3f}")


if __name__ == "__main__":
    main()
