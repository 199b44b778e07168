"""Exceptions users may catch. Native errors surface as dynamix_hvd.NativeExtensionError."""
from __future__ import annotations


class DynamixError(RuntimeError):
    """Misuse of the hook (wrong optimizer wrapping, wrong call order, mismatched ranks)."""


class OutOfMemoryError(RuntimeError):
    """A rank could not fit its local batch (real CUDA OOM or an emulated memory limit)."""

    def __init__(self, rank: int, batch_size: int, limit: int | None = None) -> None:
        self.rank, self.batch_size, self.limit = rank, batch_size, limit
        extra = f" (limit {limit})" if limit is not None else ""
        super().__init__(f"rank {rank}: out of memory at local batch size {batch_size}{extra}")
