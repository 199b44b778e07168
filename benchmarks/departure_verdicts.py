"""Per job: the verdicts goodput gave the policy's departures (refuted R / kept C, in order) and
the job's time over goodput's on the same seed, so a guard rule can be read off the shipped cells
and checked on held-out workloads.

    python benchmarks/departure_verdicts.py --workloads cifar10,bert --traces none,job_3_norm \\
        --workers 8,32 --seeds 5-9 --policy "ppo" --out runs/s47/verdicts.json
"""
from __future__ import annotations

import argparse
import json
import time

from dynamix_hvd.replay.runner import build_controller, make_world, run_controller


def verdicts(sim, spec: str, seed: int) -> tuple[float | None, str, list[int]]:
    ctl = build_controller(spec, sim, seed)
    seq, at = [], []
    orig = ctl.decide

    def decide(*a, **k):
        r = orig(*a, **k)
        v = getattr(getattr(ctl, "refute", None), "last_verdict", None) or ""
        if v.startswith("goodput undid"):
            seq.append("R"); at.append(ctl.refute.t)
        elif v.startswith("goodput kept"):
            seq.append("C"); at.append(ctl.refute.t)
        return r
    ctl.decide = decide
    out = run_controller(sim, spec, seed, controller=ctl)
    return out["time_to_target_s"], "".join(seq), at


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="cifar10,bert,deepspeech2,ncf")
    ap.add_argument("--traces", default="none,job_3_norm,cov:coefficient_variation")
    ap.add_argument("--workers", default="8,32")
    ap.add_argument("--seeds", default="5-9")
    ap.add_argument("--policy", default="ppo")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.seeds.split("-"))
    rows, t0 = [], time.time()
    for wl in args.workloads.split(","):
        for tr in args.traces.split(","):
            for n in (int(x) for x in args.workers.split(",")):
                w = make_world(wl, tr, n)
                for s in range(lo, hi + 1):
                    g = run_controller(w.sim, "goodput", s)["time_to_target_s"]
                    t, seq, at = verdicts(w.sim, args.policy, s)
                    r = t / g if t and g else None
                    rows.append({"workload": wl, "trace": tr, "n": n, "seed": s, "ratio": r, "verdicts": seq, "at": at})
                    print(f"{wl} {tr} N={n} seed {s}: {r if r is None else round(r, 3)} {seq} ({time.time() - t0:.0f}s)",
                          flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
