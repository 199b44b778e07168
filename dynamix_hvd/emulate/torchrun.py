"""Launch the bench worker with ``torchrun`` (the ddp engine): one torchrun "node" per emulated
rank, each in its rank's network namespace when there is one, joined by torchrun's static
rendezvous at rank 0's address. Gloo's traffic then crosses the shaped links as MPI's does.

    ip netns exec dmx-..-r<i> python -m torch.distributed.run --nnodes N --node-rank i \\
        --nproc-per-node 1 --master-addr 10.213.0.10 --master-port P --max-restarts 0 \\
        -m dynamix_hvd.emulate.worker --engine ddp ...
"""
from __future__ import annotations

import os
import random
import subprocess
import time
from typing import IO, Any, Sequence

from dynamix_hvd.emulate.netns import RANK_DEV, Cluster
from dynamix_hvd.emulate.procs import kill_group


def node_commands(cluster: Cluster | None, python: str, module_args: Sequence[str], world: int,
                  port: int | None = None) -> list[list[str]]:
    """One torchrun command per rank (``module_args``: the worker module and its arguments)."""
    addr = cluster.address(0) if cluster is not None else "127.0.0.1"
    port = port or random.randint(20000, 40000)
    cmds = []
    for r in range(world):
        prefix = cluster.exec_prefix(r) if cluster is not None else []
        cmds.append([*prefix, python, "-m", "torch.distributed.run", "--nnodes", str(world), "--node-rank", str(r),
                     "--nproc-per-node", "1", "--master-addr", addr, "--master-port", str(port),
                     "--max-restarts", "0", "-m", *module_args])
    return cmds


def node_env(cluster: Cluster | None, env: dict[str, str]) -> dict[str, str]:
    full = dict(os.environ)
    full.update(env)
    for k in ("LD_PRELOAD", "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS"):   # no MPI in a DDP job
        full.pop(k, None)
    full["GLOO_SOCKET_IFNAME"] = RANK_DEV if cluster is not None else "lo"
    return full


def run_nodes(cmds: list[list[str]], env: dict[str, str], out: IO[str], timeout: float,
              log: Any = print) -> int:
    """Start every node, wait for all; on a timeout or a failed node stop the rest. Returns the
    first non-zero exit code (124 on timeout), else 0."""
    procs = [subprocess.Popen(c, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
             for c in cmds]
    deadline = time.monotonic() + timeout
    rc = 0
    try:
        while any(p.poll() is None for p in procs):
            failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if failed and not rc:
                rc = failed[0]
                deadline = min(deadline, time.monotonic() + 30)   # the others should fail on their own
            if time.monotonic() > deadline:
                log(f"  torchrun nodes still running after {'the failure' if rc else f'{timeout:.0f} s'}; killing them")
                rc = rc or 124
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            kill_group(p)
    return rc or next((p.returncode for p in procs if p.returncode), 0)
