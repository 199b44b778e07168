"""Stall watchdog: a job whose ranks wait for a peer that is gone (network partition, stopped or
swapped-out process) ends with a message naming that peer, instead of hanging forever.

Side channel, not MPI: each rank's watchdog thread sends a small UDP heartbeat (job id, rank,
last completed step, running/closing) to every other rank every ``period`` seconds and reads
theirs. The only collective is one allgather of the ranks' addresses when ``Dynamix`` is
created; nothing runs in the training step (the thread reads the step count itself), so the
per-step cost is zero.

The rule (``StallJudge``, pure, tested without sockets): when this rank has completed no
training step for ``stall_timeout_s`` AND a peer's last heartbeat is older than
``stall_timeout_s``, that peer is unreachable or frozen: the watchdog prints which one and
aborts the job (MPI_Abort, or ``os._exit`` if that does not end the process within
``ABORT_GRACE_S``), so the launcher tears every rank down. Worst case from the fault to the
message: ``stall_timeout_s + period``.
- A rank that is alive but slow (evaluation, a long checkpoint, data loading) keeps sending
  heartbeats and is never killed; rank 0 prints one warning per stall naming the ranks behind.
- A partition shorter than ``stall_timeout_s`` never ends the job: heartbeats resume with the
  link and training goes on where it stopped.
- A rank that hears no other rank at all (N > 2) is most likely the one cut off: it waits
  ``ISOLATED_DELAY_PERIODS`` periods more before aborting, so the others name it first.
- Peers never heard from (UDP blocked between hosts) are left out, with one warning; a rank that
  closes (``dyn.close()``, interpreter exit) says goodbye and is left out as well.
"""
from __future__ import annotations

import atexit
import ipaddress
import os
import secrets
import select
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TextIO

from dynamix_hvd.metrics.interfaces import IFACE_HINTS

EXIT_CODE = 3                  # MPI_Abort error code / exit status of a rank ended by the watchdog
ABORT_GRACE_S = 5.0            # os._exit when MPI_Abort has not ended the process by then
ISOLATED_DELAY_PERIODS = 4     # extra periods a rank that hears nobody waits before aborting
MAX_ADDRS = 8                  # IPv4 addresses per rank in the address exchange
_PACKET = struct.Struct("!4sIIqB")
_MAGIC = b"DMXW"
_RUNNING, _CLOSING = 0, 1


def heartbeat_period(timeout_s: float) -> float:
    """Seconds between heartbeats: a twentieth of the timeout, in [0.05, 1] s."""
    return min(max(timeout_s / 20.0, 0.05), 1.0)


@dataclass(frozen=True)
class Verdict:
    action: str          # "abort" or "warn"
    message: str
    delay_s: float = 0.0  # abort only after this many more seconds of the same verdict


def _ranks(ks: Sequence[int]) -> str:
    return ("rank " if len(ks) == 1 else "ranks ") + ", ".join(map(str, ks))


