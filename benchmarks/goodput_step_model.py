"""The goodput controller's predicted step time against the replay's true one (issue 19).

Runs goodput in one ``eval-replay`` world and, at a few decisions, prints for each candidate global
batch the step time goodput's throughput model predicts (affine compute fit + the measured
allreduce, with the overlap it has measured) and the true step time of the equal-time split at the
speeds of the interval that has just ended (the causal oracle's):

    .venv/bin/python benchmarks/goodput_step_model.py --workload cifar10 --workers 8 --seed 5
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    import dynamix_hvd.controllers.goodput as gmod
    from dynamix_hvd.replay.oracle import _equal_time, last_interval_multipliers
    from dynamix_hvd.replay.runner import run_controller
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="cifar10")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--trace", default="none")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--at", default="1,5,20,60,120", help="decisions to print")
    a = p.parse_args(argv)
    sim = build_sim(WorldSpec(a.workload, a.workers, a.trace, a.seed))
    orig = gmod.GoodputController.predict
    log = []

    def predict(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares=None):
        g, b = orig(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares)
        tot = np.asarray(totals, float)
        T, _ = _equal_time(sim, last_interval_multipliers(sim), tot)
        model = gmod.step_time(np.max(alpha + beta * b, axis=1), comm, overlap)
        log.append((sim.decisions, tot, model, T, comm, overlap, float(np.median(alpha)), float(np.median(beta))))
        return g, b
    gmod.GoodputController.predict = predict
    try:
        r = run_controller(sim, "goodput", a.seed)
    finally:
        gmod.GoodputController.predict = orig
    print(f"{a.workload} N={a.workers} trace {a.trace} seed {a.seed}: goodput reaches the target in "
          f"{r['time_to_target_s']:.0f} s; global batches {sorted(set(r['schedule']))}")
    for d in (int(x) for x in a.at.split(",")):
        e = next((e for e in log if e[0] >= d), None)
        if e is None:
            continue
        dd, tot, model, T, comm, ov, al, be = e
        print(f"decision {dd}: measured allreduce {comm * 1e3:.1f} ms, overlap {ov:.2f}, "
              f"compute fit alpha {al * 1e3:.1f} ms + beta {be * 1e3:.3f} ms/sample (medians over ranks)")
        for i in range(tot.size):
            print(f"   B {tot[i]:7.0f}  predicted {model[i] * 1e3:7.1f} ms  true {T[i] * 1e3:7.1f} ms  "
                  f"ratio {model[i] / T[i]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
