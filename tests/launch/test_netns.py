"""The emulated network harness: namespaces + veth + bridge + tc.

- nothing (namespace, and with it veth, bridge, qdisc, processes) is left after the harness
  finishes, fails, is interrupted (SIGINT / SIGTERM) or is killed (stale cleanup);
- NIC counters inside the namespaces show Horovod's allreduce traffic, and the allreduce
  gets slower when one rank's link is throttled with tc.
Skipped where network namespaces are not permitted (not root, no CAP_NET_ADMIN).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynamix_hvd.emulate import netns
from dynamix_hvd.emulate.netns import Cluster, list_namespaces, mpmd_command
from conftest import default_sigint

OK, WHY = netns.netns_available()
pytestmark = pytest.mark.skipif(not OK, reason=f"network namespaces not permitted here: {WHY}")
REPO = str(Path(__file__).resolve().parents[2])


LISTEN = ("import socket; s = socket.socket(); s.bind(('0.0.0.0', 5588)); s.listen(1); print('ready', flush=True); "
          "c, _ = s.accept(); print(c.recv(16).decode(), flush=True)")
CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], 5588), timeout=5).sendall(b'hello')"


def _exists(names: list[str]) -> list[str]:
    have = set(list_namespaces())
    return [n for n in names if n in have]


def _links_in(ns: str) -> str:
    return subprocess.run(["ip", "-n", ns, "link", "show"], capture_output=True, text=True).stdout


def test_setup_shapes_and_cleans_up() -> None:
    with Cluster([(100.0, 0.0), (20.0, 1.0)]) as c:
        names = c.namespaces
        assert _exists(names) == names
        assert "br0" in _links_in(c.sw_ns) and "veth0" in _links_in(c.rank_ns[1])
        q = subprocess.run(["tc", "-n", c.rank_ns[1], "qdisc", "show", "dev", "veth0"],
                           capture_output=True, text=True).stdout
        assert ("tbf" in q and "20Mbit" in q) or "netem" in q
        # TCP from rank 0's namespace to rank 1's, through the bridge
        srv = subprocess.Popen(c.exec_prefix(1) + [sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True)
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        cli = subprocess.run(c.exec_prefix(0) + [sys.executable, "-c", CONNECT, c.address(1)],
                             capture_output=True, text=True, timeout=30)
        assert cli.returncode == 0, cli.stderr
        assert srv.stdout.readline().strip() == "hello" and srv.wait(timeout=10) == 0
    assert _exists(names) == []
    c.cleanup()  # idempotent
    c.cleanup()


def test_two_clusters_have_unique_names() -> None:
    with Cluster([(100.0, 0.0)]) as a, Cluster([(100.0, 0.0)]) as b:
        assert not set(a.namespaces) & set(b.namespaces)
    assert _exists(a.namespaces + b.namespaces) == []


def test_cleanup_after_failure_kills_processes() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with Cluster([(100.0, 0.0)] * 2) as c:
            names = c.namespaces
            p = subprocess.Popen(c.exec_prefix(0) + ["sleep", "300"])
            raise RuntimeError("boom")
    assert _exists(names) == []
    assert p.wait(timeout=10) != 0   # the process inside the namespace was terminated


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_nothing_left_after_interrupt_or_kill(sig: signal.Signals) -> None:
    p = subprocess.Popen([sys.executable, "-m", "dynamix_hvd.emulate.netns", "2", "--with-process"],
                         stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": REPO},
                         start_new_session=True, preexec_fn=default_sigint)
    names = p.stdout.readline().split()   # type: ignore[union-attr]
    assert len(names) == 3 and _exists(names) == names
    time.sleep(0.3)
    p.send_signal(sig)
    p.wait(timeout=30)
    if sig == signal.SIGKILL:            # no handler can run: the next harness removes the stale ones
        assert _exists(names) == names
        removed = netns.cleanup_stale()
        assert set(names) <= set(removed)
    assert _exists(names) == []


PROBE = r'''
import json, os, sys, time
import torch
import horovod.torch as hvd
from dynamix_hvd.emulate.netns import Link, parse_proc_net_dev
hvd.init()
torch.set_num_threads(1)
x = torch.ones(256 * 1024)              # 1 MiB of float32
def counters():
    return parse_proc_net_dev(open("/proc/net/dev").read())["veth0"]
def timed(tag, n=4):
    hvd.allreduce(x, name=tag + "warm")
    c0, t0 = counters(), time.perf_counter()
    for i in range(n):
        hvd.allreduce(x, name=f"{tag}{i}")
    dt = (time.perf_counter() - t0) / n
    # this rank's allreduce can return while its last bytes still wait in the shaped link's queue:
    # once the peer has finished too, everything this rank sent has left its interface
    hvd.allreduce(torch.zeros(1), name=tag + "done")
    c1 = counters()
    return dt, c1["tx_bytes"] - c0["tx_bytes"], c1["rx_bytes"] - c0["rx_bytes"]
fast = timed("fast")
if hvd.rank() == 0:                      # throttle rank 1's link (both directions) from inside the job
    Link.from_str(os.environ["DYNAMIX_LINK_R1"]).shape(20.0, 0.0)
hvd.allreduce(torch.zeros(1), name="sync")
slow = timed("slow")
print("RESULT " + json.dumps({"rank": hvd.rank(), "fast": fast, "slow": slow}), flush=True)
'''


def test_nic_counters_show_allreduce_and_throttling_slows_it(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    with Cluster([(1000.0, 0.0), (1000.0, 0.0)]) as c:
        env = {"PYTHONPATH": REPO, "HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi",
               **{f"DYNAMIX_LINK_R{r}": lk.to_str() for r, lk in enumerate(c.links)}}
        cmd, full_env = mpmd_command(c, [[sys.executable, str(script)]] * 2, env)
        p = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=240)
        before = [c.counters(r) for r in range(2)]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # mpirun forwards each rank's stdout in chunks: two ranks' lines can arrive joined without a
    # newline ('RESULT {...}RESULT {...}', seen in CI), so parse each object after its marker
    res = {d["rank"]: d for d in (json.JSONDecoder().raw_decode(chunk)[0] for chunk in p.stdout.split("RESULT ")[1:])}
    assert set(res) == {0, 1}
    mib = 4 * 256 * 1024
    for r in (0, 1):
        fast_dt, fast_tx, fast_rx = res[r]["fast"]
        slow_dt, slow_tx, slow_rx = res[r]["slow"]
        # a 2-rank allreduce of 1 MiB moves about 1 MiB each way per rank, 4 times
        assert fast_tx >= 0.9 * 4 * mib and fast_rx >= 0.9 * 4 * mib, res[r]
        assert slow_tx >= 0.9 * 4 * mib
        # 20 Mbit/s on rank 1's link: >= 0.4 s per MiB; the fast link is far quicker
        assert slow_dt > 3 * fast_dt and slow_dt > 0.3, res[r]
        assert before[r]["tx_bytes"] >= 8 * mib
