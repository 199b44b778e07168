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


class StepSkippedError(DynamixError):
    """The ranks stopped training the same step: a rank took its next batch without calling
    ``optimizer.step()`` for the one before and without its gradients having been reduced (it
    would train every later step against the other ranks' next one), some ranks but not all
    left out an update after the reduction (their models would differ), or some ranks but not
    all began an epoch (the others' data would differ). Raised at once, on the rank that skipped
    or on every rank, instead of a job that hangs or fails at its end. Also when a rank took a
    micro-batch and ran no backward for it (the samples would count as trained without being
    in the gradient)."""


STOP_EXIT_CODE = 75     # os.EX_TEMPFAIL: a temporary failure, run the job again (it resumes)


class StopTraining(SystemExit):
    """Raised from ``optimizer.step()`` on every rank after the same step when some rank got
    SIGTERM or SIGUSR1 (``stop_on_signal``): the state is in ``checkpoint`` (None without
    ``run_dir``). Uncaught, the process exits with code 75 (EX_TEMPFAIL); ``except Exception``
    does not catch it."""

    def __init__(self, step: int, checkpoint: str | None, ranks: list[int]) -> None:
        super().__init__(STOP_EXIT_CODE)
        self.step, self.checkpoint, self.ranks = step, checkpoint, ranks
