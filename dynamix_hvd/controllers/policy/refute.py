"""A departure from goodput's plan that goodput refutes once it has measured it is not repeated.

A learned policy departs from its goodput anchor where its observation resembles states in which a
different global batch paid in training. On a workload unlike those (session 40: one workload's
curves with another's step times, "chimeras"), it can depart the same way at every other decision,
and every departure costs: deepspeech2's statistics on bert's step times at N = 32, the shipped
default grew the batch 1.5x at every other decision where goodput held it, 1.04-1.13x goodput's time.

What the job measures after a departure judges it. The interval after a departure runs the departed
batch, so goodput's model (its throughput fit and its overlap fit over the batches it ran) has just
seen it. If goodput's next choice goes back by more than ``tolerance`` from the departed batch (it
still predicts a gain of more than its switching threshold for undoing it), the departure is
*refuted*; if goodput keeps it (or goes further the same way), it is *confirmed*. After ``limit``
refutations in one direction with no confirmation between them, departures that way are refused
for ``cooldown`` decisions, doubled at every closing (exponential back-off: the workload's
preferences change as training progresses, so a direction is retried, ever more rarely).

With ``warmup`` = K, no departure is allowed in the first K decisions of a job (goodput's plan is
taken), whatever the guard's state: its fits (the compute model, the overlap, the noise scale) start
from nothing, and a departure made then is judged against a model with little history.

Pure bookkeeping, no I/O: the controller calls ``judge`` once goodput has chosen from the new state,
``allow`` before taking a departure, and ``record`` with the departure it took.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass
class RefutedDepartures:
    """Per direction (+1 larger, -1 smaller global batch): consecutive refutations and closings."""

    limit: int = 2                 # refutations in a row that close a direction (0: the guard is off)
    warmup: int = 0                # the first decisions of a job, during which no departure is allowed
    cooldown: int = 10             # decisions a direction stays closed the first time (doubled each time)
    tolerance: float = 0.05        # goodput going back by less than this share of the departed batch keeps it
    t: int = 0                     # decisions seen
    pending: int | None = None     # the direction of the last decision's departure, to be judged
    refuted: dict[int, int] = field(default_factory=lambda: {1: 0, -1: 0})
    closings: dict[int, int] = field(default_factory=lambda: {1: 0, -1: 0})
    closed_until: dict[int, int] = field(default_factory=lambda: {1: 0, -1: 0})
    last_verdict: str | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.limit, int) and self.limit >= 0):
            raise ValueError(f"refute limit={self.limit!r}: an integer >= 0 (0: off)")
        if isinstance(self.warmup, bool) or not (isinstance(self.warmup, int) and self.warmup >= 0):
            raise ValueError(f"warmup={self.warmup!r}: an integer >= 0 (0: off)")
        if not (isinstance(self.cooldown, int) and self.cooldown >= 1):
            raise ValueError(f"refute cooldown={self.cooldown!r}: an integer >= 1")
        if not (0.0 <= self.tolerance < 1.0):
            raise ValueError(f"refute tolerance={self.tolerance!r}: a share in [0, 1)")

    def reset(self) -> None:
        """A new job: no pending departure, every direction open and unrefuted; the settings stay."""
        self.t, self.pending, self.last_verdict = 0, None, None
        for d in (1, -1):
            self.refuted[d] = self.closings[d] = self.closed_until[d] = 0

    @property
    def on(self) -> bool:
        return self.limit > 0

    def judge(self, goodput_B: float | None, departed: float) -> None:
        """Goodput's choice from the state after the last decision, where ``departed`` is the global
        batch that interval ran: refutes or confirms the last decision's departure."""
        self.t += 1
        self.last_verdict = None
        d, self.pending = self.pending, None
        if d is None or goodput_B is None or not (goodput_B > 0 and departed > 0):
            return
        back = (departed - goodput_B) / departed if d > 0 else (goodput_B - departed) / departed
        if back > self.tolerance:
            self.refuted[d] += 1
            self.last_verdict = f"goodput undid the last departure ({departed:.0f} -> {goodput_B:.0f})"
            if self.refuted[d] >= self.limit:
                span = self.cooldown * 2 ** self.closings[d]
                self.closings[d] += 1
                self.closed_until[d] = self.t + span
                self.refuted[d] = self.limit - 1          # one more refutation after reopening closes it again
                self.last_verdict += f"; {'larger' if d > 0 else 'smaller'} batches refused for {span} decisions"
        else:
            self.refuted[d] = 0
            self.last_verdict = f"goodput kept the last departure ({departed:.0f} -> {goodput_B:.0f})"

    def allow(self, direction: int) -> bool:
        """Whether a departure in ``direction`` (+1 / -1) may be taken now: not during the first
        ``warmup`` decisions of the job, nor while that direction is closed."""
        if direction == 0:
            return True
        if self.t <= self.warmup:
            return False
        return not self.on or self.t >= self.closed_until[direction]

    def record(self, direction: int) -> None:
        """The departure taken at this decision (``direction`` 0: none), to be judged at the next."""
        self.pending = direction if self.on and direction != 0 else None

    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "pending": self.pending,
                "refuted": [self.refuted[1], self.refuted[-1]], "closings": [self.closings[1], self.closings[-1]],
                "closed_until": [self.closed_until[1], self.closed_until[-1]]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            self.t = int(state.get("t", 0))
            p = state.get("pending")
            self.pending = None if p is None else int(p)
            if self.pending not in (None, 1, -1):
                raise ValueError(f"pending={p!r}")
            for name in ("refuted", "closings", "closed_until"):
                up, down = (int(x) for x in state.get(name, [0, 0]))
                getattr(self, name).update({1: up, -1: down})
        except (TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"ppo state 'refute': expected t, pending, refuted, closings, closed_until "
                             f"as saved by RefutedDepartures.state_dict ({exc})") from None
