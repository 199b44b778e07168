"""How long a crafted file takes to be refused (issue 23): a checkpoint and a policy zip each carrying
a pickle payload that would create a file (the payloads of scripts/bad_inputs.py). Prints the time
per refusal (min-max over --loads loads; the first policy load includes imports), the error, and
whether the payload ran (it must not).

    .venv/bin/python benchmarks/bench_refusal.py
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import bad_inputs as bad  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", type=int, default=5)
    args = ap.parse_args()
    from dynamix_hvd import checkpoint
    from dynamix_hvd.controllers import make_controller
    from dynamix_hvd.plan import PlanBounds

    ck = bad.f("evil.pt", bad._torch_bytes({"dynamix": bad._Payload()}))
    zp = bad._policy_zip("w.zip", {"policy.pth": bad._torch_bytes({"w": bad._Payload()})})
    cases = [("checkpoint (checkpoint.load)", lambda: checkpoint.load(ck)),
             ("policy zip (make_controller('ppo'))",
              lambda: make_controller("ppo", PlanBounds(max_batch=(64, 64)), 8, policy=str(zp)))]
    for name, fn in cases:
        times, msg = [], "ACCEPTED"
        for _ in range(args.loads):
            t0 = time.perf_counter()
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - the refusal is what is measured
                msg = f"{type(exc).__name__}: {exc}"
            times.append(time.perf_counter() - t0)
        print(f"{name}: refused in {min(times) * 1e3:.1f}-{max(times) * 1e3:.1f} ms ({args.loads} loads): {msg[:200]}")
    ran = (bad.TMP / "PWNED").exists()
    print(f"payload ran: {ran}")
    if ran:
        raise SystemExit("a loader ran a pickle payload")


if __name__ == "__main__":
    main()
