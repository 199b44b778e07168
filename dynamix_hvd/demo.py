"""``dynamix demo`` (what ``make demo`` runs): the main job.

One heterogeneous emulated cluster (shipped scenario ``hetero4x``: 4 ranks, one 4x slower
per sample), real Horovod training of a small CNN on MNIST-1D, run twice on the same seed:
static per-rank batches (plain Horovod) and the best controller available. Prints the
results table (time to target accuracy on the training clock, final accuracy, throughput,
balance) and writes ``OUT/report.png``.

The best controller available is the shipped PPO policy when it loads, otherwise
``proportional`` (the best measured baseline on this scenario; see docs/bench.md), and the demo
then says on stderr why the policy did not load (the error names the file).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

FALLBACK_BEST = "proportional"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="hetero4x", help="scenario file or shipped name (default hetero4x)")
    p.add_argument("--controller", default=None, help="controller to compare with static (default: best available)")
    p.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    p.add_argument("--max-time-s", type=float, default=None, help="training budget per run (default: scenario's)")
    p.add_argument("--until", choices=("target", "budget"), default="target",
                   help="stop each run at the target accuracy (default) or train the whole budget")
    p.add_argument("--no-netns", action="store_true", help="network-free variant (no namespaces / tc)")


def best_available(policy: str | None = None) -> tuple[str, str | None]:
    """('ppo', None) when the policy (default: the shipped one) loads, else (the best baseline,
    why the policy did not load: the exception's type and message, naming the file)."""
    try:
        from dynamix_hvd.controllers.ppo import load_policy

        load_policy(policy)
        return "ppo", None
    except Exception as e:  # noqa: BLE001 - any problem means: not available, and the user is told why
        return FALLBACK_BEST, f"{type(e).__name__}: {e}"


def run(args: argparse.Namespace) -> int:
    from dynamix_hvd.emulate.bench import bench, format_table

    best = args.controller
    if best is None:
        best, why = best_available()
        if why is not None:
            print(f"dynamix demo: the shipped policy did not load ({why}); comparing static with {best}",
                  file=sys.stderr, flush=True)
    out = Path(args.out)
    print(f"dynamix demo: static vs {best} on scenario {args.scenario}; output in {out}", flush=True)
    results = bench(args.scenario, ["static", best], out, no_netns=args.no_netns, max_time_s=args.max_time_s,
                    until=args.until)
    print()
    print(format_table(results))
    ctl = results["controllers"]
    a, b = (ctl.get("static") or {}).get("time_to_target_s"), (ctl.get(best) or {}).get("time_to_target_s")
    if a and b:
        print(f"\n{best} reached {results['target_accuracy']:.0%} test accuracy in {b:.1f} s of training, "
              f"static in {a:.1f} s ({b / a:.2f}x).")
    png = out / "report.png"
    print(f"wrote {out / 'results.json'}" + (f" and {png}" if png.exists() else " (report.png missing)"))
    return 0 if all("error" not in m for m in ctl.values()) else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="dynamix demo")
    add_arguments(p)
    sys.exit(run(p.parse_args()))
