"""Early decisions: a rank's own step-time change detector (pure; no communication).

A decision every ``interval_steps`` steps reacts to a node slowing down only after the interval
that holds the change is over, and the compute model waits for a second deviating interval
before it believes the change: live, 10-20 steps at the slowed pace (node_slowdown, K = 10).
Each rank instead watches its own per-step compute time and step time: when the last
``confirm`` steps under the current plan all differ from the median of the steps before them
by more than ``tol`` (relative, same direction), the rank flags a change. The flag rides on the
next step's gradients (the out-of-memory flag's channel: ``apply.FlagProbe``), so every rank
learns of it in the next step and all of them take a decision together; nothing extra crosses
the network.

The statistics of the interval that the early decision reports then cover only the steps since
the change (``Dynamix._worker_row``), and a rank whose *compute* time changed says so
(``WorkerStats.changed``), so the compute model restarts that rank's history at once instead of
waiting for a second interval.

A plan change that moves this rank's batch or the global batch by more than ``plan_tol`` (10%)
resets the detector: a new plan changes the step times on purpose. Smaller moves do not: the
controllers move a rank by a sample or two now and then, and resetting on each of those left the
detector blind for the 8 steps it needs after every plan change (live, link_degrade: a PPO plan
change one step before the link slowed, and no early decision).

After an early decision every rank rebases (``rebase``), so the ranks that would have confirmed
the same change a step later do not ask for a second decision.

Scheduling noise can fake a step-time change: in session 7, one of five hetero8 runs (8 ranks on
2 cores, no event) took one such decision. It cost that decision, and the plan stayed (deadband).
A step-time-only change does not restart any rank's compute model.

A change must also have lasted ``min_run_s`` seconds (the hook: a tenth of ``min_decision_s``,
50 ms by default), however many steps that takes (at most half the window). Measured (issue 25,
session 20, the overhead bench: 2 identical ranks, ~2 ms steps, no event): the step time jumps
between ~2 and ~3.8 ms for 3-5 steps at a time, and those bursts confirmed a "change" 2-4 times
per 1000 steps, each an early decision of ~1.5 ms (two thirds of all decisions). At the
scenarios' 30-100 ms steps three steps already last longer than 50 ms: nothing changes there."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Change:
    """A confirmed change: which series moved, and how many of the latest steps it covers."""

    compute: bool      # this rank's own compute time changed (not only its wait for others)
    step: bool         # its wall time per step changed (any rank's compute, or the network)
    steps_since: int   # the change happened this many steps ago (the confirming steps)


class ChangeDetector:
    """Flags a sustained change of this rank's per-step compute or step time under one plan."""

    def __init__(self, tol: float = 0.5, confirm: int = 3, reference: int = 5, window: int = 32,
                 plan_tol: float = 0.1, min_run_s: float = 0.0) -> None:
        if not tol > 0:
            raise ValueError(f"tol={tol}: must be > 0")
        if not plan_tol >= 0:
            raise ValueError(f"plan_tol={plan_tol}: must be >= 0")
        if confirm < 1 or reference < 1:
            raise ValueError(f"confirm={confirm}, reference={reference}: must be >= 1")
        if window < confirm + reference:
            raise ValueError(f"window={window}: must be >= confirm + reference = {confirm + reference}")
        if not min_run_s >= 0:
            raise ValueError(f"min_run_s={min_run_s}: must be >= 0")
        self.tol, self.confirm, self.reference, self.window = float(tol), int(confirm), int(reference), int(window)
        self.plan_tol = float(plan_tol)
        self._sizes: tuple[float, float] | None = None   # (own batch, global batch) the history is under
        self.min_run_s = float(min_run_s)
        self._compute = _Series(self.confirm, self.reference, self.window, self.tol, self.min_run_s)
        self._step = _Series(self.confirm, self.reference, self.window, self.tol, self.min_run_s)

    def reset(self) -> None:
        self._sizes = None
        self._compute.keep_last(0)
        self._step.keep_last(0)

    def rebase(self) -> None:
        """A decision has just taken account of the latest steps: keep only the last ``confirm``
        of them, so a change they show is not confirmed again."""
        self._compute.keep_last(self.confirm)
        self._step.keep_last(self.confirm)

    def add(self, batch: float, global_batch: float, compute_s: float, step_s: float) -> Change | None:
        """One full step's timings, with this rank's and the global batch size of the plan in
        force; a ``Change`` when this step confirms one (then the history restarts from the
        confirming steps), else None. O(window) at most, no sort: the reference steps are kept
        sorted as they slide."""
        sizes = self._sizes
        if sizes is None or (batch != sizes[0] or global_batch != sizes[1]) and (
                abs(batch - sizes[0]) > self.plan_tol * sizes[0] or
                abs(global_batch - sizes[1]) > self.plan_tol * sizes[1]):
            self.reset()
            self._sizes = (float(batch), float(global_batch))
        if not (0 < compute_s < math.inf and 0 < step_s < math.inf):    # (NaN fails both)
            return None
        c = self._compute.push(compute_s)
        s = self._step.push(step_s)
        if not (c or s):
            return None
        n = max(c, s)
        self._compute.keep_last(n)
        self._step.keep_last(n)
        return Change(compute=bool(c), step=bool(s), steps_since=n)