class StallJudge:
    """What the watchdog concludes from heartbeats and this rank's progress (pure: times come in
    as arguments). ``heard`` per heartbeat received, ``progress`` per tick, then ``check``."""

    def __init__(self, rank: int, world: int, timeout_s: float, now: float, period_s: float | None = None) -> None:
        self.rank, self.world, self.timeout = rank, world, float(timeout_s)
        self.period = heartbeat_period(timeout_s) if period_s is None else period_s
        self.t0 = now
        self.last_heard: list[float | None] = [None] * world
        self.step = [-1] * world
        self.closed = [False] * world
        self.my_step = -1
        self.t_progress = now
        self._warned_never = False
        self._warned_stall = False

    def heard(self, peer: int, step: int, closing: bool, now: float) -> None:
        self.last_heard[peer] = now
        self.step[peer] = step
        self.closed[peer] = self.closed[peer] or closing

    def progress(self, step: int, now: float) -> None:
        if step != self.my_step:
            self.my_step, self.t_progress = step, now
            self._warned_stall = False

    def peers(self) -> list[int]:
        return [k for k in range(self.world) if k != self.rank and not self.closed[k]]

    def check(self, now: float) -> Verdict | None:
        peers = self.peers()
        never = [k for k in peers if self.last_heard[k] is None]
        if never and not self._warned_never and now - self.t0 >= self.timeout:
            self._warned_never = True
            return Verdict("warn", f"dynamix: stall watchdog on rank {self.rank}: no heartbeat from "
                           f"{_ranks(never)} in {now - self.t0:.0f} s since the start (UDP between the "
                           "ranks blocked?); a stall cannot be blamed on them")
        stalled = now - self.t_progress
        if stalled < self.timeout:
            return None
        heard = [k for k in peers if self.last_heard[k] is not None]
        stale = [k for k in heard if now - self.last_heard[k] >= self.timeout]  # type: ignore[operator]
        head = (f"dynamix: stall watchdog on rank {self.rank} of {self.world}: no training step completed for "
                f"{stalled:.1f} s (last step {self.my_step})")
        tail = f"ending the job (stall_timeout_s={self.timeout:g}, DYNAMIX_STALL_TIMEOUT_S)"
        if stale:
            ages = "; ".join((f"rank {k}: " if len(stale) > 1 else "")
                             + f"no heartbeat for {now - self.last_heard[k]:.1f} s, "  # type: ignore[operator]
                             f"last step {self.step[k]}" for k in stale)
            if len(stale) == len(heard) and len(heard) >= 2:
                delay = ISOLATED_DELAY_PERIODS * self.period
                return Verdict("abort", f"{head}, and no other rank answers ({ages}): this rank's own link "
                               f"is most likely down; {tail} in {delay:.1f} s", delay)
            return Verdict("abort", f"{head}; unreachable or frozen: {_ranks(stale)} ({ages}); {tail}")
        if self.rank != 0 or self._warned_stall or not heard:
            return None
        self._warned_stall = True
        steps = {k: self.step[k] for k in heard} | {self.rank: self.my_step}
        low = min(steps.values())
        behind = sorted(k for k, s in steps.items() if s == low)
        who = (f"{_ranks(behind)} behind at step {low}" if len(behind) < len(steps)
               else f"every rank at step {low}")
        return Verdict("warn", f"{head}; every rank answers heartbeats ({who}): waiting for a rank that is "
                       "alive but busy outside the training step; not ending the job")


# ---- addresses ---------------------------------------------------------------------------------


def _iface_addrs() -> dict[str, str]:
    """IPv4 address of every interface of this network namespace that has one."""
    import fcntl

    out = {}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                out[name] = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
            except OSError:
                continue
    finally:
        s.close()
    return out


