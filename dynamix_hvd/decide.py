"""Decide: rank 0's decision, from the gathered rows to the next plan. No MPI, no torch: pure
enough to run and test on its own (tests/unit/test_decide.py).

    rows (one per rank)  ->  GlobalStats (noise scale, loss trend, throughput)  ->  ClusterState
    ->  goodput guard (falls back after bad decisions)  ->  controller.decide
    ->  per-decision move limits (safety.limit_proposal)  ->  plan.next_plan (bounds, quantum,
        deadband)  ->  (next plan, decision record with the controller's reason)

The controller loop itself (controller.decide -> move limits -> next_plan) is ``decide_plan``; the
simulators (agent/rollout.py, agent/finetune_sim.py, replay/runner.py) run it through
``control_loop`` on simulated or replayed records, so every controller is driven the same way live
and offline.

A controller that raises never stops training: the plan stays, and after repeated faults the
fallback controller takes over (logged as an event and a warning).
"""
from __future__ import annotations

import math
import sys
import time
import warnings
from typing import Any, Callable, Iterator, NamedTuple, Protocol, Sequence

import numpy as np

from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.controllers import Controller, make_controller
from dynamix_hvd.plan import Plan, PlanBounds, next_plan
from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats
from dynamix_hvd.safety import ControllerErrors, GoodputGuard, MoveLimits, limit_proposal, unexplained_slowdown
from dynamix_hvd.stats import NoiseScaleEstimator, Trend, statistical_efficiency


def _moves(proposed: Sequence[float], current: Plan) -> bool:
    return len(proposed) != current.world_size or any(
        abs(float(p) - b) > 1e-9 for p, b in zip(proposed, current.batch_sizes))


def decide_plan(controller: Controller, state: ClusterState, bounds: PlanBounds, start_step: int,
                limits: MoveLimits | None, global_batch: float = math.nan) -> tuple[Plan, Sequence[float], list[str]]:
    """The controller loop's one step: ``controller.decide(state)`` -> (rescaled to ``global_batch``
    when that is finite and > 0: the goodput guard's revert, which ``MoveLimits.reverting`` lets reach it in
    this decision) -> per-decision move ``limits`` (none
    for an exact controller, a proposal of the current sizes, or ``limits=None``) -> ``next_plan``
    from ``start_step``. Returns (next plan, the proposal after the limits, one note per limit that
    bound). The plan is ``state.plan`` itself when it stays. Exceptions of the controller propagate.
    A controller whose decision ``passes_hold`` (a policy trained with ``ActionConfig.pass_hold``) is
    not held by the limits' hold on an unstable noise-scale estimate; every other limit applies."""
    current = state.plan
    proposed = controller.decide(state)
    total = float(sum(proposed))
    if math.isfinite(global_batch) and global_batch > 0 and total > 0:
        proposed = [float(x) * global_batch / total for x in proposed]
        if limits is not None:      # the revert reaches the batch measured good in this decision
            limits = limits.reverting(float(sum(current.batch_sizes)), global_batch)
    notes: list[str] = []
    # (a proposal of the current sizes has nothing to limit: skip the 0.5 ms of limit_proposal)
    if limits is not None and not controller.exact and _moves(proposed, current):
        if controller.passes_hold and limits.hold_global_without_gns:
            limits = limits.without_hold()
        proposed, notes = limit_proposal(state, proposed, limits, bounds.min_batch)
    return next_plan(current, proposed, bounds, start_step), proposed, notes


class Simulator(Protocol):
    """What ``control_loop`` drives: agent.sim.ClusterSim and replay.sim.ReplaySim."""

    t: int

    @property
    def done(self) -> bool: ...

    def step(self, sizes: Sequence[int]) -> dict[str, Any]: ...

    def cluster_state(self, plan: Plan, out: Any, last_action: np.ndarray | None = None) -> ClusterState: ...


class Interval(NamedTuple):
    """One simulated decision interval of ``control_loop``: the plan before the decision, the plan
    the interval ran with (``prev`` itself when it stayed) and the simulator's output for it."""

    prev: Plan
    plan: Plan
    out: dict[str, Any]


