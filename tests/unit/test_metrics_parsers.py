"""Pure parsers and counter arithmetic of the native collector, on fixture trees
(tests/fixtures/sys_*, proc*) and on hypothesis-generated counter sequences."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynamix_hvd import load_native
from dynamix_hvd.metrics import choose_interfaces, gpu_index, local_rank

n = load_native()
FIX = Path(__file__).resolve().parent.parent / "fixtures"
U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF


# ---- one counter file ----------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [("0\n", 0), ("12345\n", 12345), ("  7 \n", 7), (f"{U64}\n", U64)])
def test_parse_counter_values(text: str, value: int) -> None:
    assert n.parse_counter(text) == value


@pytest.mark.parametrize("text", ["N/A\n", "", "\n", "-1\n", "12a\n", "18446744073709551616\n", "1 2\n"])
def test_parse_counter_no_data(text: str) -> None:
    assert n.parse_counter(text) is None


# ---- wrap-around, resets, saturation ---------------------------------------------------------
def test_delta_plain() -> None:
    assert n.counter_delta(100, 350, 64, 10**6) == 250


def test_delta_wraps_64_bit() -> None:
    assert n.counter_delta(U64 - 99, 50, 64, 10**6) == 150


def test_delta_wraps_32_bit() -> None:
    assert n.counter_delta(U32 - 9, 5, 32, 10**6) == 15


def test_delta_reset_is_no_data() -> None:
    # a counter going back from 10^6 to 10 is a reset (driver reload), not 2^64 bytes
    assert n.counter_delta(10**6, 10, 64, 10**9) is None
    assert n.counter_delta(10**6, 10, 32, 10**6) is None


def test_delta_absurd_is_no_data() -> None:
    assert n.counter_delta(0, 10**12, 64, 10**9) is None


def test_delta_saturated_32_bit_is_no_data() -> None:
    assert n.counter_delta(U32, U32, 32, 10**12, saturates=True) is None
    assert n.counter_delta(10, U32, 32, 10**12, saturates=True) is None
    assert n.counter_delta(10, 20, 32, 10**12, saturates=True) == 10


@given(prev=st.integers(0, U64), cur=st.integers(0, U64), width=st.sampled_from([32, 64]),
       max_delta=st.integers(1, U64))
def test_delta_never_negative_or_absurd(prev: int, cur: int, width: int, max_delta: int) -> None:
    d = n.counter_delta(prev, cur, width, max_delta)
    assert d is None or 0 <= d <= max_delta


@given(start=st.integers(0, U64), steps=st.lists(st.integers(0, 10**9), min_size=1, max_size=20))
def test_delta_sums_to_traffic_across_64_bit_wraps(start: int, steps: list[int]) -> None:
    value, total = start, 0
    for s in steps:
        nxt = (value + s) % (U64 + 1)
        d = n.counter_delta(value, nxt, 64, 10**9)
        assert d == s
        total += d
        value = nxt
    assert total == sum(steps)


# ---- /proc ------------------------------------------------------------------------------------
def test_proc_stat_fixture() -> None:
    cpu = n.parse_proc_stat((FIX / "proc" / "stat").read_text())
    assert cpu == {"total": 100 + 5 + 50 + 800 + 20 + 1 + 2 + 3, "idle": 820}  # guest (7) is inside user


def test_pid_stat_with_spaces_and_parens_in_name() -> None:
    st_ = n.parse_pid_stat((FIX / "proc" / "self" / "stat").read_text())
    assert st_ == {"cpu_ticks": 300, "rss_pages": 2560}


def test_statm_rss() -> None:
    assert n.parse_statm_rss("1000 250 30 1 0 200 0\n") == 250
    assert n.parse_statm_rss("garbage") is None


def test_meminfo_fixture_and_old_kernel_fallback() -> None:
    assert n.parse_meminfo((FIX / "proc" / "meminfo").read_text()) == {"total_kb": 16000000, "available_kb": 4000000}
    assert n.parse_meminfo((FIX / "proc_old_kernel" / "meminfo").read_text()) == {"total_kb": 1000, "available_kb": 150}


@pytest.mark.parametrize("text", ["", "intr 1 2\n", "cpu  1 2\n", "garbage"])
def test_proc_stat_malformed(text: str) -> None:
    assert n.parse_proc_stat(text) is None


@pytest.mark.parametrize("text", ["", "1 (x) S 1 2", "no parens at all"])
def test_pid_stat_malformed(text: str) -> None:
    assert n.parse_pid_stat(text) is None


def test_meminfo_missing_total() -> None:
    assert n.parse_meminfo("MemFree: 10 kB\n") is None


# ---- Ethernet ---------------------------------------------------------------------------------
def test_ethernet_fixture_counters() -> None:
    link = n.open_netdev(str(FIX / "sys_eth"), "eth0")
    assert (link.kind, link.width_bits, link.saturates) == ("eth", 64, False)
    assert link.read() == {"rx_bytes": 1000000, "tx_bytes": 2000000, "rx_packets": 1000, "tx_packets": 2000,
                           "rx_errors": 1, "tx_errors": 2, "rx_dropped": 3, "tx_dropped": 4}


def test_ethernet_missing_file_is_no_data() -> None:
    link = n.open_netdev(str(FIX / "sys_eth"), "ens5")  # fixture lacks statistics/tx_dropped
    r = link.read()
    assert r["tx_dropped"] is None and r["rx_bytes"] == 500


def test_unknown_interface_is_an_error() -> None:
    with pytest.raises(ValueError, match="nope0"):
        n.open_netdev(str(FIX / "sys_eth"), "nope0")
    with pytest.raises(ValueError):
        n.open_netdev(str(FIX / "sys_eth"), "../eth0")


def test_default_interfaces_skip_loopback_virtual_and_down() -> None:
    assert n.list_interfaces(str(FIX / "sys_eth")) == ["ens5", "eth0", "ifb0", "lo"]
    assert n.default_interfaces(str(FIX / "sys_eth")) == ["eth0"]
    assert n.default_interfaces(str(FIX / "sys_lo_only")) == ["lo"]
    assert n.default_interfaces("/nonexistent") == []


def test_interface_hints_from_environment() -> None:
    root = str(FIX / "sys_eth")
    assert choose_interfaces({}, root) is None
    assert choose_interfaces({"DYNAMIX_IFACES": "lo,eth0"}, root) == ["lo", "eth0"]
    assert choose_interfaces({"OMPI_MCA_btl_tcp_if_include": "10.0.0.0/8,ens5"}, root) == ["ens5"]
    assert choose_interfaces({"NCCL_SOCKET_IFNAME": "^docker,=eth9", "HOROVOD_GLOO_IFACE": "eth0"}, root) == ["eth0"]
    assert choose_interfaces({"GLOO_SOCKET_IFNAME": "eth0"}, root) == ["eth0"]
    assert choose_interfaces({"DYNAMIX_IFACES": "missing0"}, root) is None


def test_gpu_index_follows_local_rank_and_visible_devices() -> None:
    assert local_rank({}) == 0 and gpu_index({}) == 0
    assert gpu_index({"OMPI_COMM_WORLD_LOCAL_RANK": "1"}) == 1
    assert gpu_index({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "3,5"}) == 5
    assert gpu_index({"LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "GPU-uuid"}) == 2


# ---- InfiniBand -------------------------------------------------------------------------------
def test_ib_ports_listed_only_with_counters() -> None:
    assert n.list_ib_ports(str(FIX / "sys_ib")) == ["mlx4_0/1", "mlx4_0/2", "mlx5_0/1"]


def test_ib_64_bit_port() -> None:
    link = n.open_ib_port(str(FIX / "sys_ib"), "mlx5_0/1")
    assert (link.kind, link.width_bits, link.saturates) == ("ib", 64, False)
    r = link.read()
    assert r["rx_bytes"] == 123456789012 and r["tx_bytes"] == 223456789012  # raw 4-byte words
    assert link.scale(0) == 4 and link.scale(1) == 4 and link.scale(2) == 1
    assert r["tx_errors"] is None and r["rx_dropped"] is None  # no InfiniBand counterpart
    assert r["tx_dropped"] == 2


def test_ib_32_bit_port_saturates() -> None:
    link = n.open_ib_port(str(FIX / "sys_ib"), "mlx4_0/1")
    assert (link.width_bits, link.saturates) == (32, True)
    assert link.read()["tx_bytes"] == U32


def test_ib_na_port_reads_no_data() -> None:
    r = n.open_ib_port(str(FIX / "sys_ib"), "mlx4_0/2").read()
    assert all(v is None for v in r.values())


def test_ib_bad_port() -> None:
    with pytest.raises(ValueError):
        n.open_ib_port(str(FIX / "sys_ib"), "mlx4_0/3")
    with pytest.raises(ValueError):
        n.open_ib_port(str(FIX / "sys_ib"), "mlx4_0")


def test_collective_classification_rule() -> None:
    data, control = n.CLASS_DATA, n.CLASS_CONTROL
    # Horovod's response-cache bit vectors: MPI_LONG_LONG_INT + MPI_BAND/BOR
    assert n.classify_collective(n.OP_ALLREDUCE, True, False, True, 3) == control
    # gradients: float SUM
    assert n.classify_collective(n.OP_ALLREDUCE, False, False, False, 1) == data
    assert n.classify_collective(n.OP_IALLREDUCE, False, False, False, 10**6) == data
    # Horovod's response-list broadcast: 1 MPI_INT then MPI_BYTE payload
    assert n.classify_collective(n.OP_BCAST, False, False, True, 1) == control
    assert n.classify_collective(n.OP_BCAST, False, True, False, 4096) == control
    # parameter broadcast of an int64 tensor
    assert n.classify_collective(n.OP_BCAST, False, False, True, 1000) == data
    # rank exchange at init: Allgather of one MPI_INT
    assert n.classify_collective(n.OP_ALLGATHER, False, False, True, 1) == control
    assert n.classify_collective(n.OP_ALLGATHERV, False, False, False, 100) == data
