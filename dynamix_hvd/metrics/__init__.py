"""Measure: the Python view of the native collector (NIC / InfiniBand / CPU / memory / GPU
counters sampled by a C++ thread, collective timings from the preloaded PMPI library)."""
from __future__ import annotations

from dynamix_hvd.metrics.collector import (
    CLASSES,
    OPS,
    Collector,
    CollectorConfig,
    CommSummary,
    LinkWindow,
    Window,
)
from dynamix_hvd.metrics.interfaces import choose_interfaces, gpu_index, local_rank

__all__ = ["CLASSES", "OPS", "Collector", "CollectorConfig", "CommSummary", "LinkWindow", "Window",
           "choose_interfaces", "gpu_index", "local_rank"]
