"""dynamix_hvd: per-worker dynamic batch sizing for Horovod / MPI PyTorch jobs.

Measure (native collector) -> state -> decide (controller / PPO agent on rank 0)
-> broadcast (MPI) -> apply (sampler slices, loss scale b_i/B, LR rule).
"""
from __future__ import annotations

__version__ = "0.1.0"

from dynamix_hvd._loader import NativeExtensionError, load_native
from dynamix_hvd.plan import Plan
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.errors import StepSkippedError, StopTraining


def __getattr__(name: str):  # lazy: importing horovod.torch is slow and optional
    if name == "Dynamix":
        from dynamix_hvd.horovod import Dynamix

        return Dynamix
    raise AttributeError(name)

__all__ = ["__version__", "NativeExtensionError", "load_native", "Plan", "DynamixConfig", "Dynamix", "StepSkippedError",
           "StopTraining"]
