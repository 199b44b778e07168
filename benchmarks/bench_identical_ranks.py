"""First contact (issue 26): the README's quickstart on identical ranks, no emulation.

    .venv/bin/python benchmarks/bench_identical_ranks.py [--np 2,4] [--launchers horovodrun,mpirun]
        [--controllers static,proportional,goodput,ppo] [--repeats 3] [--epochs 3] [--out runs/identical]

Runs ``DYNAMIX_CONTROLLER=C DYNAMIX_RUN_DIR=D examples/mnist1d_horovod.py --epochs E`` for every launcher x
world size x controller x repeat (interleaved), reads every plan the run's ``events.jsonl``
recorded, and prints per cell: the largest deviation of any rank from the even split over the
whole run, whether the global batch ever changed, the number of plan changes, and the final test
accuracy (median, min-max over the repeats) against static's. Exit code 1 when a controller
moved a rank more than 10% from the even split, changed the global batch, or ended more than
1 point below static's median accuracy.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from dynamix_hvd.runlog import read_decisions

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


def launch(launcher: str, np_: int, controller: str, epochs: int, run_dir: Path) -> tuple[float, list[list[int]]]:
    # the example is the README's quickstart: settings come from DYNAMIX_* environment variables
    script = [str(REPO / "examples" / "mnist1d_horovod.py"), "--epochs", str(epochs)]
    if launcher == "horovodrun":
        cmd = [str(Path(PY).parent / "horovodrun"), "-np", str(np_), PY] + script
    else:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "DYNAMIX_CONTROLLER", "-x", "DYNAMIX_RUN_DIR",
               "-np", str(np_), PY, "-m", "mpi4py"] + script
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               DYNAMIX_CONTROLLER=controller, DYNAMIX_RUN_DIR=str(run_dir))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    m = re.findall(r"final test accuracy ([0-9.]+)", out.stdout)
    if not m:
        raise RuntimeError(f"no final accuracy in the output of {' '.join(cmd)}:\n{out.stdout[-2000:]}")
    plans = [list(rec.next_plan.batch_sizes) for rec in read_decisions(run_dir / "events.jsonl")]
    if not plans:
        raise RuntimeError(f"{run_dir / 'events.jsonl'} records no decision: nothing was tested")
    return float(m[-1]), plans


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", default="2,4")
    p.add_argument("--launchers", default="horovodrun,mpirun")
    p.add_argument("--controllers", default="static,proportional,goodput,ppo")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--out", default="runs/identical")
    args = p.parse_args()
    out = Path(args.out)
    ctls = args.controllers.split(",")
    res: dict[tuple[str, int, str], list[tuple[float, list[list[int]]]]] = {}
    for launcher in args.launchers.split(","):
        for np_ in (int(x) for x in args.np.split(",")):
            for rep in range(args.repeats):
                for c in ctls:
                    d = out / f"{launcher}-np{np_}-{c}-r{rep}"
                    d.mkdir(parents=True, exist_ok=True)
                    res.setdefault((launcher, np_, c), []).append(launch(launcher, np_, c, args.epochs, d))
    print(f"command: {' '.join(sys.argv)}")
    print(f"{'launcher':<11}{'np':>3}  {'controller':<13}{'max dev. from even':>19}{'B changed':>10}"
          f"{'plan changes':>13}  accuracy median (min-max)  vs static")
    ok = True
    for (launcher, np_, c), runs in res.items():
        base = 32
        devs = [max(abs(b - base) / base for plan in plans for b in plan) if plans else 0.0 for _, plans in runs]
        bchg = any(sum(plan) != base * np_ for _, plans in runs for plan in plans)
        changes = [sum(1 for a, b in zip(plans, plans[1:]) if a != b) + (1 if plans and plans[0] != [base] * np_ else 0)
                   for _, plans in runs]
        accs = [a for a, _ in runs]
        static = statistics.median(a for a, _ in res[(launcher, np_, "static")]) if (launcher, np_, "static") in res \
            else float("nan")
        d_acc = statistics.median(accs) - static
        bad = max(devs) > 0.10 or bchg or d_acc < -0.01
        ok &= not bad
        print(f"{launcher:<11}{np_:>3}  {c:<13}{max(devs):>18.1%}{'yes' if bchg else 'no':>10}"
              f"{max(changes):>13}  {statistics.median(accs):.4f} ({min(accs):.4f}-{max(accs):.4f})"
              f"   {100 * d_acc:+.1f} pt{'  <-- FAILS' if bad else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
