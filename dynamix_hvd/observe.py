"""What rank 0 shows about a run: one JSON line per decision or event in
``run_dir/events.jsonl`` (``runlog.EventsWriter``: typed records) and TensorBoard scalars in ``run_dir/tb`` (per-rank batch size, step
time, idle fraction, noise scale, LR, global batch, throughput, fallback events).

Records are written by a writer thread, off the training loop: JSON encoding and ~30 TensorBoard
scalars per decision took rank 0 longer than the decision itself, and every rank waits for rank 0
at the next allreduce. Records may hold dataclasses (converted in the writer) and must not be
changed after they are handed over. ``flush()`` waits until everything handed over is on disk;
``Dynamix.save`` and ``close`` call it."""
from __future__ import annotations

import math
import queue
import threading
import warnings
from pathlib import Path
from typing import Any

from dynamix_hvd.runlog import EventsWriter


class RunLogger:
    """Rank 0's event log and TensorBoard writer. Cheap no-op when ``run_dir`` is None."""

    def __init__(self, run_dir: str | None, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir) if run_dir else None
        self._events = None
        self._tb = None
        if self.run_dir is None:
            return
        self._events = EventsWriter(self.run_dir)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.run_dir / "tb"))
            except Exception as exc:  # noqa: BLE001 - tensorboard is optional
                warnings.warn(f"dynamix: TensorBoard logging disabled ({exc})", RuntimeWarning, stacklevel=2)
        self._queue: queue.Queue = queue.Queue()
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="dynamix-log", daemon=True)
        self._thread.start()

    def event(self, record: dict[str, Any]) -> None:
        if self._events is not None:
            self._queue.put((record, None))

    def decision(self, record: dict[str, Any], lr: float) -> None:
        if self._events is not None:
            self._queue.put((record, lr))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                record, lr = item
                assert self._events is not None
                if lr is None:
                    self._events.event(record)
                else:
                    self._scalars(self._events.decision(record, lr).to_dict(), lr)
            except Exception as exc:  # noqa: BLE001 - logging must never stop training
                if not self._failed:
                    self._failed = True
                    warnings.warn(f"dynamix: writing the run log failed ({exc!r})", RuntimeWarning, stacklevel=1)
            finally:
                self._queue.task_done()

    def _scalars(self, record: dict[str, Any], lr: float) -> None:
        if self._tb is None:
            return
        step = int(record["step"])
        tb = self._tb
        for w in record["workers"]:
            r = w["rank"]
            tb.add_scalar(f"rank{r}/batch_size", w["batch_size"], step)
            for key in ("step_s", "compute_s", "comm_s", "nic_tx_Bps", "cpu_util", "mem_headroom"):
                v = w.get(key, float("nan"))
                if v is not None and math.isfinite(v):
                    tb.add_scalar(f"rank{r}/{key}", v, step)
            if w.get("step_s") and math.isfinite(w["step_s"]) and w["step_s"] > 0 and math.isfinite(w["comm_s"]):
                tb.add_scalar(f"rank{r}/idle_fraction", w["comm_s"] / w["step_s"], step)
        g = record["glob"]
        for key in ("noise_scale", "loss", "loss_trend", "samples_per_s"):
            v = g.get(key)
            if v is not None and math.isfinite(v):
                tb.add_scalar(f"global/{key}", v, step)
        tb.add_scalar("global/global_batch", sum(record["next_plan"]["batch_sizes"]), step)
        tb.add_scalar("global/lr", lr, step)
        tb.add_scalar("global/decide_ms", record["decide_ms"], step)
        for kind in ("fallback", "guard_revert"):
            if record.get(kind):
                tb.add_scalar(f"events/{kind}", 1.0, step)
        if record.get("reward") is not None and math.isfinite(record["reward"]):
            tb.add_scalar("global/reward", record["reward"], step)

    def flush(self) -> None:
        """Wait until every record handed over is written (events.jsonl and TensorBoard)."""
        if self._events is None:
            return
        self._queue.join()
        self._events.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._events is not None:
            self._queue.put(None)
            self._thread.join()
            self._events.close()
            self._events = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


class EpochProgress:
    """Rank 0's progress bar: samples of the current epoch, ETA, plan and throughput (tqdm)."""

    def __init__(self, dataset_size: int, enabled: bool) -> None:
        self.dataset_size = dataset_size
        self.enabled = enabled
        self._bar = None
        self._epoch = -1

    def update(self, epoch: int, cursor_end: int, samples: int, plan: tuple[int, ...]) -> None:
        if not self.enabled:
            return
        if epoch != self._epoch:
            from tqdm import tqdm

            self.close()
            self._bar = tqdm(total=self.dataset_size, desc=f"epoch {epoch}", unit="sample", leave=True,
                             initial=max(cursor_end - samples, 0), dynamic_ncols=True)
            self._epoch = epoch
        assert self._bar is not None
        self._bar.update(samples)
        self._bar.set_postfix_str(f"B={sum(plan)} plan={list(plan)}", refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
