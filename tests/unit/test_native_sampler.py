"""The native sampler: ring, thread, GIL, windowed rates over changing fixture trees
(wrap-around, reset, saturation, missing files) and real traffic over a veth pair in a
throw-away network namespace and over loopback."""
from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynamix_hvd import load_native
from dynamix_hvd.metrics import Collector, CollectorConfig

n = load_native()
FIX = Path(__file__).resolve().parent.parent / "fixtures"
U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF


def config(sys_root: Path, proc_root: Path = FIX / "proc", **kw: object) -> object:
    c = n.SamplerConfig()
    c.sys_root, c.proc_root, c.nvml = str(sys_root), str(proc_root), False
    for k, v in kw.items():
        setattr(c, k, v)
    return c


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the Ethernet + InfiniBand fixtures under one /sys root."""
    root = tmp_path / "sys"
    shutil.copytree(FIX / "sys_eth", root)
    shutil.copytree(FIX / "sys_ib" / "class" / "infiniband", root / "class" / "infiniband")
    return root


def put(path: Path, value: object) -> None:
    # rewrite in place: the sampler keeps the file open and re-reads it with pread
    with open(path, "r+") as f:
        f.truncate(0)
        f.write(f"{value}\n")


def link(w: object, name: str) -> object:
    return next(l for l in w.links if l.name == name)


def test_config_errors_become_value_errors(tree: Path) -> None:
    with pytest.raises(ValueError, match="nope0"):
        n.Sampler(config(tree, interfaces=["nope0"]))
    with pytest.raises(ValueError, match="period"):
        n.Sampler(config(tree, period_s=0.0))
    with pytest.raises(ValueError, match="capacity"):
        n.Sampler(config(tree, capacity=1))


def test_links_and_snapshot_from_fixture(tree: Path) -> None:
    s = n.Sampler(config(tree, interfaces=["eth0"]))
    assert s.link_names == ["eth0", "mlx4_0/1", "mlx4_0/2", "mlx5_0/1"]
    assert s.link_kinds == ["eth", "ib", "ib", "ib"]
    assert s.latest() is None and len(s) == 0
    snap = s.sample_once()
    assert snap["links"]["eth0"]["tx_bytes"] == 2000000
    assert snap["links"]["mlx4_0/2"]["tx_bytes"] is None  # N/A port
    assert snap["node_cpu_jiffies"] == {"total": 981, "idle": 820}
    assert snap["mem_kb"] == {"total": 16000000, "available": 4000000}
    assert snap["gpu"] is None and not s.gpu_available
    assert s.latest()["seq"] == 0


def test_rates_ethernet_wrap_reset_and_missing(tree: Path) -> None:
    stats = tree / "class/net/eth0/statistics"
    s = n.Sampler(config(tree, interfaces=["eth0"], infiniband=False, max_link_Bps=1e18))
    put(stats / "tx_bytes", U64 - 999)
    put(stats / "rx_bytes", 1000)
    s.sample_once()
    time.sleep(0.01)
    put(stats / "tx_bytes", 500)          # wrapped: 1500 bytes sent
    put(stats / "rx_bytes", 101000)       # 100000 received
    os.remove(stats / "rx_errors")        # file vanishes: keeps the open fd's old inode -> still readable
    s.sample_once()
    w = s.rates()
    eth = w.links[0]
    assert eth.delta["tx_bytes"] == 1500 and eth.delta["rx_bytes"] == 100000
    dt = w.end_s - w.start_s
    assert eth.per_s["tx_bytes"] == pytest.approx(1500 / dt)
    # a reset (counter goes back far below) contributes no data, never a huge or negative rate
    time.sleep(0.01)
    put(stats / "rx_bytes", 10)
    s.sample_once()
    w = s.rates()
    assert w.links[0].delta["rx_bytes"] == 100000  # only the trusted interval counts
    assert w.samples == 3


def test_rates_never_negative_on_reset_only(tree: Path) -> None:
    stats = tree / "class/net/eth0/statistics"
    s = n.Sampler(config(tree, interfaces=["eth0"], infiniband=False))
    s.sample_once()
    put(stats / "tx_bytes", 5)  # from 2,000,000 down to 5: reset
    s.sample_once()
    r = s.rates().links[0]
    assert r.per_s["tx_bytes"] is None and r.delta["tx_bytes"] is None


def test_rates_infiniband_32_64_and_na(tree: Path) -> None:
    ib = tree / "class/infiniband"
    s = n.Sampler(config(tree, interfaces=["eth0"], max_link_Bps=1e18))
    s.sample_once()
    time.sleep(0.01)
    put(ib / "mlx5_0/ports/1/counters/port_xmit_data", 223456789012 + 1000)  # +1000 words
    put(ib / "mlx4_0/ports/1/counters/port_rcv_data", 100)                    # 32-bit wrap from 4e9
    s.sample_once()
    w = s.rates()
    assert link(w, "mlx5_0/1").delta["tx_bytes"] == 4000                 # words -> bytes
    assert link(w, "mlx4_0/1").delta["rx_bytes"] == 4 * ((U32 - 4000000000) + 100 + 1)
    assert link(w, "mlx4_0/1").delta["tx_bytes"] is None                 # saturated at 0xFFFFFFFF
    assert all(v is None for v in link(w, "mlx4_0/2").per_s.values())    # N/A port
    assert link(w, "mlx4_0/1").delta["tx_errors"] is None                # no such IB counter


def test_cpu_and_memory_rates_from_fixture(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    shutil.copytree(FIX / "proc", proc)
    s = n.Sampler(config(FIX / "sys_eth", proc, interfaces=["eth0"]))
    s.sample_once()
    time.sleep(0.05)
    put(proc / "stat", "cpu  200 5 50 900 20 1 2 3 7 0\ncpu0 0\ncpu1 0")  # +100 busy, +100 idle
    s.sample_once()
    w = s.rates()
    assert w.node_cpu_util == pytest.approx(0.5)
    assert w.process_cpu_cores == 0.0   # fixture process did not run
    assert w.mem_headroom == pytest.approx(0.25)
    assert w.rss_bytes == 2560 * os.sysconf("SC_PAGESIZE")
    assert math.isnan(w.gpu_util)


def test_missing_proc_files_are_no_data_not_errors(tmp_path: Path) -> None:
    s = n.Sampler(config(FIX / "sys_eth", tmp_path, interfaces=["eth0"]))
    s.sample_once()
    s.sample_once()
    w = s.rates()
    assert math.isnan(w.node_cpu_util) and math.isnan(w.mem_headroom) and math.isnan(w.rss_bytes)
    host = next(x for x in s.source_stats() if x.name == "host")
    assert host.reads == 2 and host.failures == 2


def test_ring_is_bounded(tree: Path) -> None:
    s = n.Sampler(config(tree, interfaces=["eth0"], capacity=5))
    for _ in range(12):
        s.sample_once()
    assert len(s) == 5 and s.capacity == 5 and s.total_samples == 12
    assert s.latest()["seq"] == 11
    assert s.rates().samples == 5


def test_thread_samples_without_the_gil(tree: Path) -> None:
    s = n.Sampler(config(tree, interfaces=["eth0"], period_s=0.005))
    old = sys.getswitchinterval()
    sys.setswitchinterval(5.0)  # this thread keeps the GIL for the whole busy loop below
    try:
        s.start()
        assert s.running
        before = s.total_samples
        t_end = time.perf_counter() + 0.3
        while time.perf_counter() < t_end:
            pass
        during = s.total_samples - before
    finally:
        sys.setswitchinterval(old)
        s.stop()
    assert not s.running
    assert during >= 10, f"sampler made {during} samples while Python held the GIL"
    s.stop()  # idempotent


def test_nvml_absent_library_is_no_data(tree: Path) -> None:
    s = n.Sampler(config(tree, interfaces=["eth0"], nvml=True, nvml_library=str(tree / "libnvidia-ml.so.1")))
    assert not s.gpu_available and "not loadable" in s.gpu_status
    s.sample_once()
    assert s.latest()["gpu"] is None


# ---- real traffic ------------------------------------------------------------------------------
UDP_OVERHEAD = 14 + 20 + 8  # Ethernet + IPv4 + UDP headers counted by the device


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@pytest.fixture
def veth() -> tuple[str, str]:
    """A veth pair: host end returned, peer in a fresh namespace; always deleted."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create a network namespace")
    tag = f"{os.getpid() % 100000}"
    ns, host, peer = f"dxns{tag}", f"dxa{tag}", f"dxb{tag}"
    subnet = 100 + os.getpid() % 100
    host_ip, peer_ip = f"10.251.{subnet}.1", f"10.251.{subnet}.2"
    try:
        if _ip("netns", "add", ns, check=False).returncode != 0:
            pytest.skip("cannot create a network namespace here")
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        for sysctl in (f"/proc/sys/net/ipv6/conf/{host}/disable_ipv6",):
            if os.path.exists(sysctl):
                Path(sysctl).write_text("1")
        _ip("netns", "exec", ns, "sh", "-c", f"echo 1 > /proc/sys/net/ipv6/conf/{peer}/disable_ipv6 || true")
        _ip("addr", "add", f"{host_ip}/30", "dev", host)
        _ip("netns", "exec", ns, "ip", "addr", "add", f"{peer_ip}/30", "dev", peer)
        _ip("netns", "exec", ns, "ip", "link", "set", peer, "up")
        _ip("link", "set", host, "up")
        mac = _ip("netns", "exec", ns, "cat", f"/sys/class/net/{peer}/address").stdout.strip()
        host_mac = Path(f"/sys/class/net/{host}/address").read_text().strip()
        # static neighbours both ways: no ARP request or reply ever crosses the pair
        _ip("neigh", "replace", peer_ip, "lladdr", mac, "dev", host, "nud", "permanent")
        _ip("netns", "exec", ns, "ip", "neigh", "replace", host_ip, "lladdr", host_mac, "dev", peer, "nud", "permanent")
        time.sleep(0.3)  # let link-up chatter settle
        yield host, peer_ip
    finally:
        _ip("netns", "del", ns, check=False)
        _ip("link", "del", host, check=False)


