"""`dynamix run -- CMD...`: run a command with the collective-timing library
(libdynamix_pmpi.so) preloaded into every MPI rank.

- `dynamix run -- mpirun -np 4 python train.py`: adds `-x LD_PRELOAD=<lib>` to mpirun (Open
  MPI only forwards variables named with -x), leaving mpirun's own environment alone.
- `dynamix run -- horovodrun -np 4 python train.py` (or any other command): sets LD_PRELOAD in
  the environment; horovodrun forwards its environment to every worker.
- `python -m dynamix_hvd.launch --print-preload` prints the library path, for hand-written
  command lines: `mpirun -x LD_PRELOAD=$(python -m dynamix_hvd.launch --print-preload) ...`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

LIB_NAME = "libdynamix_pmpi.so"
LIB_ENV = "DYNAMIX_PMPI_LIB"  # overrides where the library is looked for
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun")


def preload_path() -> Path:
    """Absolute path of libdynamix_pmpi.so; FileNotFoundError naming the fix when absent."""
    override = os.environ.get(LIB_ENV)
    candidates = [Path(override)] if override else []
    candidates.append(Path(__file__).resolve().parent / "lib" / LIB_NAME)
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise FileNotFoundError(
        f"{LIB_NAME} not found (looked at {', '.join(map(str, candidates))}). It is built with the package when "
        "MPI is found by CMake: pip install --no-build-isolation -e . (or set DYNAMIX_PMPI_LIB)")


def _prepend_preload(current: str, lib: str) -> str:
    parts = [p for p in current.replace(":", " ").split() if p and p != lib]
    return " ".join([lib, *parts])


def preload_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of env (default os.environ) with the library first in LD_PRELOAD."""
    out = dict(os.environ if env is None else env)
    out["LD_PRELOAD"] = _prepend_preload(out.get("LD_PRELOAD", ""), str(preload_path()))
    return out


def preload_command(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run `cmd` with the library preloaded in its ranks."""
    cmd = list(cmd)
    base = dict(os.environ if env is None else env)
    if cmd and Path(cmd[0]).name in MPI_LAUNCHERS:
        value = _prepend_preload(base.get("LD_PRELOAD", ""), str(preload_path()))
        return [cmd[0], "-x", f"LD_PRELOAD={value}", *cmd[1:]], base
    return cmd, preload_env(base)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--print-preload", action="store_true", help="print the library path and exit")
    parser.add_argument("--print-command", action="store_true", help="print the command that would run and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def run(args: argparse.Namespace) -> int:
    try:
        if args.print_preload:
            print(preload_path())
            return 0
        cmd = [c for c in args.command]
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            print("dynamix run: no command given (usage: dynamix run -- CMD [ARGS...])", file=sys.stderr)
            return 2
        full, env = preload_command(cmd)
    except FileNotFoundError as exc:
        print(f"dynamix run: {exc}", file=sys.stderr)
        return 2
    if args.print_command:
        print(" ".join(full))
        return 0
    try:
        return subprocess.call(full, env=env)
    except FileNotFoundError:
        print(f"dynamix run: command not found: {cmd[0]}", file=sys.stderr)
        return 127
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dynamix_hvd.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
