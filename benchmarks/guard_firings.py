"""How often the live goodput guard acts in the replay: per cell (workload x trace x N), over the seeds,
the episodes in which it reverted a controller's plan and left it in charge (``guard_retries``) and
those in which it handed the job on (a fallback), for each controller run behind it
(``replay.runner.run_controller(guard=True)``, what ``eval-replay --guard on`` runs).

    .venv/bin/python benchmarks/guard_firings.py --workloads benchmarks/heldout_workloads/yolov3 \\
        --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --seeds 5-14 --controllers goodput,ppo
"""
from __future__ import annotations

import argparse
from multiprocessing import get_context

from dynamix_hvd.agent.replay_eval import seed_range
from dynamix_hvd.replay.worlds import SHIPPED_WORKLOADS, WorldSpec, build_sim


def _episode(task: tuple[str, str, int, int, str]) -> tuple[tuple[str, str, int, str], int, bool]:
    from dynamix_hvd.agent.replay_eval import _one_thread
    from dynamix_hvd.replay.runner import run_controller
    _one_thread()
    wl, trace, n, seed, ctl = task
    r = run_controller(build_sim(WorldSpec(wl, n, trace, seed)), ctl, seed, guard=True)
    return (wl, trace, n, ctl), r["reverts"], r["fallback"] is not None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default=",".join(SHIPPED_WORKLOADS))
    p.add_argument("--traces", default="none,job_3_norm,cov:coefficient_variation")
    p.add_argument("--workers", default="8,32")
    p.add_argument("--seeds", default="5-14", metavar="LO-HI", type=seed_range)
    p.add_argument("--controllers", default="goodput,ppo")
    p.add_argument("--jobs", type=int, default=2)
    a = p.parse_args(argv)
    tasks = [(wl, tr, int(n), s, c) for wl in a.workloads.split(",") for tr in a.traces.split(",")
             for n in a.workers.split(",") for c in a.controllers.split(",") for s in a.seeds]
    with get_context("spawn").Pool(a.jobs) as pool:
        got = pool.map(_episode, tasks, chunksize=1)
    cells: dict[tuple, list[int]] = {}
    for cell, reverts, fell in got:
        c = cells.setdefault(cell, [0, 0, 0])
        c[0] += 1
        c[1] += reverts > 0
        c[2] += fell
    print(f"{'workload':12s} {'trace':26s} {'N':>3s} {'controller':10s} episodes  reverted  fell back")
    tot: dict[str, list[int]] = {}
    for (wl, tr, n, ctl), (k, rev, fell) in sorted(cells.items()):
        print(f"{wl.split('/')[-1]:12s} {tr:26s} {n:3d} {ctl:10s} {k:8d}  {rev:8d}  {fell:9d}")
        t = tot.setdefault(ctl, [0, 0, 0])
        t[0], t[1], t[2] = t[0] + k, t[1] + rev, t[2] + fell
    for ctl, (k, rev, fell) in tot.items():
        print(f"{ctl}: the guard reverted and kept the controller in {rev} of {k} episodes, handed the job on in {fell}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
