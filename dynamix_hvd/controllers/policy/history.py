"""Per-worker history features: recent fluctuation statistics, to tell a transient straggler
from a lasting one.

Per decision, each rank's relative time per sample ``x_i = log2(t_i / median_j t_j)``
(``t = compute_s / batch_size``) is appended to a window of the last ``window`` decisions. The
features (one row per worker, appended to the observation of ``dynamix_hvd.state``):

* ``hist_mean``: mean of x_i over the window / 2 (a lasting offset: slower or faster hardware);
* ``hist_std``: standard deviation of x_i over the window (how much the rank fluctuates);
* ``hist_dev``: (x_i now - mean of the window before now) / 2 (a fresh change: positive = it just
  became slower than it usually is);
* ``hist_slow_frac``: fraction of the window in which the rank was > 15% slower than the median;
* ``hist_fill``: window fill (0..1), the same on every row (how much history there is).

Pure and cheap; the live PPO controller and the replay env keep one ``WorkerHistory`` each and
feed it the same ``ClusterState`` records, so both build identical features.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from dynamix_hvd.records import ClusterState

HISTORY_FEATURES = ("hist_mean", "hist_std", "hist_dev", "hist_slow_frac", "hist_fill")
N_HISTORY = len(HISTORY_FEATURES)
SLOW = float(np.log2(1.15))


class WorkerHistory:
    def __init__(self, window: int = 8) -> None:
        self.window = int(window)
        self.rows: deque[np.ndarray] = deque(maxlen=self.window)
        self._last: object = None
        self._feat: np.ndarray | None = None

    def reset(self) -> None:
        self.rows.clear()
        self._last, self._feat = None, None

    @staticmethod
    def relative_times(state: ClusterState) -> np.ndarray:
        b = np.array([max(float(w.batch_size), 1.0) for w in state.workers])
        c = np.array([float(w.compute_s) for w in state.workers])
        t = c / b
        ok = np.isfinite(t) & (t > 0)
        if not ok.any():
            return np.zeros(b.size)
        x = np.zeros(b.size)
        x[ok] = np.log2(t[ok] / float(np.median(t[ok])))
        return np.clip(x, -3.0, 3.0)

    def features(self, state: ClusterState) -> np.ndarray:
        """(N, N_HISTORY) features for this state; the state is added to the window once (a second
        call with the same state object returns the same features)."""
        if state is self._last and self._feat is not None:
            return self._feat
        x = self.relative_times(state)
        if self.rows and self.rows[-1].size != x.size:
            self.rows.clear()               # the world size changed: old rows do not match
        prev = np.array(self.rows) if self.rows else None
        self.rows.append(x)
        h = np.array(self.rows)
        f = np.zeros((x.size, N_HISTORY), dtype=np.float32)
        f[:, 0] = np.clip(h.mean(axis=0) / 2.0, -1.5, 1.5)
        f[:, 1] = np.clip(h.std(axis=0), 0.0, 1.5)
        f[:, 2] = np.clip((x - prev.mean(axis=0)) / 2.0, -1.5, 1.5) if prev is not None else 0.0
        f[:, 3] = (h > SLOW).mean(axis=0)
        f[:, 4] = len(self.rows) / self.window
        self._last, self._feat = state, f
        return f
