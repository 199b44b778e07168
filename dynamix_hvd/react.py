"""Early decisions: a rank's own step-time change detector (pure; no communication).

A decision every ``interval_steps`` steps reacts to a node slowing down only after the interval
that holds the change is over, and the compute model waits for a second deviating interval
before it believes the change: live, 10-20 steps at the slowed pace (node_slowdown, K = 10).
Each rank instead watches its own per-step compute time and step time: when the last
``confirm`` steps under the current plan all differ from the median of the steps before them
by more than ``tol`` (relative, same direction), the rank flags a change. The flag rides on the
per-step collective the hook already runs (the out-of-memory check), so every rank learns of it
in the next step and all of them take a decision together; nothing extra crosses the network.

The statistics of the interval that the early decision reports then cover only the steps since
the change (``Dynamix._worker_row``), and a rank whose *compute* time changed says so
(``WorkerStats.changed``), so the compute model restarts that rank's history at once instead of
waiting for a second interval.

Any plan change resets the detector: a new plan changes every rank's step time on purpose."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Change:
    """A confirmed change: which series moved, and how many of the latest steps it covers."""

    compute: bool      # this rank's own compute time changed (not only its wait for others)
    step: bool         # its wall time per step changed (any rank's compute, or the network)
    steps_since: int   # the change happened this many steps ago (the confirming steps)


class ChangeDetector:
    """Flags a sustained change of this rank's per-step compute or step time under one plan."""

    def __init__(self, tol: float = 0.5, confirm: int = 3, reference: int = 5, window: int = 32) -> None:
        if not tol > 0:
            raise ValueError(f"tol={tol}: must be > 0")
        if confirm < 1 or reference < 1:
            raise ValueError(f"confirm={confirm}, reference={reference}: must be >= 1")
        if window < confirm + reference:
            raise ValueError(f"window={window}: must be >= confirm + reference = {confirm + reference}")
        self.tol, self.confirm, self.reference, self.window = float(tol), int(confirm), int(reference), int(window)
        self._key: object = None
        self._compute: list[float] = []
        self._step: list[float] = []

    def reset(self) -> None:
        self._key = None
        self._compute.clear()
        self._step.clear()

    def add(self, key: object, compute_s: float, step_s: float) -> Change | None:
        """One full step's timings under the plan identified by ``key``; a ``Change`` when this
        step confirms one (then the history restarts from the confirming steps), else None."""
        if key != self._key:
            self.reset()
            self._key = key
        if not (math.isfinite(compute_s) and math.isfinite(step_s) and compute_s > 0 and step_s > 0):
            return None
        self._compute.append(float(compute_s))
        self._step.append(float(step_s))
        if len(self._compute) > self.window:
            del self._compute[0], self._step[0]
        c, s = self._moved(self._compute), self._moved(self._step)
        if not (c or s):
            return None
        n = self.confirm
        self._compute[:] = self._compute[-n:]
        self._step[:] = self._step[-n:]
        return Change(compute=c, step=s, steps_since=n)

    def _moved(self, xs: list[float]) -> bool:
        n = self.confirm
        if len(xs) < n + self.reference:
            return False
        ref = statistics.median(xs[:-n])
        rel = [x / ref - 1.0 for x in xs[-n:]]
        return all(r > self.tol for r in rel) or all(r < -self.tol / (1.0 + self.tol) for r in rel)
