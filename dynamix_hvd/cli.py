"""The `dynamix` command. Each subcommand lives in its own module and is imported lazily;
this file only dispatches."""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Sequence

# subcommand -> (module, help). Each module exposes add_arguments(parser) and run(args) -> int.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "probe": ("dynamix_hvd.metrics.probe", "print one JSON snapshot of every metric on this rank"),
    "run": ("dynamix_hvd.launch", "run a command with the collective-timing library preloaded"),
    "bench": ("dynamix_hvd.emulate.bench", "run controllers on an emulated heterogeneous cluster"),
    "train-policy": ("dynamix_hvd.agent.train", "train the PPO policy in the cluster simulator"),
    "eval-policy": ("dynamix_hvd.agent.evaluate", "evaluate controllers and the policy in the simulator"),
    "report": ("dynamix_hvd.report", "write a PNG report of a run directory"),
    "demo": ("dynamix_hvd.demo", "the main job: a small multi-rank training run"),
    "replay": ("dynamix_hvd.replay.runner", "controllers and a hindsight oracle on measured workload and straggler traces"),
    "capture-trace": ("dynamix_hvd.emulate.capture", "measure a scenario's workload at several global batches (Pollux format)"),
    "eval-replay": ("dynamix_hvd.agent.replay_eval", "policy vs baselines vs hindsight per replay cell, held-out seeds"),
    "policy-support": ("dynamix_hvd.agent.support_fit", "record the observations a policy was trained on in its file"),
    "select-policy": ("dynamix_hvd.agent.select_draw", "keep the fastest of several training draws on validation worlds"),
}


def _load(name: str) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return module.add_arguments, module.run


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="dynamix", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        parser.print_help()
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    name = argv[0]
    try:
        add_arguments, run = _load(name)
    except ImportError as exc:
        print(f"dynamix {name}: not available: {exc}", file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(prog=f"dynamix {name}", description=SUBCOMMANDS[name][1])
    add_arguments(p)
    args = p.parse_args(argv[1:])
    return int(run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