def control_loop(sim: Simulator, controller: Controller, bounds: PlanBounds, plan: Plan, *,
                 limits: MoveLimits | None = None, max_intervals: int | None = None,
                 decider: "Decider | None" = None) -> Iterator[Interval]:
    """The live decision loop on a simulator: run ``plan`` for one interval, then until the
    simulator is done (or ``max_intervals`` intervals ran, the first included): state ->
    ``decide_plan`` -> one interval, yielding each. The caller's code between two yields runs
    before the next decision (rewards, waiting for a background update).

    With ``decider`` (a ``Decider`` around ``controller``) each decision is the live hook's whole one:
    the goodput guard with its fallback and revert, then the Decider's own move limits (``limits`` is
    not used). A controller that raises stops the loop here (offline a fault is a bug to see, not a
    job to keep running)."""
    out = sim.step(plan.batch_sizes)
    n = 1
    while not sim.done and (max_intervals is None or n < max_intervals):
        state = sim.cluster_state(plan, out)
        if decider is None:
            new = decide_plan(controller, state, bounds, sim.t, limits)[0]
        else:
            record: dict[str, Any] = {}
            new = decider.decide(state.workers, state.glob, plan, sim.t, record)
            if "controller_error" in record:
                raise RuntimeError(f"controller {decider.controller.name!r} failed: {record['controller_error']}")
            decider.applied(new, plan)
        prev, plan = plan, new
        out = sim.step(plan.batch_sizes)
        n += 1
        yield Interval(prev, plan, out)


