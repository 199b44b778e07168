"""The lock-free ring the PMPI library records into, exercised without MPI: concurrent
writers, exact totals, overwritten records reported as lost, never torn."""
from __future__ import annotations

from dynamix_hvd import load_native

n = load_native()


def test_concurrent_writers_are_all_recorded_exactly() -> None:
    ring = n._CommRing(1 << 16)
    ring.hammer(threads=4, per_thread=10000, bytes=8)
    assert ring.head() == 40000
    t = ring.totals(n.OP_ALLREDUCE, n.CLASS_DATA)
    assert (t.count, t.bytes, t.busy_ns) == (40000, 320000, 40000)
    batch = ring.read(0, 1 << 17)
    assert len(batch) == 40000 and batch.lost == 0 and batch.next == 40000
    recs = batch.records()
    assert [r["seq"] for r in recs] == list(range(40000))
    assert {r["tid"] for r in recs} == {0, 1, 2, 3}
    s = batch.summarize(1 << n.OP_ALLREDUCE, n.CLASS_DATA)
    assert s.count == 40000 and s.bytes == 320000 and s.p50_s == 1e-9


def test_reader_behind_by_more_than_capacity_reports_lost() -> None:
    ring = n._CommRing(64)
    for i in range(100):
        ring.record(n.OP_BCAST, n.CLASS_CONTROL, i, 10, 20)
    batch = ring.read(0, 1000)
    assert batch.lost == 36 and len(batch) == 64 and batch.next == 100
    assert [r["bytes"] for r in batch.records()] == list(range(36, 100))
    # totals stay exact whatever the ring lost
    assert ring.totals(n.OP_BCAST, n.CLASS_CONTROL).count == 100


def test_cursor_reads_only_new_records() -> None:
    ring = n._CommRing(128)
    ring.record(n.OP_ALLREDUCE, n.CLASS_DATA, 100, 0, 1000)
    first = ring.read(0, 10)
    ring.record(n.OP_ALLGATHER, n.CLASS_DATA, 50, 0, 3000)
    second = ring.read(first.next, 10)
    assert len(first) == 1 and len(second) == 1 and second.records()[0]["op"] == n.OP_ALLGATHER
    s = second.summarize(1 << n.OP_ALLREDUCE)
    assert s.count == 0 and s.p50_s != s.p50_s  # NaN: no data, not zero


def test_summary_percentiles_and_bandwidth() -> None:
    ring = n._CommRing(128)
    for d in range(1, 101):  # durations 1..100 us, 1 MB each
        ring.record(n.OP_ALLREDUCE, n.CLASS_DATA, 10**6, 0, d * 1000)
    ring.record(n.OP_ALLREDUCE, n.CLASS_CONTROL, 8, 0, 10**9)  # control: excluded below
    s = ring.read(0, 200).summarize(1 << n.OP_ALLREDUCE, n.CLASS_DATA)
    assert s.count == 100 and s.bytes == 10**8
    assert abs(s.p50_s - 50.5e-6) < 1e-12 and abs(s.max_s - 100e-6) < 1e-12
    assert abs(s.bandwidth_Bps - 10**8 / (5050e-6)) < 1.0


def test_reader_without_preloaded_library_is_unavailable_not_an_error() -> None:
    r = n.CommReader()
    if r.available:  # the suite may itself run under the preload
        return
    assert "not loaded" in r.status and r.head() == 0
    b = r.read(0)
    assert len(b) == 0 and b.next == 0
    assert r.totals(n.OP_ALLREDUCE, n.CLASS_DATA).count == 0
