"""Emulated network: one network namespace per rank, a veth pair from each rank to a bridge,
per-rank bandwidth (and latency where the kernel has ``sch_netem``) with ``tc``.

Layout (nothing is created in the caller's namespace, so deleting the namespaces removes
every veth, the bridge and every qdisc with them):

    dmx-<owner pid>-<tag>-sw   bridge br0 (10.213.0.1/24), the switch-side veth ends r0..rN-1;
                               mpirun runs here
    dmx-<owner pid>-<tag>-r<i> veth0 (10.213.0.<10+i>/24), lo; rank i runs here

Rank i's link shapes both directions: rank->bridge on ``veth0`` inside the rank's namespace,
bridge->rank on ``r<i>`` inside the switch namespace, so a packet from rank a to rank b sees
min(bandwidth_a, bandwidth_b) and latency_a + latency_b.

``Cluster`` is a context manager; its cleanup is idempotent, runs on exceptions, Ctrl-C and
SIGTERM, and ``cleanup_stale()`` removes namespaces whose owner process is gone (e.g. after
SIGKILL). Needs root (CAP_NET_ADMIN) and iproute2; ``netns_available()`` says whether it can.
"""
from __future__ import annotations

import atexit
import os
import re
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Sequence

PREFIX = "dmx-"
SUBNET = "10.213.0.0/24"
BRIDGE_IP = "10.213.0.1"
BRIDGE = "br0"
RANK_DEV = "veth0"
_NAME_RE = re.compile(r"^dmx-(\d+)-([0-9a-f]+)-(sw|r\d+)$")


class NetnsError(RuntimeError):
    """Creating or shaping the emulated network failed (the message has tc/ip's stderr)."""


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def list_namespaces() -> list[str]:
    """Names of all network namespaces (``ip netns list``), first word of each line."""
    p = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace_pids(ns: str) -> None:
    """Terminate every process inside ``ns`` (TERM, then KILL after a short grace)."""
    for sig, wait in ((signal.SIGTERM, 1.5), (signal.SIGKILL, 1.0)):
        pids = [int(x) for x in _run(["ip", "netns", "pids", ns], check=False).stdout.split() if x.isdigit()]
        pids = [p for p in pids if p != os.getpid()]
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _run(["ip", "netns", "pids", ns], check=False).stdout.split():
                return
            time.sleep(0.05)


def delete_namespace(ns: str) -> None:
    """Kill its processes and delete it; a namespace that does not exist is fine."""
    if ns not in list_namespaces():
        return
    _kill_namespace_pids(ns)
    _run(["ip", "netns", "del", ns], check=False)


def cleanup_stale() -> list[str]:
    """Delete ``dmx-`` namespaces whose owner process no longer exists; returns their names."""
    gone = []
    for ns in list_namespaces():
        m = _NAME_RE.match(ns)
        if m and not _pid_alive(int(m.group(1))):
            delete_namespace(ns)
            gone.append(ns)
    return gone