class Decider:
    """Rank 0's controller with its guards, trends and the memory of the last decision."""

    def __init__(self, config: DynamixConfig, bounds: PlanBounds, base_global_batch: int,
                 controller: Controller | None = None, log_event: Callable[[dict], None] | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.bounds = bounds
        self.base_global_batch = base_global_batch
        self.log_event = log_event or (lambda e: None)
        self.say = say if say is not None else (lambda s: sys.stderr.write(s + "\n"))
        self.controller = controller or self.build_controller()
        self.loss_trend = Trend()
        self.var_trend = Trend()
        self.errors = ControllerErrors()
        self.guard = self._new_guard()
        self.retries_left = config.guard_retries   # the guard's reverts left before the fallback (goodput)
        self.reverts = 0                             # the guard's reverts that left the controller in charge
        self.limits = MoveLimits(max_rank_change=config.max_rank_change, max_global_change=config.max_global_change)
        self.changed_last = False
        self.prev_state: ClusterState | None = None    # the last decision's state (the guard's reference)
        self.last_action: np.ndarray | None = None

    def build_controller(self) -> Controller:
        """The configured controller; if it cannot be built (e.g. a missing or corrupt policy
        file) the fallback controller, named in a warning and the event log."""
        cfg = self.config
        try:
            return make_controller(cfg.controller, self.bounds, cfg.base_batch, **cfg.controller_options())
        except Exception as exc:  # noqa: BLE001 - any build failure: run on the fallback
            if cfg.controller == cfg.fallback_controller:
                raise
            warnings.warn(f"dynamix: controller {cfg.controller!r} could not be built ({exc}); "
                          f"using the fallback controller {cfg.fallback_controller!r}", RuntimeWarning, stacklevel=4)
            self.log_event({"step": 0, "fallback": {"from": cfg.controller, "to": cfg.fallback_controller,
                                                    "reason": str(exc)}})
            return make_controller(cfg.fallback_controller, self.bounds, cfg.base_batch)

    def _new_guard(self) -> GoodputGuard:
        """A guard with no reference yet (the next interval's goodput becomes it)."""
        return GoodputGuard(drop=self.config.guard_drop, patience=self.config.guard_patience)

    def update_bounds(self, bounds: PlanBounds) -> None:
        self.bounds = bounds
        self.controller.update_bounds(bounds)

    # ---------------------------------------------------------------------------------------
    def global_stats(self, step: int, noise: NoiseScaleEstimator, loss: float, samples_per_s: float) -> GlobalStats:
        return GlobalStats(step=step + 1, noise_scale=noise.noise_scale, loss=loss,
                           noise_scale_rel_err=noise.rel_err, noise_scale_stable=noise.stable,
                           noise_scale_room=noise.growth_room,
                           loss_trend=self.loss_trend.update(loss),
                           grad_var_trend=self.var_trend.update(noise.grad_variance),
                           samples_per_s=samples_per_s)

    def decide(self, workers: Sequence[WorkerStats], glob: GlobalStats, current: Plan, start_step: int,
               record: dict[str, Any]) -> Plan:
        """The plan from ``start_step`` on (``current`` itself when it stays); fills ``record``."""
        state = ClusterState(plan=current, workers=list(workers), glob=glob, last_action=self.last_action)
        t0 = time.perf_counter()
        proposal, proposed = self._propose(state, current, start_step, record)
        finetune = getattr(self.controller, "finetune_info", lambda: None)()
        if finetune is not None:   # online PPO fine-tuning (config.finetune): counters + the reward
            record.update(finetune=finetune, reward=finetune.get("reward"))
        record.update({"controller": self.controller.name, "decide_ms": 1e3 * (time.perf_counter() - t0),
                       "plan": list(current.batch_sizes), "proposed": [float(x) for x in proposed],
                       "next_plan": proposal.to_dict(), "glob": glob, "workers": list(workers)})
        # (dataclasses: the log's writer thread converts them, off the training loop)
        return proposal

    def applied(self, new: Plan, old: Plan) -> None:
        """After the broadcast: the action the controller sees as ``last_action`` next time."""
        self.last_action = np.asarray(new.batch_sizes, dtype=float) - np.asarray(old.batch_sizes, dtype=float)

    def _propose(self, state: ClusterState, current: Plan, start_step: int,
                 record: dict[str, Any]) -> tuple[Plan, Any]:
        goodput = state.glob.samples_per_s * statistical_efficiency(
            current.global_batch, self.base_global_batch, state.glob.noise_scale)
        slowdown = unexplained_slowdown(self.prev_state, state)
        self.prev_state = state
        if math.isfinite(slowdown):
            record["cluster_slowdown"] = slowdown
        revert_B = math.nan
        if self.controller.guarded and self.guard.observe(goodput, self.changed_last, slowdown,
                                                          float(current.global_batch)):
            # undo the decisions that lost the goodput: the plan returns to the global batch the guard's
            # reference level was measured at (read before a new guard replaces this one)
            revert_B = self.guard.baseline_B
            reason = (f"goodput fell more than {self.config.guard_drop:.0%} for {self.config.guard_patience} "
                      f"intervals after {self.controller.name} decisions")
            anchor = getattr(self.controller, "guard_fallback", None)
            if anchor is None and self.retries_left > 0:
                # a controller with no anchor of its own (goodput) keeps the job after the revert, judged
                # against a new reference: its models now hold the batch that lost, and the fallback
                # (proportional) never moves the global batch again for the rest of the job
                self.retries_left -= 1
                self.reverts += 1
                self.guard = self._new_guard()
                record["guard_revert"] = {"controller": self.controller.name, "global_batch": revert_B,
                                          "reason": reason, "retries_left": self.retries_left}
                self.say(f"dynamix: {reason}: plan back to global batch {revert_B:g}, {self.controller.name} "
                         f"keeps the job ({self.retries_left} more revert(s) before {self.config.fallback_controller})")
            else:
                self.fall_back(record, reason, anchor)
                record["fallback"]["global_batch"] = revert_B
        try:
            proposal, proposed, notes = decide_plan(self.controller, state, self.bounds, start_step, self.limits,
                                                    revert_B)
            record["reason"] = "; ".join([r for r in (getattr(self.controller, "last_reason", None),) if r]
                                         + notes) or None
            outcome = getattr(self.controller, "last_outcome", None)
            if outcome is not None:
                record["policy"] = outcome
            if proposal is not current:
                self.say(f"dynamix: step {record.get('step', start_step)}: plan {list(current.batch_sizes)} -> "
                         f"{list(proposal.batch_sizes)} ({self.controller.name}): {record['reason']}")
            self.errors.ok()
        except Exception as exc:  # noqa: BLE001 - a controller fault must not stop training
            warnings.warn(f"dynamix: controller {self.controller.name!r} failed: {exc!r}; plan unchanged",
                          RuntimeWarning, stacklevel=4)
            record["controller_error"] = repr(exc)
            record["reason"] = getattr(self.controller, "last_reason", None)
            if self.errors.failed():
                self.fall_back(record, f"controller raised {self.errors.max_errors} times in a row: {exc!r}")
            proposed, proposal = list(current.batch_sizes), current
        self.changed_last = proposal is not current
        record["goodput"] = goodput
        return proposal, proposed

    def fall_back(self, record: dict[str, Any], reason: str, to: str | None = None) -> None:
        """Hand the job to controller ``to`` (None: the configured ``fallback_controller``), built anew."""
        old = self.controller.name
        self.controller = make_controller(to or self.config.fallback_controller, self.bounds, self.config.base_batch)
        # a new reference for the new controller (a guarded fallback, goodput after ppo, is judged on its own
        # decisions: the interval after the revert still ran partly under the plan that lost)
        self.guard = self._new_guard()
        self.retries_left = self.config.guard_retries
        self.errors.ok()
        record["fallback"] = {"from": old, "to": self.controller.name, "reason": reason}
        warnings.warn(f"dynamix: falling back from {old!r} to {self.controller.name!r}: {reason}",
                      RuntimeWarning, stacklevel=4)

    # ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return self.controller.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.controller.load_state_dict(state)
