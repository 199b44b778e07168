"""The stall watchdog's rule (pure, on given times) and its UDP heartbeats between two real
sockets in one process. The jobs that end through it are in tests/launch/test_partition.py and
tests/launch/test_faults.py."""
from __future__ import annotations

import io
import socket
import time

import pytest

from dynamix_hvd.config import ConfigError, DynamixConfig, env_var_names
from dynamix_hvd.watchdog import (StallJudge, Watchdog, choose_addresses, decode_endpoint, encode_endpoint,
                                  heartbeat_period)

T = 10.0


def judge(world: int = 4, rank: int = 0) -> StallJudge:
    j = StallJudge(rank, world, T, now=0.0, period_s=0.5)
    for k in range(world):
        if k != rank:
            j.heard(k, 0, False, 0.0)
    j.progress(0, 0.0)
    return j


def test_no_verdict_while_steps_complete_even_if_a_peer_is_silent() -> None:
    j = judge()
    for t in range(1, 40):
        j.progress(t, float(t))               # a step per second
        for k in (1, 2):
            j.heard(k, t, False, float(t))    # rank 3 silent since t=0 (UDP lost, training fine)
        assert j.check(float(t)) is None


def test_stalled_rank_names_the_silent_peer_after_the_timeout() -> None:
    j = judge()
    j.progress(20, 5.0)                       # last step at t=5; rank 2 silent from t=5 on
    for t in range(6, 30):
        for k in (1, 3):
            j.heard(k, 20, False, float(t))
        j.heard(2, 20, False, 5.0) if t == 6 else None
        v = j.check(float(t))
        if t < 15:
            assert v is None, (t, v)
        else:
            assert v is not None and v.action == "abort" and v.delay_s == 0
            assert "unreachable or frozen: rank 2 (" in v.message and "last step 20" in v.message
            assert "stall_timeout_s=10" in v.message
            break
    else:
        pytest.fail("no verdict")


def test_short_silence_does_not_end_the_job() -> None:
    """A partition shorter than the timeout: the peer answers again before its silence reaches
    the timeout, so a long stall of the steps alone never ends the job."""
    j = judge()
    j.progress(20, 0.0)
    for t in range(1, 30):
        silent = 2 <= t <= 8                  # rank 2's link down for 7 s
        for k in (1, 2, 3):
            if not (k == 2 and silent):
                j.heard(k, 20, False, float(t))
        v = j.check(float(t))
        assert v is None or v.action == "warn", (t, v)


def test_alive_but_busy_peer_gets_a_warning_on_rank_0_never_an_abort() -> None:
    j = judge()
    j.progress(30, 0.0)
    verdicts = []
    for t in range(1, 60):
        j.heard(1, 30, False, float(t))
        j.heard(2, 29, False, float(t))       # rank 2 evaluating, one step behind
        j.heard(3, 30, False, float(t))
        verdicts.append(j.check(float(t)))
    got = [v for v in verdicts if v is not None]
    assert len(got) == 1 and got[0].action == "warn"        # once per stall
    assert "rank 2 behind at step 29" in got[0].message and "not ending the job" in got[0].message
    other = judge(rank=1)
    other.progress(30, 0.0)
    for t in range(1, 60):
        for k in (0, 2, 3):
            other.heard(k, 30, False, float(t))
        assert other.check(float(t)) is None                 # only rank 0 warns


def test_isolated_rank_delays_its_abort_and_two_ranks_name_each_other() -> None:
    j = judge(rank=2)
    v = j.check(T + 1)
    assert v is not None and v.action == "abort" and v.delay_s > 0
    assert "this rank's own link is most likely down" in v.message
    two = judge(world=2, rank=1)
    v = two.check(T + 1)
    assert v is not None and v.delay_s == 0 and "unreachable or frozen: rank 0 (" in v.message


def test_closed_and_never_heard_peers_are_not_blamed() -> None:
    j = StallJudge(0, 3, T, now=0.0, period_s=0.5)
    j.heard(1, 5, True, 0.0)                  # rank 1 said goodbye
    j.progress(5, 0.0)
    v = j.check(T + 1)                        # rank 2 never heard: one warning, no abort
    assert v is not None and v.action == "warn" and "no heartbeat from rank 2" in v.message
    assert j.check(T + 2) is None and j.check(10 * T) is None


def test_addresses_follow_the_mpi_interface_hints() -> None:
    ifaces = {"lo": "127.0.0.1", "eth0": "192.0.2.2", "veth0": "10.213.0.12"}
    assert choose_addresses(ifaces, {"OMPI_MCA_btl_tcp_if_include": "lo"}) == ["127.0.0.1"]
    assert choose_addresses(ifaces, {"OMPI_MCA_btl_tcp_if_include": "10.213.0.0/24"}) == ["10.213.0.12"]
    assert choose_addresses(ifaces, {}) == ["192.0.2.2", "10.213.0.12"]
    assert choose_addresses(ifaces, {"GLOO_SOCKET_IFNAME": "veth0"}) == ["10.213.0.12"]    # torchrun + gloo
    assert choose_addresses({"lo": "127.0.0.1"}, {}) == ["127.0.0.1"]
    row = encode_endpoint(40123, 77, ["10.213.0.12", "192.0.2.2"])
    assert decode_endpoint(row) == (40123, 77, ["10.213.0.12", "192.0.2.2"])


