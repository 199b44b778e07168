"""A softer pass action: a pass-action policy whose pass grows no further than a looser hold (session 51).

Session 50's pass action (``train-policy --pass-hold --pass-action``) takes goodput's choice with the
noise-scale estimate counted as stable: on ncf that is the whole room behind the hold (goodput without
it 0.852x), on ncf's curves with cifar10's steps it costs (goodput without it up to 1.066x), and the
policy learned to pass on ncf's statistics whatever the steps. Goodput with the hold's margin at 3
instead of 10 (``benchmarks/goodput_gap.py --modes margin3``) keeps most of ncf's gain (0.916x) and
less of that cost. This runs a trained pass-action policy with its pass clipped to that looser room
(growth only up to ``noise_scale_room x GROWTH_MARGIN / M`` while the estimate is unstable; shrinking
and a stable estimate as before): the policy's *when* unchanged, *how far* softer. An experiment
(monkeypatched, not an option of the product); goodput's times are read from an ``eval-replay`` cache
when it has them (a cache of the same code: its keys do not name the code). ``--margins=-1`` ("fixedheld"):
the pass action as trained, the policy's fixed global scales held by the hold. The figures in
``docs/results/s51/soft_pass_*.txt`` and ``fixed_scales_held.txt`` were measured with the margin of 10, before
``stats.GROWTH_MARGIN`` became 3, against session 50's caches.

    python benchmarks/soft_pass.py runs/s50/passb_s1_sup.zip --margins 3,1 --workloads ncf \
        --cache runs/s50/eval_cache.json --seeds 20
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing as mp
from pathlib import Path

import numpy as np

_MARGIN: list[float] = [0.0]


def _patch() -> None:
    from dynamix_hvd.controllers.goodput import GoodputController
    from dynamix_hvd.stats import GROWTH_MARGIN
    choose, unheld = GoodputController.choose, GoodputController.unheld_choice

    def soft_choose(self, state, incumbent=None):
        m = _MARGIN[0]
        self._soft = (bool(state.glob.noise_scale_stable),
                      float(state.glob.noise_scale_room) * GROWTH_MARGIN / m if m > 0 else math.inf)
        return choose(self, state, incumbent)

    def soft_unheld(self):
        B = unheld(self)
        if B is None or _MARGIN[0] <= 0 or self._last_inputs is None:
            return B
        stable, room = self._soft
        B_now = self._last_inputs[2]
        if not stable and B > B_now:
            B = max(B_now, min(B, room))
        return B
    GoodputController.choose, GoodputController.unheld_choice = soft_choose, soft_unheld

    # margin -1 ("fixedheld"): the pass action passes the hold, the fixed global scales do not
    # (what ``train-policy --pass-only`` trains with since session 52: ActionConfig.pass_only)
    from dynamix_hvd.controllers.ppo import PPOController
    decide = PPOController.decide

    def held_decide(self, state):
        if _MARGIN[0] < 0 and not self.action_config.pass_only:
            self.action_config = dataclasses.replace(self.action_config, pass_only=True)
        return decide(self, state)
    PPOController.decide = held_decide


def _run(task):
    wl, trace, n, seed, ctl, margin = task
    from dynamix_hvd.replay.runner import run_one
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    _MARGIN[0] = margin
    return task, run_one(build_sim(WorldSpec(wl, n, trace, seed)), ctl, seed)["time_to_target_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy")
    ap.add_argument("--margins", default="3")
    ap.add_argument("--workloads", default="ncf")
    ap.add_argument("--traces", default="none,job_3_norm,cov:coefficient_variation")
    ap.add_argument("--workers", default="8,32")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed-offset", type=int, default=5)
    ap.add_argument("--cache", default=None, help="eval-replay cache with goodput's times")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    _patch()
    margins = [float(m) for m in a.margins.split(",")]
    cache = json.loads(Path(a.cache).read_text()) if a.cache and Path(a.cache).is_file() else {}
    ctl = f"ppo:{a.policy}"
    cells = [(w, t, int(n)) for w in a.workloads.split(",") for t in a.traces.split(",") for n in a.workers.split(",")]
    seeds = range(a.seed_offset, a.seed_offset + a.seeds)
    times: dict = {}
    tasks = []
    for wl, tr, n in cells:
        for s in seeds:
            key = f"{wl}|{tr}|{n}|{s}|goodput"
            if key in cache:
                times[(wl, tr, n, s, "goodput", 0.0)] = cache[key]
            else:
                tasks.append((wl, tr, n, s, "goodput", 0.0))
            tasks += [(wl, tr, n, s, ctl, m) for m in [0.0] + margins]
    with mp.get_context("fork").Pool(a.jobs) as pool:
        for task, t in pool.imap_unordered(_run, tasks, chunksize=1):
            times[task] = t
    labels = [(ctl, 0.0, "pass")] + [(ctl, m, f"soft{m:g}" if m > 0 else "fixedheld") for m in margins]
    print("| workload | trace | N | goodput s | " + " | ".join(f"{lab} / goodput" for _, _, lab in labels) + " |")
    print("|---|---|---|---|" + "---|" * len(labels))
    ratios = {lab: [] for _, _, lab in labels}
    per_wl: dict = {}
    for wl, tr, n in cells:
        g = float(np.median([times[(wl, tr, n, s, "goodput", 0.0)] or math.inf for s in seeds]))
        row = []
        for c, m, lab in labels:
            r = float(np.median([times[(wl, tr, n, s, c, m)] or math.inf for s in seeds])) / g
            ratios[lab].append(r)
            per_wl.setdefault((wl, lab), []).append(r)
            row.append(f"{r:.3f}")
        print(f"| {wl} | {tr} | {n} | {g:.0f} | " + " | ".join(row) + " |", flush=True)
    for _, _, lab in labels:
        r = np.array(ratios[lab])
        wls = ", ".join(f"{w.rsplit('/', 1)[-1]} {math.exp(np.mean(np.log(per_wl[(w, lab)]))):.3f}"
                        for w in a.workloads.split(","))
        print(f"{lab}: geomean {math.exp(np.mean(np.log(r))):.3f}, largest cell {r.max():.3f}; {wls}")


if __name__ == "__main__":
    main()