def test_veth_tx_delta_is_exactly_what_was_sent(veth: tuple[str, str]) -> None:
    host, peer_ip = veth
    payload, k = 1000, 200
    c = Collector(CollectorConfig(interfaces=(host,), infiniband=False, gpu=False))
    c.window()  # start of the measured interval
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _ in range(k):
            sock.sendto(b"x" * payload, (peer_ip, 9))
    time.sleep(0.05)
    w = c.window()
    lw = w.links[0]
    assert lw.name == host
    assert lw.tx_bytes == k * (payload + UDP_OVERHEAD)
    assert w.nic_tx_Bps == pytest.approx(lw.tx_bytes / w.duration_s, rel=1e-6)


def test_loopback_tx_delta_covers_what_was_sent() -> None:
    """Loopback is shared with other processes, so the delta is bounded, not exact."""
    c = Collector(CollectorConfig(interfaces=("lo",), infiniband=False, gpu=False))
    payload = 8 << 20
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c.window()
    cli = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    data = b"y" * payload
    import threading
    got = bytearray()
    t = threading.Thread(target=lambda: [got.extend(conn.recv(1 << 20)) for _ in iter(lambda: len(got) < payload, False)])
    t.start()
    cli.sendall(data)
    t.join(timeout=30)
    for s_ in (cli, conn, srv):
        s_.close()
    w = c.window()
    lo = w.links[0]
    assert len(got) == payload
    assert payload <= lo.tx_bytes <= payload * 1.2 + (4 << 20)
    assert lo.rx_bytes == lo.tx_bytes  # loopback receives what it sends
