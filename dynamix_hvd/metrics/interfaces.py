"""Which network interfaces and which GPU this rank's collector watches (pure functions of
the environment and a /sys tree, so they are tested on fixtures)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

# Environment variables naming the interface MPI / Horovod / NCCL / torch.distributed's gloo
# traffic uses, in the order they are trusted. DYNAMIX_IFACES is ours and always wins. The
# collector and the stall watchdog (watchdog.py) read the same list.
IFACE_HINTS = ("DYNAMIX_IFACES", "OMPI_MCA_btl_tcp_if_include", "HOROVOD_GLOO_IFACE", "NCCL_SOCKET_IFNAME",
               "GLOO_SOCKET_IFNAME")
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "LOCAL_RANK", "MPI_LOCALRANKID")


def _existing(sys_root: str) -> set[str]:
    net = Path(sys_root) / "class" / "net"
    return {p.name for p in net.iterdir()} if net.is_dir() else set()


def choose_interfaces(env: Mapping[str, str] | None = None, sys_root: str = "/sys") -> list[str] | None:
    """Interfaces named by the first hint variable that names existing interfaces.

    Entries that are not plain interface names (CIDR ranges, NCCL's ``^``/``=`` prefixes) are
    ignored. None means "no hint": the native default applies (every interface that is up,
    not loopback or a virtual helper; ``lo`` when nothing else exists)."""
    env = os.environ if env is None else env
    present = _existing(sys_root)
    for var in IFACE_HINTS:
        raw = env.get(var, "")
        names = [n.strip() for n in raw.split(",") if n.strip()]
        names = [n for n in names if not n.startswith(("^", "=")) and "/" not in n and n in present]
        if names:
            return names
    return None


def local_rank(env: Mapping[str, str] | None = None) -> int:
    """Node-local rank from the launcher's environment (0 when not launched by one)."""
    env = os.environ if env is None else env
    for var in LOCAL_RANK_VARS:
        if env.get(var, "").strip().isdigit():
            return int(env[var])
    return 0


def gpu_index(env: Mapping[str, str] | None = None) -> int:
    """NVML index of this rank's GPU: local rank mapped through CUDA_VISIBLE_DEVICES when that
    lists plain indices (NVML ignores CUDA_VISIBLE_DEVICES, so the mapping is done here)."""
    env = os.environ if env is None else env
    lr = local_rank(env)
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and all(v.isdigit() for v in visible):
        return int(visible[lr % len(visible)])
    return lr