def netns_available() -> tuple[bool, str]:
    """(True, "") when namespaces, veth and a bridge can be created here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "not root: network namespaces need CAP_NET_ADMIN"
    probe = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}-sw"
    try:
        _run(["ip", "netns", "add", probe])
        _run(["ip", "-n", probe, "link", "add", "name", "pa", "type", "veth", "peer", "name", "pb"])
        _run(["ip", "-n", probe, "link", "add", "name", "pbr", "type", "bridge"])
        _run(["tc", "-n", probe, "qdisc", "replace", "dev", "pa", "root", "tbf", "rate", "10mbit",
              "burst", "16kb", "latency", "100ms"])
        return True, ""
    except (NetnsError, FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    finally:
        _run(["ip", "netns", "del", probe], check=False)


_NETEM: bool | None = None


def netem_available() -> bool:
    """Whether this kernel has sch_netem (for latency); probed once in a throwaway namespace."""
    global _NETEM
    if _NETEM is None:
        probe = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}-sw"
        try:
            _run(["ip", "netns", "add", probe])
            _run(["ip", "-n", probe, "link", "add", "name", "pa", "type", "veth", "peer", "name", "pb"])
            _NETEM = _run(["tc", "-n", probe, "qdisc", "add", "dev", "pa", "root", "netem", "delay", "1ms"],
                          check=False).returncode == 0
        except NetnsError:
            _NETEM = False
        finally:
            _run(["ip", "netns", "del", probe], check=False)
    return _NETEM


@dataclass(frozen=True)
class Link:
    """One rank's link: its namespace-side and switch-side veth ends. Picklable and usable
    from any process (``tc -n`` addresses namespaces by name), so a rank can apply its own
    timed link events."""

    rank_ns: str
    sw_ns: str
    sw_dev: str
    netem: bool

    def qdisc_args(self, bandwidth_mbit: float, latency_ms: float) -> list[str]:
        rate_bps = bandwidth_mbit * 1e6 / 8
        if self.netem:
            limit = max(1000, int(rate_bps * 0.5 / 1500))
            return ["netem", "delay", f"{latency_ms}ms", "rate", f"{bandwidth_mbit}mbit", "limit", str(limit)]
        burst = max(16_000, int(rate_bps * 0.002))        # 2 ms worth of tokens, >= 16 KB
        limit = max(256_000, int(rate_bps * 0.5))          # half a second of queue, no early drops
        return ["tbf", "rate", f"{int(bandwidth_mbit * 1000)}kbit", "burst", str(burst), "limit", str(limit)]

    def shape(self, bandwidth_mbit: float, latency_ms: float) -> None:
        """Set (or change) this link's bandwidth and latency, both directions."""
        q = self.qdisc_args(bandwidth_mbit, latency_ms)
        _run(["tc", "-n", self.rank_ns, "qdisc", "replace", "dev", RANK_DEV, "root", *q])
        _run(["tc", "-n", self.sw_ns, "qdisc", "replace", "dev", self.sw_dev, "root", *q])

    def to_str(self) -> str:
        return f"{self.rank_ns},{self.sw_ns},{self.sw_dev},{int(self.netem)}"

    @staticmethod
    def from_str(s: str) -> "Link":
        a, b, c, d = s.split(",")
        return Link(a, b, c, d == "1")


def read_counters(ns: str, dev: str = RANK_DEV) -> dict[str, int]:
    """rx/tx bytes and packets of ``dev`` as seen inside namespace ``ns``."""
    text = _run(["ip", "netns", "exec", ns, "cat", "/proc/net/dev"]).stdout
    return parse_proc_net_dev(text)[dev]


def parse_proc_net_dev(text: str) -> dict[str, dict[str, int]]:
    """Parse /proc/net/dev text into {iface: {rx_bytes, rx_packets, tx_bytes, tx_packets}}."""
    out = {}
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        f = [int(x) for x in rest.split()]
        out[name.strip()] = {"rx_bytes": f[0], "rx_packets": f[1], "tx_bytes": f[8], "tx_packets": f[9]}
    return out


