"""How many of a replay episode's decisions a learned policy decides, and why it answers goodput's plan
at the others: per world size, the decisions whose observation is outside the policy's recorded
training support (``controllers/policy/support.py``) and the features that left it.

    .venv/bin/python benchmarks/support_coverage.py --workload cifar10 --trace none --workers 8,32,64 --seed 5

Session 43: at N = 64 every decision of the default is outside its support (the world size and the
global features), so there it is goodput's plan throughout (``docs/results/s43/``).
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_POLICY = "dynamix_hvd/agent/policies/default.zip"


def coverage(workload: str, trace: str, n: int, seed: int, policy: str) -> dict:
    from dynamix_hvd.replay.runner import build_controller, run_controller
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    sim = build_sim(WorldSpec(workload, n, trace, seed))
    ctl = build_controller(f"ppo:{policy}", sim, seed)
    features: collections.Counter = collections.Counter()
    counts = {"decisions": 0, "outside": 0}
    decide = ctl.decide

    def counted(state):
        plan = decide(state)
        counts["decisions"] += 1
        if ctl.last_outside:
            counts["outside"] += 1
            features.update({f[0] for f in ctl.last_outside})
        return plan
    ctl.decide = counted
    t = run_controller(sim, "ppo", seed, controller=ctl)["time_to_target_s"]
    return {"time_to_target_s": t, **counts, "features": features.most_common()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="cifar10")
    p.add_argument("--trace", default="none")
    p.add_argument("--workers", default="8,32,64")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--policy", default=DEFAULT_POLICY)
    a = p.parse_args(argv)
    for n in (int(x) for x in a.workers.split(",")):
        r = coverage(a.workload, a.trace, n, a.seed, a.policy)
        feats = ", ".join(f"{name} {k}" for name, k in r["features"]) or "-"
        print(f"{a.workload} {a.trace} N={n:3d} seed {a.seed}: {r['decisions']} decisions, "
              f"{r['outside']} outside the support ({feats}); time to target {r['time_to_target_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
