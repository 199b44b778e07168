"""A decision in flight: the part of a decision between the rows leaving each rank and the plan
arriving (core.DynamixCore._start_decision / _advance_decision / _finish_decision).

With ``decision_lag`` = 0 nothing is in flight across steps: every rank waits at the broadcast
while rank 0's controller decides, as before. With ``decision_lag`` = D >= 1 the plan is applied
after step ``gathered + D`` and takes effect D steps later than it would have; each stage of the
decision that the lag leaves a step for overlaps one:

    D = 1   gather (every rank waits) -> controller in rank 0's decide thread during the next
            step -> broadcast (every rank waits, rank 0 for its controller first)
    D = 2   the gather started after step s (``gather_rows_async``) and waited for after step
            s + 1 (it travelled during that step) -> controller during step s + 2 -> broadcast
    D >= 3  as D = 2, and the broadcast started after step s + D - 1, waited for after step s + D

With D >= 3 a regular decision waits for nothing (the rows and the plan travel during steps:
MPI_Igather / MPI_Ibcast, Horovod's or gloo's threads, comm.py; the controller runs in a
thread): on a GPU node the CPU is mostly idle during the steps; on a CPU-only node the work
shares the cores with the step.

An early decision (a rank flagged a change) never waits: it drops a decision still in flight and
decides at once; ``save()`` completes one first; a restore, a world change and an out-of-memory
re-split drop it, waiting on every rank for what still travels (core.py). Every rank does the same
at the same step, so no collective is left unmatched.

Every rank keeps an ``InFlight`` (same ``finish_step`` on all: it is computed from the config);
only rank 0's holds the controller's result. A fault in the thread is re-raised on rank 0 when the
plan is due, so one failing rank still ends the job (lifecycle.AbortOnUncaught).
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from dynamix_hvd.plan import Plan


@dataclass
class InFlight:
    """One decision between gather and broadcast."""

    step: int                     # the step after which the rows were gathered
    finish_step: int              # the step after which the plan is applied (step + decision_lag)
    next_due: int = 0             # rank 0: the step of the next regular decision (broadcast with the plan)
    job: "Future[Plan] | None" = None   # rank 0: the controller's proposal (done at once when the lag is 0)
    record: dict[str, Any] = field(default_factory=dict)   # rank 0: the decision record the controller fills
    rows: Any = None              # the gather still travelling (comm.Pending), every rank
    plan: Any = None              # the broadcast travelling (comm.Pending), every rank
    send_step: int | None = None  # start the broadcast after this step (None: a blocking one at finish_step)
    context: tuple[Any, ...] = () # rank 0: what the controller's start needs from the gather's step

    def wait_messages(self, strict: bool = True) -> None:
        """Wait for (and discard) what is still travelling, on every rank (a dropped decision).
        ``strict`` False: a failure is ignored (the world it was started in is gone)."""
        for name in ("rows", "plan"):
            pending = getattr(self, name)
            setattr(self, name, None)
            if pending is not None:
                try:
                    pending.wait()
                except Exception:   # noqa: BLE001 - only when the result is discarded anyway
                    if strict:
                        raise

    def proposal(self) -> Plan | None:
        """Rank 0: the controller's plan, waiting for the thread if it is still deciding (its
        exception, if it raised, is raised here); None on the other ranks."""
        return self.job.result() if self.job is not None else None

    def settle(self) -> None:
        """Wait until the controller is done (rank 0), keeping the result: after this nothing
        else uses the controller, so its state can be read (a checkpoint) or changed."""
        if self.job is not None:
            self.job.exception()


class DecideThread:
    """Rank 0's decide thread: one worker, started lazily, so a run with ``decision_lag`` 0 has no
    extra thread. ``run`` with ``threaded`` False calls the function at once (a done Future)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def run(self, fn: Callable[..., Plan], *args: Any, threaded: bool) -> "Future[Plan]":
        if not threaded:
            fut: Future[Plan] = Future()
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - re-raised by InFlight.proposal
                fut.set_exception(exc)
            return fut
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dynamix-decide")
        return self._pool.submit(fn, *args)

    def close(self) -> None:
        """Wait for a running decision and stop the worker (idempotent)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
