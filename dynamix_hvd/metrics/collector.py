"""Typed Python view of the native collector: system counters from the C++ sampler and
collective timings from the preloaded PMPI library, summarised per decision interval.

    with Collector(CollectorConfig(period_s=0.1)) as c:
        ...train for an interval...
        w = c.window()          # everything since the previous window() call
        stats.nic_tx_Bps, stats.allreduce_p50_s = w.nic_tx_Bps, w.allreduce.p50_s

All state lives in the Collector instance (no module-level state). NaN means "no data".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from dynamix_hvd._loader import load_native
from dynamix_hvd.metrics.interfaces import choose_interfaces, gpu_index

NAN = float("nan")
OPS = ("allreduce", "iallreduce", "bcast", "allgather", "allgatherv", "nccl_allreduce")
CLASSES = ("data", "control")


@dataclass(frozen=True)
class CollectorConfig:
    period_s: float = 0.1                    # sampling period of the native thread
    capacity: int = 600                      # snapshots kept in the ring
    interfaces: tuple[str, ...] | None = None  # None: env hints, then the native default
    infiniband: bool = True                  # watch every InfiniBand port found
    gpu: bool = True                         # NVML (dlopen'ed; absent -> GPU fields NaN)
    nvml_library: str = "libnvidia-ml.so.1"
    gpu_index: int | None = None             # None: local rank through CUDA_VISIBLE_DEVICES
    proc_root: str = "/proc"
    sys_root: str = "/sys"
    max_link_Bps: float = 50e9               # faster deltas are treated as counter resets

    def validate(self) -> "CollectorConfig":
        if not (self.period_s > 0 and math.isfinite(self.period_s)):
            raise ValueError(f"period_s={self.period_s!r} is invalid: a number > 0")
        if self.capacity < 2:
            raise ValueError(f"capacity={self.capacity!r} is invalid: an integer >= 2")
        if not self.max_link_Bps > 0:
            raise ValueError(f"max_link_Bps={self.max_link_Bps!r} is invalid: a number > 0")
        return self


@dataclass(frozen=True)
class CommSummary:
    """Collectives of one kind over a window. Durations in seconds; NaN when count == 0."""

    count: int = 0
    bytes: int = 0
    busy_s: float = 0.0
    p50_s: float = NAN
    p90_s: float = NAN
    p99_s: float = NAN
    max_s: float = NAN
    bandwidth_Bps: float = NAN  # bytes / busy_s

    @staticmethod
    def from_native(s: Any) -> "CommSummary":
        return CommSummary(int(s.count), int(s.bytes), float(s.busy_s), s.p50_s, s.p90_s, s.p99_s, s.max_s,
                           s.bandwidth_Bps)


@dataclass(frozen=True)
class LinkWindow:
    name: str
    kind: str                 # "eth" or "ib"
    rx_Bps: float
    tx_Bps: float
    rx_pps: float
    tx_pps: float
    rx_errors_ps: float
    tx_errors_ps: float
    rx_drops_ps: float
    tx_drops_ps: float
    rx_bytes: float           # bytes counted over the window (NaN: no data)
    tx_bytes: float


@dataclass(frozen=True)
class Window:
    """What this rank measured between two window() calls."""

    start_s: float
    end_s: float
    samples: int
    links: tuple[LinkWindow, ...]
    node_cpu_util: float      # 0..1, whole node
    cpu_util: float           # 0..1, this process over all CPUs
    process_cpu_cores: float  # CPUs' worth of time used by this process
    mem_headroom: float       # 0..1, MemAvailable / MemTotal
    mem_available_bytes: float
    rss_bytes: float
    gpu_util: float           # 0..1 (NaN without NVML / GPU)
    gpu_mem_headroom: float
    allreduce: CommSummary    # data allreduces (MPI_Allreduce, MPI_Iallreduce, ncclAllReduce)
    control: CommSummary      # control-plane collectives (all operations)
    by_op: dict[str, dict[str, CommSummary]] = field(default_factory=dict)  # op -> class -> summary
    comm_available: bool = False
    comm_lost: int = 0        # records overwritten before they were read (window too long)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def nic_tx_Bps(self) -> float:
        return _sum_or_nan(l.tx_Bps for l in self.links)

    @property
    def nic_rx_Bps(self) -> float:
        return _sum_or_nan(l.rx_Bps for l in self.links)

    def worker_stats_fields(self, steps: int | None = None) -> dict[str, float]:
        """Values for dynamix_hvd.records.WorkerStats (allreduce_bytes per step when steps > 0)."""
        per_step = self.allreduce.bytes / steps if steps else float(self.allreduce.bytes)
        return {
            "nic_tx_Bps": self.nic_tx_Bps,
            "nic_rx_Bps": self.nic_rx_Bps,
            "allreduce_p50_s": self.allreduce.p50_s,
            "allreduce_bytes": per_step if self.comm_available else NAN,
            "cpu_util": self.cpu_util,
            "gpu_util": self.gpu_util,
            "mem_headroom": self.gpu_mem_headroom if not math.isnan(self.gpu_mem_headroom) else self.mem_headroom,
        }


def _sum_or_nan(values: Any) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(sum(vals)) if vals else NAN


def _link_window(r: Any) -> LinkWindow:
    p, d = r.per_s, r.delta

    def f(x: float | None) -> float:
        return NAN if x is None else float(x)

    return LinkWindow(r.name, r.kind, f(p["rx_bytes"]), f(p["tx_bytes"]), f(p["rx_packets"]), f(p["tx_packets"]),
                      f(p["rx_errors"]), f(p["tx_errors"]), f(p["rx_dropped"]), f(p["tx_dropped"]),
                      f(d["rx_bytes"]), f(d["tx_bytes"]))


class Collector:
    """The sampler thread plus the collective-timing reader of this rank."""

    def __init__(self, config: CollectorConfig | None = None, native: ModuleType | None = None) -> None:
        self.config = (config or CollectorConfig()).validate()
        self._n = native or load_native()
        cfg = self._n.SamplerConfig()
        cfg.proc_root, cfg.sys_root = self.config.proc_root, self.config.sys_root
        ifaces = self.config.interfaces
        if ifaces is None:
            ifaces = tuple(choose_interfaces(sys_root=self.config.sys_root) or ())
        cfg.interfaces = list(ifaces)
        cfg.infiniband = self.config.infiniband
        cfg.nvml = self.config.gpu
        cfg.nvml_library = self.config.nvml_library
        cfg.gpu_index = gpu_index() if self.config.gpu_index is None else self.config.gpu_index
        cfg.period_s = self.config.period_s
        cfg.capacity = self.config.capacity
        cfg.max_link_Bps = self.config.max_link_Bps
        self._sampler = self._n.Sampler(cfg)  # ValueError on an unknown interface / bad config
        self._comm = self._n.CommReader()
        self._cursor = self._comm.head()
        self._sampler.sample_once()
        self._t_last = self._n.now_s()

    # ---- lifecycle ----
    def start(self) -> "Collector":
        """Starts the native sampling thread (it never holds the GIL)."""
        self._sampler.start()
        return self

    def stop(self) -> None:
        self._sampler.stop()

    def __enter__(self) -> "Collector":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return bool(self._sampler.running)

    # ---- facts ----
    @property
    def interfaces(self) -> list[str]:
        return list(self._sampler.link_names)

    @property
    def comm_available(self) -> bool:
        """True when libdynamix_pmpi.so is preloaded into this process."""
        return bool(self._comm.available)

    @property
    def comm_status(self) -> str:
        return str(self._comm.status)

    @property
    def gpu_status(self) -> str:
        return str(self._sampler.gpu_status)

    def set_timing(self, enabled: bool) -> None:
        """Switches collective recording on/off process-wide (no-op when not preloaded)."""
        self._comm.set_enabled(enabled)

    # ---- readings ----
    def window(self) -> Window:
        """Everything measured since the previous window() call (or construction)."""
        self._sampler.sample_once()  # the window ends now, whatever the sampling period
        t_now = self._n.now_s()
        rates = self._sampler.rates_between(self._t_last, t_now)
        self._t_last = t_now
        batch = self._comm.read(self._cursor)
        self._cursor = batch.next
        return self._build(rates, batch)

    def rates(self, window_s: float = 0.0) -> Window:
        """System rates over the newest window_s seconds of the ring (0: the whole ring) and
        collective stats since the last window() call. Moves no cursor."""
        rates = self._sampler.rates(window_s)
        batch = self._comm.read(self._cursor)
        return self._build(rates, batch)

    def latest(self) -> dict[str, Any] | None:
        """The newest raw snapshot (counters, not rates), or None before the first sample."""
        return self._sampler.latest()

    def comm_totals(self) -> dict[str, dict[str, dict[str, int]]]:
        """Exact running totals per operation and class since the process started."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for i, op in enumerate(OPS):
            out[op] = {}
            for j, cls in enumerate(CLASSES):
                t = self._comm.totals(i, j)
                out[op][cls] = {"count": int(t.count), "bytes": int(t.bytes), "busy_ns": int(t.busy_ns)}
        return out

    def source_stats(self) -> list[dict[str, Any]]:
        return [{"name": s.name, "reads": s.reads, "failures": s.failures, "total_s": s.total_ns * 1e-9}
                for s in self._sampler.source_stats()]

    def _build(self, rates: Any, batch: Any) -> Window:
        n = self._n
        data_mask = (1 << n.OP_ALLREDUCE) | (1 << n.OP_IALLREDUCE) | (1 << n.OP_NCCL_ALLREDUCE)
        all_mask = (1 << n.NUM_OPS) - 1
        by_op = {op: {cls: CommSummary.from_native(batch.summarize(1 << i, j)) for j, cls in enumerate(CLASSES)}
                 for i, op in enumerate(OPS)}
        return Window(
            start_s=rates.start_s, end_s=rates.end_s, samples=rates.samples,
            links=tuple(_link_window(r) for r in rates.links),
            node_cpu_util=rates.node_cpu_util, cpu_util=rates.process_cpu_util,
            process_cpu_cores=rates.process_cpu_cores, mem_headroom=rates.mem_headroom,
            mem_available_bytes=rates.mem_available_bytes, rss_bytes=rates.rss_bytes,
            gpu_util=rates.gpu_util, gpu_mem_headroom=rates.gpu_mem_headroom,
            allreduce=CommSummary.from_native(batch.summarize(data_mask, n.CLASS_DATA)),
            control=CommSummary.from_native(batch.summarize(all_mask, n.CLASS_CONTROL)),
            by_op=by_op, comm_available=self.comm_available, comm_lost=int(batch.lost),
        )
