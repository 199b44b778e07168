"""dynamix_hvd: per-worker dynamic batch sizing for Horovod / MPI PyTorch jobs.

Measure (native collector) -> state -> decide (controller / PPO agent on rank 0)
-> broadcast (MPI) -> apply (sampler slices, loss scale b_i/B, LR rule).
"""
from __future__ import annotations

__version__ = "0.1.0"

from dynamix_hvd._loader import NativeExtensionError, load_native
from dynamix_hvd.plan import Plan

__all__ = ["__version__", "NativeExtensionError", "load_native", "Plan"]