class Cluster:
    """N rank namespaces on one bridge, shaped per rank. Use as a context manager."""

    def __init__(self, links: Sequence[tuple[float, float]], tag: str | None = None) -> None:
        if not 1 <= len(links) <= 200:
            raise NetnsError(f"{len(links)} ranks: need 1..200")
        self.links_cfg = list(links)
        self.owner = os.getpid()
        self.tag = tag or secrets.token_hex(3)
        self.sw_ns = f"{PREFIX}{self.owner}-{self.tag}-sw"
        self.rank_ns = [f"{PREFIX}{self.owner}-{self.tag}-r{i}" for i in range(len(links))]
        self.netem = False
        self.links: list[Link] = []
        self._up = False
        self._old_handlers: dict[int, object] = {}

    # ---- names and addresses ----------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return len(self.rank_ns)

    @property
    def namespaces(self) -> list[str]:
        return [self.sw_ns, *self.rank_ns]

    def address(self, rank: int) -> str:
        return f"10.213.0.{10 + rank}"

    # ---- lifecycle ---------------------------------------------------------------------------
    def setup(self) -> "Cluster":
        cleanup_stale()
        self.netem = netem_available()
        atexit.register(self.cleanup)
        self._up = True
        try:
            sw = self.sw_ns
            _run(["ip", "netns", "add", sw])
            _run(["ip", "-n", sw, "link", "set", "lo", "up"])
            _run(["ip", "-n", sw, "link", "add", "name", BRIDGE, "type", "bridge"])
            _run(["ip", "-n", sw, "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE])
            _run(["ip", "-n", sw, "link", "set", BRIDGE, "up"])
            for i, ns in enumerate(self.rank_ns):
                _run(["ip", "netns", "add", ns])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
                _run(["ip", "-n", ns, "link", "add", "name", RANK_DEV, "type", "veth",
                      "peer", "name", f"r{i}", "netns", sw])
                _run(["ip", "-n", sw, "link", "set", f"r{i}", "master", BRIDGE])
                _run(["ip", "-n", sw, "link", "set", f"r{i}", "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", RANK_DEV])
                _run(["ip", "-n", ns, "link", "set", RANK_DEV, "up"])
                link = Link(ns, sw, f"r{i}", self.netem)
                bw, lat = self.links_cfg[i]
                link.shape(bw, lat)
                self.links.append(link)
        except BaseException:
            self.cleanup()
            raise
        return self

    def cleanup(self) -> None:
        """Kill processes inside the namespaces and delete them. Safe to call many times."""
        if not self._up:
            return
        existing = set(list_namespaces())
        for ns in [*self.rank_ns, self.sw_ns]:
            if ns in existing:
                delete_namespace(ns)
        self._up = False
        try:
            atexit.unregister(self.cleanup)
        except Exception:  # noqa: BLE001 - interpreter shutting down
            pass

    def leftovers(self) -> list[str]:
        """This cluster's namespaces that still exist (empty after cleanup)."""
        return [ns for ns in list_namespaces() if ns in self.namespaces]

    def __enter__(self) -> "Cluster":
        self._install_signal_handlers()
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        try:
            self.cleanup()
        finally:
            self._restore_signal_handlers()

    def _install_signal_handlers(self) -> None:
        def to_exit(signum: int, frame: object) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        try:
            for s in (signal.SIGTERM, signal.SIGHUP):
                self._old_handlers[s] = signal.signal(s, to_exit)
        except ValueError:  # not the main thread: rely on atexit and the caller
            self._old_handlers.clear()

    def _restore_signal_handlers(self) -> None:
        for s, h in self._old_handlers.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        self._old_handlers.clear()

    # ---- use -------------------------------------------------------------------------------
    def shape(self, rank: int, bandwidth_mbit: float, latency_ms: float) -> None:
        self.links[rank].shape(bandwidth_mbit, latency_ms)

    def exec_prefix(self, rank: int) -> list[str]:
        """argv prefix that runs a command inside rank's namespace."""
        return ["ip", "netns", "exec", self.rank_ns[rank]]

    def switch_prefix(self) -> list[str]:
        """argv prefix that runs a command (mpirun) in the switch namespace."""
        return ["ip", "netns", "exec", self.sw_ns]

    def counters(self, rank: int) -> dict[str, int]:
        return read_counters(self.rank_ns[rank])

    def mpirun_args(self) -> list[str]:
        """MCA options so MPI's TCP transport and out-of-band channel use the emulated links
        (no shared-memory shortcut between the 'nodes')."""
        return ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", SUBNET,
                "--mca", "oob_tcp_if_include", SUBNET]

    def mpirun_env(self) -> dict[str, str]:
        return {"PMIX_MCA_ptl_tcp_if_include": BRIDGE, "OMPI_MCA_pml": "ob1"}


def mpirun_base() -> list[str]:
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def mpmd_command(cluster: Cluster | None, argv_for_rank: Sequence[Sequence[str]],
                 env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The full mpirun command (and its environment) running ``argv_for_rank[i]`` as rank i,
    inside rank i's namespace when ``cluster`` is given, else over TCP on loopback."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    exports: list[str] = []
    for k in sorted(env or {}):
        exports += ["-x", k]
    cmd: list[str] = []
    if cluster is not None:
        full_env.update(cluster.mpirun_env())
        cmd += cluster.switch_prefix() + mpirun_base() + cluster.mpirun_args()
    else:
        cmd += mpirun_base() + ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo",
                                "--mca", "oob_tcp_if_include", "lo"]
    for r, argv in enumerate(argv_for_rank):
        if r:
            cmd.append(":")
        prefix = cluster.exec_prefix(r) if cluster is not None else []
        cmd += ["-np", "1", *exports, *prefix, *argv]
    return cmd, full_env


if __name__ == "__main__":  # hold a cluster until interrupted (used by the cleanup test)
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with Cluster([(100.0, 0.0)] * n) as c:
        print(" ".join(c.namespaces), flush=True)
        if len(sys.argv) > 2 and sys.argv[2] == "--with-process":
            subprocess.Popen(c.exec_prefix(0) + ["sleep", "300"])
        while True:
            time.sleep(0.2)