FALSE_ALARM = 1e-4   # chance per step that timing noise alone confirms a change in one series


class _Series:
    """The last ``window`` values of one timing series; the ones before the last ``confirm`` (the
    reference) also kept sorted, so their median is an index. ``push`` returns the number of
    latest values that all differ from that median by more than ``tol`` in the same direction
    (up: > tol; down: < -tol / (1 + tol), the same ratio the other way) when that run confirms a
    change, else 0.

    The run must be ``confirm`` long on a steady series with a full reference, longer on a noisy
    one or on a short reference: with p the fraction of reference values that are themselves
    outside the band (Laplace-smoothed, so p >= 1 / (m + 2): a short reference, as right after
    a decision rebased it, is not trusted to be steady; the run's own values are not counted),
    it must be ``ceil(log FALSE_ALARM / log p)`` long (at most half the
    window), so that noise alone confirms a change with a chance of about ``FALSE_ALARM`` per
    step. Measured (issue 25): on this 2-core machine under load, three steps in a row 50%
    slower than the median came every ~9 steps, and the hook took an early decision (a gather
    and a broadcast) each time: 110 decisions per 1000 steps instead of 16. On a quiet machine
    the overhead bench still shows 0-7.5 early decisions per 1000 steps with the bound at 1e-3
    or 1e-4 alike, so those are not noise of this kind (not yet attributed: the bench blocks'
    start-up, the machine's speed-mode switches)."""

    def __init__(self, confirm: int, reference: int, window: int, tol: float, min_run_s: float = 0.0) -> None:
        self.n, self.min_len, self.window = confirm, confirm + reference, window
        self.min_run_s = min_run_s
        self.up, self.down = 1.0 + tol, 1.0 / (1.0 + tol)
        self.xs: list[float] = []
        self.ref: list[float] = []     # sorted xs[:-n]

    def keep_last(self, k: int) -> None:
        if len(self.xs) > k:
            del self.xs[:len(self.xs) - k]
        self.ref = sorted(self.xs[:-self.n]) if len(self.xs) > self.n else []

    def push(self, x: float) -> bool:
        xs, ref, n = self.xs, self.ref, self.n
        xs.append(x)
        if len(xs) > n:
            bisect.insort(ref, xs[-n - 1])          # left the last n: joins the reference
        if len(xs) > self.window:
            del ref[bisect.bisect_left(ref, xs[0])]
            del xs[0]
        if len(xs) < self.min_len:
            return False
        m = len(ref)
        med = ref[m // 2] if m % 2 else 0.5 * (ref[m // 2 - 1] + ref[m // 2])
        hi, lo = med * self.up, med * self.down
        if x > hi:
            beyond = [v > hi for v in reversed(xs)]
        elif x < lo:
            beyond = [v < lo for v in reversed(xs)]
        else:
            return 0
        run = beyond.index(False) if False in beyond else len(beyond)
        if run < n:
            return 0
        inside_run = run - n                  # the run's older values are in the reference too
        out = m - bisect.bisect_right(ref, hi) + bisect.bisect_left(ref, lo) - inside_run
        p = (out + 1) / (m - inside_run + 2)
        need = max(n, min(math.ceil(math.log(FALSE_ALARM) / math.log(p)), self.window // 2))
        if run < need or (self.min_run_s > 0 and sum(xs[-run:]) < self.min_run_s):
            return 0
        return run
