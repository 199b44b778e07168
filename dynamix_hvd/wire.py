"""Wire formats of the hook, in one place: the per-rank row gathered to rank 0 at a decision,
the plan broadcast back, and the per-step flag vector that rides beside Horovod's gradient
allreduce. Pure numpy; the transports are in comm.py (decision) and apply.py (flags).

Row:   WorkerStats.to_array()  ++  [sum_t T_t c_i,t, sum_t T_t |G_t|^2_i]   (float64, same
       length on every rank); c_i,t = (n_i/T_t)|g_i,t|^2 and |G_t|^2_i the squared norm of rank
       i's share of the reduced gradient, on the steps whose gradient statistics were sampled
Plan:  [version, start_step, world_size, next_due, b_0, ..., b_{N-1}]   (int64; next_due: the
       step count after which the next regular decision is taken)
Flags: [oom batch of rank 0..N-1, flag word of rank 0..N-1]   (float32, summed: each rank writes
       only its own slots, so the sum is everyone's values; a word's bits: REACT_BIT an early
       decision, STOP_BIT a stop signal, SKIP_BIT the previous step's update left out, EPOCH_BIT
       the first step of an epoch)
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dynamix_hvd.plan import Plan
from dynamix_hvd.records import WorkerStats

N_EXTRA = 2  # gradient-statistics sums appended to the WorkerStats row


def encode_row(ws: WorkerStats, gns_sum_tc: float, gns_sum_tg: float = 0.0) -> np.ndarray:
    return np.concatenate([ws.to_array(), [float(gns_sum_tc), float(gns_sum_tg)]])


def decode_rows(rows: np.ndarray) -> tuple[list[WorkerStats], np.ndarray]:
    """Gathered rows (N, len) -> (WorkerStats per rank, extras (N, N_EXTRA))."""
    return [WorkerStats.from_array(r[:-N_EXTRA]) for r in rows], rows[:, -N_EXTRA:]


def plan_buffer(world: int) -> np.ndarray:
    return np.empty(4 + world, dtype=np.int64)


def encode_plan(plan: Plan, buf: np.ndarray, next_due: int = 0) -> np.ndarray:
    buf[:4] = (plan.version, plan.start_step, plan.world_size, next_due)
    buf[4:] = plan.batch_sizes
    return buf


def decode_plan(buf: np.ndarray | list[int]) -> tuple[Plan, int]:
    """(plan, next_due)."""
    v = [int(x) for x in buf]
    if v[2] != len(v) - 4:
        raise ValueError(f"plan message for {v[2]} ranks carries {len(v) - 4} batch sizes")
    return Plan(v[0], tuple(v[4:]), v[1]), v[3]


def flag_slots(world: int) -> int:
    return 2 * world


# a rank's second slot is a word of bits: its detector saw a change (decide early), it got a stop
# signal, it skipped the update of its previous step after that step's gradients were reduced, this
# step is the first of an epoch for it (all ranks or none, or some left their epoch early)
REACT_BIT, STOP_BIT, SKIP_BIT, EPOCH_BIT = 1, 2, 4, 8


class Flagged(NamedTuple):
    """Ranks whose flag word has each bit (None: no rank), the same on every rank."""
    react: list[int] | None = None     # REACT_BIT: decide early
    stop: list[int] | None = None      # STOP_BIT: checkpoint and stop after this step
    skipped: list[int] | None = None   # SKIP_BIT: left out the previous step's update
    new_epoch: list[int] | None = None  # EPOCH_BIT: this step begins an epoch


def set_flags(buf: np.ndarray, rank: int, world: int, oom_batch: int, word: int) -> None:
    """Write this rank's slots into a zeroed flag buffer (numpy view of the flag tensor)."""
    buf[:] = 0.0
    buf[rank] = float(oom_batch)
    buf[world + rank] = float(word)


def _ranks(bits: np.ndarray) -> list[int] | None:
    got = np.flatnonzero(bits)
    return got.tolist() if got.size else None


def flag_ranks(words: np.ndarray) -> Flagged:
    """Every rank's flag word -> the ranks with each bit."""
    w = np.rint(np.asarray(words, dtype=np.float64)).astype(np.int64)
    return Flagged(_ranks(w & REACT_BIT), _ranks(w & STOP_BIT), _ranks(w & SKIP_BIT), _ranks(w & EPOCH_BIT))


def read_flags(buf: np.ndarray, world: int) -> tuple[np.ndarray, Flagged]:
    """(oom batch per rank, the ranks with each flag bit) from the summed buffer."""
    oom = np.rint(buf[:world]).astype(np.int64)
    return oom, flag_ranks(buf[world:2 * world])
