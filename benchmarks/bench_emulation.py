"""How faithful is the emulation on this host?

1. Device: the compute phase of a real MNIST-1D CNN forward+backward padded by
   ``EmulatedDevice`` vs the model's fixed_ms + per_sample_ms * b (ratio measured/model).
2. Links: TCP throughput between two rank namespaces through the bridge vs the configured
   ``bandwidth_mbit`` (tc tbf / netem), one 8 MB transfer per setting.

    .venv/bin/python benchmarks/bench_emulation.py          # as root for part 2

Prints a table per part and the command that reproduces it.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dynamix_hvd import workloads  # noqa: E402
from dynamix_hvd.emulate.device import EmulatedDevice  # noqa: E402
from dynamix_hvd.emulate.scenario import parse_scenario  # noqa: E402

SC = """
name = "fidelity"
workload = "mnist1d_cnn"
target_accuracy = 0.5
max_time_s = 10
base_batch = 8
seed = 0
[[workers]]
fixed_ms = 3
per_sample_ms = {p}
"""


def device_fidelity() -> None:
    torch.set_num_threads(1)
    model, data = workloads.build("mnist1d_cnn")
    print("part 1: compute-phase duration, measured / model (20 steps each, median)")
    print(f"{'per_sample_ms':>13} {'batch':>6} {'model_ms':>9} {'measured_ms':>12} {'ratio':>6}")
    for p in (0.5, 1.0, 4.0):
        dev = EmulatedDevice(parse_scenario(SC.format(p=p)), 0, emulate_latency=False)
        for b in (16, 64, 128):
            ts = []
            for i in range(20):
                t0 = time.perf_counter()
                idx = torch.randint(0, len(data), (b,))
                loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
                dev.before_backward(b, time.perf_counter() - t0)
                loss.backward()
                ts.append(time.perf_counter() - t0)
            ts.sort()
            model_ms = 3 + p * b
            med = 1e3 * ts[len(ts) // 2]
            print(f"{p:>13} {b:>6} {model_ms:>9.1f} {med:>12.1f} {med / model_ms:>6.2f}")


RECV = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5599)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    d = c.recv(1 << 16)
    if not d: break
    if t0 is None: t0 = time.perf_counter()
    n += len(d)
print(n, time.perf_counter() - t0, flush=True)
"""

SEND = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], 5599)); buf = b"x" * (1 << 16)
for _ in range(128): s.sendall(buf)
s.close()
"""


def link_fidelity() -> None:
    from dynamix_hvd.emulate.netns import Cluster, netem_available, netns_available

    ok, why = netns_available()
    if not ok:
        print(f"part 2 skipped: network namespaces not permitted here ({why})")
        return
    print(f"\npart 2: TCP throughput rank0 -> rank1 through the bridge, 8 MiB "
          f"({'netem' if netem_available() else 'tbf'})")
    print(f"{'bandwidth_mbit':>14} {'measured_mbit':>14} {'ratio':>6}")
    for bw in (10.0, 50.0, 200.0, 1000.0):
        with Cluster([(bw, 0.0), (bw, 0.0)]) as c:
            r = subprocess.Popen(c.exec_prefix(1) + [sys.executable, "-c", RECV], stdout=subprocess.PIPE, text=True)
            assert r.stdout is not None and r.stdout.readline().strip() == "ready"
            subprocess.run(c.exec_prefix(0) + [sys.executable, "-c", SEND, c.address(1)], check=True, timeout=120)
            n, dt = r.stdout.readline().split()
            r.wait(timeout=30)
            mbit = int(n) * 8 / float(dt) / 1e6
            print(f"{bw:>14.0f} {mbit:>14.1f} {mbit / bw:>6.2f}")


if __name__ == "__main__":
    device_fidelity()
    link_fidelity()
    print(f"\nreproduce: {sys.executable} benchmarks/bench_emulation.py")
