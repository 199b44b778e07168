"""The one controller loop (decide.decide_plan / decide.control_loop) shared by the live Decider,
the simulator rollouts, simulated fine-tuning and replay."""
from __future__ import annotations

from typing import Sequence

import pytest

from dynamix_hvd.agent.sim import ClusterSim, SimConfig
from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.decide import control_loop, decide_plan
from dynamix_hvd.plan import Plan, PlanBounds
from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats
from dynamix_hvd.safety import MoveLimits


class Fixed(Controller):
    """Proposes the same sizes every time (counts its calls)."""

    name = "fixed"

    def __init__(self, bounds: PlanBounds, sizes: Sequence[float], exact: bool = False) -> None:
        super().__init__(bounds, 32)
        self.sizes, self.exact, self.calls = list(sizes), exact, 0

    def decide(self, state: ClusterState) -> Sequence[float]:
        self.calls += 1
        return self.sizes


BOUNDS = PlanBounds(max_batch=(1024,) * 2, min_batch=1, deadband=0.0)


def _state(sizes=(32, 32)) -> ClusterState:
    return ClusterState(Plan(3, tuple(sizes), 0), [WorkerStats(rank=r, batch_size=b, max_batch=1024)
                                                   for r, b in enumerate(sizes)],
                        GlobalStats(noise_scale=100.0, noise_scale_stable=True))


def test_decide_plan_applies_the_move_limits_to_a_measuring_controller_only():
    st = _state()
    plan, proposed, notes = decide_plan(Fixed(BOUNDS, [8, 200]), st, BOUNDS, 10, MoveLimits())
    # B at most 1.5x (64 -> 96), each rank at most 2x its size: 16..64
    assert sum(plan.batch_sizes) == 96 and max(plan.batch_sizes) <= 64 and plan.start_step == 10 and notes
    assert plan.version == 4
    exact, _, notes = decide_plan(Fixed(BOUNDS, [8, 200], exact=True), st, BOUNDS, 10, MoveLimits())
    assert exact.batch_sizes == (8, 200) and not notes
    free, _, _ = decide_plan(Fixed(BOUNDS, [8, 200]), st, BOUNDS, 10, None)
    assert free.batch_sizes == (8, 200)


def test_decide_plan_keeps_the_plan_object_and_rescales_to_a_global_batch():
    st = _state()
    same, _, _ = decide_plan(Fixed(BOUNDS, [32, 32]), st, BOUNDS, 10, MoveLimits())
    assert same is st.plan
    scaled, proposed, _ = decide_plan(Fixed(BOUNDS, [20, 60]), st, BOUNDS, 10, None, global_batch=40.0)
    assert proposed == [10.0, 30.0] and scaled.batch_sizes == (10, 30)


def test_control_loop_runs_every_interval_once_and_stops():
    sim = ClusterSim(SimConfig(n_workers=(2, 2)), seed=0)
    sim.reset(1, "static_hetero")
    ctl = Fixed(BOUNDS, [24, 40])
    ivs = list(control_loop(sim, ctl, BOUNDS, Plan.uniform(2, 32)))
    assert sim.done and len(ivs) == SimConfig().episode_len - 1 == ctl.calls
    assert ivs[0].prev.batch_sizes == (32, 32) and ivs[0].plan.batch_sizes == (24, 40)
    assert all(iv.plan is iv.prev for iv in ivs[1:])          # nothing moved: the same plan object
    sim.reset(1, "static_hetero")
    assert len(list(control_loop(sim, Fixed(BOUNDS, [24, 40]), BOUNDS, Plan.uniform(2, 32), max_intervals=5))) == 4


@pytest.mark.parametrize("limits", [None, MoveLimits()])
def test_control_loop_is_decide_plan_on_the_simulator_states(limits):
    """The loop hands each interval's state to decide_plan and runs what it returns."""
    from dynamix_hvd.controllers import make_controller
    sim = ClusterSim(SimConfig(n_workers=(4, 4)), seed=0)
    sim.reset(2, "static_hetero")
    bounds = sim.bounds(0.05)
    got = [iv.plan for iv in control_loop(sim, make_controller("proportional", bounds, 32), bounds,
                                          Plan.uniform(4, 32), limits=limits, max_intervals=12)]
    sim.reset(2, "static_hetero")
    ctl, plan = make_controller("proportional", bounds, 32), Plan.uniform(4, 32)
    out, want = sim.step(plan.batch_sizes), []
    for _ in range(11):
        plan = decide_plan(ctl, sim.cluster_state(plan, out), bounds, sim.t, limits)[0]
        out = sim.step(plan.batch_sizes)
        want.append(plan)
    assert got == want and any(p.batch_sizes != (32,) * 4 for p in got)   # (and the controller did move)
