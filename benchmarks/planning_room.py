"""How much of the room behind the safety layer is planning (issue 19): per replay cell, the
hindsight oracle behind the safety layer's global rules (``hindsight_safe``: greedy, ramps,
causal_safe) against the same plus a beam search of width W over every safe candidate at every
decision (``oracle._beam_safe``), both relative to goodput, medians over seeds. A beam that finds
much more than the greedy schedule means the rules' dynamics (the noise-scale estimate's hold)
reward sequencing the growth of the global batch, which a controller could learn without knowing
the workload.

    PYTHONPATH=. .venv/bin/python benchmarks/planning_room.py --seeds 3 --width 16
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from dynamix_hvd.replay.oracle import run_hindsight_safe
from dynamix_hvd.replay.runner import run_controller
from dynamix_hvd.replay.worlds import WorldSpec, build_sim


def one_curve(sim) -> None:
    """Make ``sim`` measure every noise scale on the static batch's run, whatever batch runs (this
    sim only: its progress model is shared by every sim of the workload). The measured runs of one
    workload differ by up to 5x at the same progress (ncf at level 0.5: B = 256 52k, 1024 291k,
    4096 79k), so in the replay the estimate a controller reads jumps when its global batch
    changes; a live job's does not."""
    B0 = float(sim.B0)
    sim.true_noise_scale = lambda B: sim.pm.noise_scale(sim.P, B0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="bert,cifar10,deepspeech2,ncf")
    p.add_argument("--traces", default="none,job_3_norm,cov:coefficient_variation")
    p.add_argument("--workers", default="8,32")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed-offset", type=int, default=5)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--gns-model", default="run", choices=("run", "continuous"),
                   help="ReplaySim's gns_model: how the measured noise scale moves when the batch changes")
    p.add_argument("--one-gns-curve", action="store_true",
                   help="the noise scale every run reads is the static batch B0's curve at the same progress "
                        "(the replay reads the run measured at the batch running, which jumps at a change)")
    a = p.parse_args()
    t0 = time.perf_counter()
    seeds = range(a.seed_offset, a.seed_offset + a.seeds)
    per_wl: dict[str, list[tuple[float, float]]] = {}
    print(f"| workload | trace | N | goodput s | hindsight_safe / goodput | + beam {a.width} / goodput |")
    print("|---|---|---|---|---|---|")
    for wl in a.workloads.split(","):
        for tr in a.traces.split(","):
            for n in (int(x) for x in a.workers.split(",")):
                g, h, b = [], [], []
                for s in seeds:
                    sim = build_sim(WorldSpec(wl, n, tr, s))
                    sim.gns_model = a.gns_model
                    if a.one_gns_curve:
                        one_curve(sim)
                    g.append(run_controller(sim, "goodput", s)["time_to_target_s"] or np.inf)
                    h.append(run_hindsight_safe(sim, s)["time_to_target_s"] or np.inf)
                    b.append(run_hindsight_safe(sim, s, beam=a.width)["time_to_target_s"] or np.inf)
                G = float(np.median(g))
                rh, rb = float(np.median(h)) / G, float(np.median(b)) / G
                per_wl.setdefault(wl.rsplit("/", 1)[-1], []).append((rh, rb))
                label = tr.replace("cov:coefficient_variation", "CoV").replace("_norm", "")
                print(f"| {wl.rsplit('/', 1)[-1]} | {label} | {n} | {G:.0f} | {rh:.3f} | {rb:.3f} |", flush=True)
    print()
    for wl, v in per_wl.items():
        x = np.array(v)
        print(f"{wl}: geomean hindsight_safe/goodput {np.exp(np.log(x[:, 0]).mean()):.3f}, "
              f"with beam {np.exp(np.log(x[:, 1]).mean()):.3f}")
    print(f"\n{a.seeds} seeds ({a.seed_offset}..{a.seed_offset + a.seeds - 1}), width {a.width}, "
          f"gns model {a.gns_model}, {'one noise-scale curve (B0), ' if a.one_gns_curve else ''}"
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