def choose_addresses(ifaces: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """The addresses peers should send heartbeats to: those of the interfaces (or subnets) MPI /
    Horovod are told to use, else every non-loopback address, else 127.0.0.1."""
    for var in IFACE_HINTS:
        want = [w.strip() for w in env.get(var, "").split(",") if w.strip() and not w.startswith(("^", "="))]
        picked = []
        for w in want:
            if "/" in w:
                try:
                    net = ipaddress.ip_network(w, strict=False)
                except ValueError:
                    continue
                picked += [a for a in ifaces.values() if ipaddress.ip_address(a) in net]
            elif w in ifaces:
                picked.append(ifaces[w])
        if picked:
            return list(dict.fromkeys(picked))[:MAX_ADDRS]
    public = [a for a in ifaces.values() if not a.startswith("127.")]
    return (public or ["127.0.0.1"])[:MAX_ADDRS]


def encode_endpoint(port: int, nonce: int, addrs: Sequence[str]) -> list[float]:
    """[port, nonce, n, a_1..a_MAX_ADDRS] as floats (IPv4 as a 32-bit integer: exact in float64)."""
    ints = [int(ipaddress.IPv4Address(a)) for a in addrs[:MAX_ADDRS]]
    return [float(port), float(nonce), float(len(ints))] + [float(i) for i in ints] + [0.0] * (MAX_ADDRS - len(ints))


def decode_endpoint(row: Sequence[float]) -> tuple[int, int, list[str]]:
    n = int(row[2])
    return int(row[0]), int(row[1]), [str(ipaddress.IPv4Address(int(v))) for v in row[3:3 + n]]


# ---- the thread --------------------------------------------------------------------------------
class Watchdog:
    """The heartbeat thread of one rank (see the module docstring). ``start`` is collective."""

    def __init__(self, rank: int, world: int, timeout_s: float, sock: socket.socket, job: int,
                 peers: Sequence[tuple[int, list[str]]], step_fn: Callable[[], int | None],
                 abort_fn: Callable[[int], None], out: TextIO | None = None,
                 exit_fn: Callable[[int], None] = os._exit) -> None:
        self.rank, self.world, self.sock, self.job = rank, world, sock, job
        self.exit_fn = exit_fn
        self.pid = os.getpid()          # a forked child (DataLoader worker) must not say goodbye for us
        self.targets = [(k, [(a, port) for a in addrs]) for k, (port, addrs) in enumerate(peers) if k != rank]
        self.step_fn, self.abort_fn, self.out = step_fn, abort_fn, out or sys.stderr
        self.period = heartbeat_period(timeout_s)
        self.judge = StallJudge(rank, world, timeout_s, time.monotonic(), self.period)
        self.sent = self.received = 0
        self.ending: tuple[float, Verdict] | None = None   # (abort due at, verdict)
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name=f"dynamix-watchdog-r{rank}", daemon=True)
        atexit.register(self.close)     # say goodbye before MPI_Finalize can block at exit
        self._thread.start()

    @staticmethod
    def start(comm: Any, timeout_s: float, step_fn: Callable[[], int | None], abort_fn: Callable[[int], None],
              env: Mapping[str, str] | None = None) -> "Watchdog":
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", 0))
        sock.setblocking(False)
        addrs = choose_addresses(_iface_addrs(), os.environ if env is None else env)
        rows = comm.allgather_floats(encode_endpoint(sock.getsockname()[1], secrets.randbits(31), addrs))
        ends = [decode_endpoint(r) for r in rows]
        return Watchdog(comm.rank, comm.size, timeout_s, sock, ends[0][1], [(p, a) for p, _, a in ends],
                        step_fn, abort_fn)

    def _packet(self, step: int, state: int) -> bytes:
        return _PACKET.pack(_MAGIC, self.job, self.rank, step, state)

    def _send(self, pkt: bytes) -> None:
        for _, dests in self.targets:
            for dest in dests:
                try:
                    self.sock.sendto(pkt, dest)
                    self.sent += 1
                except OSError:           # link down, no route: the peers notice the silence
                    pass

    def _drain(self, now: float) -> None:
        while True:
            try:
                data = self.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(data) != _PACKET.size:
                continue
            magic, job, rank, step, state = _PACKET.unpack(data)
            if magic == _MAGIC and job == self.job and 0 <= rank < self.world and rank != self.rank:
                self.received += 1
                self.judge.heard(rank, step, state == _CLOSING, now)

    def _run(self) -> None:
        next_beat = time.monotonic()
        while not self._stop.is_set():
            timeout = max(0.0, next_beat - time.monotonic())
            ready = select.select([self.sock, self._wake_r], [], [], timeout)[0]
            now = time.monotonic()
            if self.sock in ready:
                self._drain(now)
            if self._stop.is_set() or now < next_beat:
                continue
            step = self.step_fn()
            if step is None:              # the Dynamix object is gone
                break
            self.judge.progress(step, now)
            self._send(self._packet(step, _RUNNING))
            self._act(self.judge.check(now), now)
            next_beat = now + self.period

    def _act(self, verdict: Verdict | None, now: float) -> None:
        if verdict is None or verdict.action != "abort":
            self.ending = None
            if verdict is not None:
                self._print(verdict.message)
            return
        if self.ending is None:
            self.ending = (now + verdict.delay_s, verdict)
            self._print(verdict.message)
        if now >= self.ending[0]:
            self._abort()

    def _print(self, message: str) -> None:
        try:
            self.out.write(message + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass

    def _abort(self) -> None:
        def fallback() -> None:
            time.sleep(ABORT_GRACE_S)
            self.exit_fn(EXIT_CODE)

        threading.Thread(target=fallback, daemon=True).start()
        try:
            self.abort_fn(EXIT_CODE)
        finally:
            self.exit_fn(EXIT_CODE)
            self._stop.set()

    def close(self) -> None:
        """Say goodbye (peers stop watching this rank) and stop the thread. Idempotent."""
        if self._stop.is_set() or os.getpid() != self.pid:
            return
        self._stop.set()
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001 - interpreter shutting down
            pass
        step = self.judge.my_step
        for _ in range(2):
            self._send(self._packet(step, _CLOSING))
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.sock.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()
