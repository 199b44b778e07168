"""Fidelity of the replay simulator to the data it is built from.

    .venv/bin/python benchmarks/bench_replay_fidelity.py

Every (shipped workload, measured global batch B, N in 2/4/8/16) for which a measured placement of N
replicas at local batch B/N exists: a homogeneous job (hardware factors 1, no fluctuation, static
plan at B) is replayed and its time to the default target compared with ``iterations_to_target x
measured step time``, both computed straight from the CSV files by the unit test's independent
helpers (``tests/unit/test_replay.py``: the test asserts 2% for every case).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from test_replay import _iterations_to_target, _measured_step  # noqa: E402

from dynamix_hvd.replay.progress import build_progress  # noqa: E402
from dynamix_hvd.replay.runner import make_world, run_controller  # noqa: E402
from dynamix_hvd.traces import load_pollux, shipped_workload, shipped_workloads  # noqa: E402


def main() -> int:
    worst = 0.0
    for w in shipped_workloads():
        d = shipped_workload(w)
        pm = build_progress(load_pollux(d))
        for f in sorted(d.glob("validation-*.csv"), key=lambda p: int(p.stem.split("-")[1])):
            B = int(f.stem.split("-")[1])
            for n in (2, 4, 8, 16):
                step = _measured_step(d, n, B // n) if B % n == 0 else None
                if step is None:
                    continue
                got = run_controller(make_world(str(d), "none", n, speeds=[1.0], base_batch=B // n).sim,
                                     "static", 0)["time_to_target_s"]
                want = _iterations_to_target(f, B, pm.target, pm.start, pm.increasing) * step
                worst = max(worst, abs(got / want - 1))
                print(f"{w:12s} B={B:6d} N={n:3d} b={B // n:5d}  replay {got:9.1f} s  "
                      f"iterations x measured step {want:9.1f} s  {100 * (got / want - 1):+.2f}%")
    print(f"largest deviation {100 * worst:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