def test_config_field_and_environment_variable() -> None:
    assert DynamixConfig().stall_timeout_s == 60.0
    assert "DYNAMIX_STALL_TIMEOUT_S" in env_var_names()
    assert DynamixConfig.load(env={"DYNAMIX_STALL_TIMEOUT_S": "8"}).stall_timeout_s == 8.0
    assert DynamixConfig.load(env={"DYNAMIX_STALL_TIMEOUT_S": "0"}).stall_timeout_s == 0.0
    for bad, shown in ((0.5, "0.5"), (-1, "-1"), (True, "True"), ("60", "'60'"), (float("nan"), "nan"),
                       (float("inf"), "inf"), (None, "None"), (86401, "86401")):
        with pytest.raises(ConfigError, match=rf"^stall_timeout_s={shown} is invalid: 0 \(off\) or a number"):
            DynamixConfig(stall_timeout_s=bad).validate()
    for bad, match in (("soon", "environment variable DYNAMIX_STALL_TIMEOUT_S='soon' is invalid"),
                       ("-3", r"stall_timeout_s=-3.0 is invalid")):
        with pytest.raises(ConfigError, match=match):
            DynamixConfig.load(env={"DYNAMIX_STALL_TIMEOUT_S": bad})
    assert heartbeat_period(60) == 1.0 and heartbeat_period(4) == 0.2


def _pair(timeout: float, steps: list[int], aborts: list[int], outs: list[io.StringIO]) -> list[Watchdog]:
    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        socks.append(s)
    peers = [(s.getsockname()[1], ["127.0.0.1"]) for s in socks]
    return [Watchdog(r, 2, timeout, socks[r], 1234, peers, (lambda r=r: steps[r]), aborts.append, outs[r])
            for r in range(2)]


def test_heartbeats_flow_and_goodbye_stops_the_watching() -> None:
    steps, aborts, outs = [0, 0], [], [io.StringIO(), io.StringIO()]
    dogs = _pair(2.0, steps, aborts, outs)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(d.received >= 3 for d in dogs):
            steps[0] += 1
            steps[1] += 1
            time.sleep(0.05)
        assert all(d.received >= 3 for d in dogs), [d.received for d in dogs]
        assert dogs[0].judge.step[1] >= 1 and dogs[1].judge.step[0] >= 1
        dogs[1].close()                       # goodbye: rank 0 stops watching rank 1
        time.sleep(0.5)
        assert dogs[0].judge.closed[1] and not dogs[1].running
        time.sleep(2.5)                       # rank 0 stalled past the timeout: nobody to blame
        assert aborts == [] and "unreachable" not in outs[0].getvalue()
    finally:
        for d in dogs:
            d.close()


def test_silent_peer_ends_the_stalled_rank_with_its_name() -> None:
    """Rank 1 is a socket that never answers (a frozen process): rank 0, whose step does not
    move, aborts after the timeout naming rank 1; the exit runs even if the abort returns."""
    mine = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    mine.bind(("127.0.0.1", 0))
    mine.setblocking(False)
    frozen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    frozen.bind(("127.0.0.1", 0))
    frozen.sendto(b"DMXW" + bytes(17), mine.getsockname())     # wrong job id: ignored
    aborts: list[int] = []
    exits: list[int] = []
    out = io.StringIO()
    peers = [(mine.getsockname()[1], ["127.0.0.1"]), (frozen.getsockname()[1], ["127.0.0.1"])]
    t0 = time.monotonic()
    dog = Watchdog(0, 2, 1.0, mine, 99, peers, lambda: 7, aborts.append, out, exit_fn=exits.append)
    dog.judge.heard(1, 6, False, t0)                         # heard once at the start, then silence
    try:
        deadline = t0 + 5
        while time.monotonic() < deadline and not exits:
            time.sleep(0.02)
        elapsed = time.monotonic() - t0
        assert aborts == [3] and exits and exits[0] == 3
        assert 1.0 <= elapsed < 1.5, elapsed                 # timeout + one period (0.05 s) + slack
        msg = out.getvalue()
        assert "unreachable or frozen: rank 1 (" in msg and "last step 6" in msg and "last step 7" in msg
        assert frozen.recv(64)[:4] == b"DMXW"               # rank 0 kept sending its heartbeats
    finally:
        dog.close()
        frozen.close()
