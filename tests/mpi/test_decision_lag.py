"""``decision_lag`` under real MPI: rank 0's controller decides in its decide thread while every
rank trains on, and the plan is broadcast ``decision_lag`` steps after the gather. The plans are
the ones a waiting decision gives, each applied exactly ``decision_lag`` steps later, on every rank
at the same step, with exact-once coverage; a checkpoint, a restore and an out-of-memory re-split
with a decision in flight lose nothing and hang nothing."""
from __future__ import annotations

import threading
import warnings

import horovod.torch as hvd
import pytest
import torch
import torch.nn.functional as F

from _models import ScriptedController, make_data, make_model, uneven_script
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.errors import OutOfMemoryError
from dynamix_hvd.horovod import Dynamix
from dynamix_hvd.plan import PlanBounds

hvd.init()


class ThreadNoting(ScriptedController):
    """The scripted plans, noting the thread each decision ran on."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.threads: list[str] = []

    def decide(self, state):
        self.threads.append(threading.current_thread().name)
        return super().decide(state)


def _hook(comm, lag: int, n: int = 1200, **kw):
    world = comm.Get_size()
    x, y = make_data(n=n)
    model = make_model()
    cfg = DynamixConfig(base_batch=9, interval_steps=4, min_decision_s=0, deadband=0.0, max_batch=64, seed=3,
                        decision_lag=lag, collector=False, **{"react": False, **kw})
    bounds = PlanBounds(max_batch=(64,) * world, deadband=0.0)
    ctl = ThreadNoting(bounds, 9, uneven_script(world, 5)) if comm.Get_rank() == 0 else None
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg, controller=ctl)
    return dyn, model, x, y


def _epoch(dyn, model, x, y, epoch: int = 0, until: int | None = None):
    """Train (the rest of) ``epoch``; the (step, sizes) of every step and the indices seen."""
    trace, seen = [], []
    for idx in dyn.batches(epoch):
        trace.append((dyn.current_slice.step, dyn.current_slice.sizes))
        seen.extend(idx.tolist())
        dyn.optimizer.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        dyn.optimizer.step()
        if until is not None and dyn.step_count >= until:
            break
    return trace, seen


def _changes(trace):
    """(step, sizes) of every step whose sizes differ from the step before (the epoch's last,
    partial step left out)."""
    trace = trace[:-1]
    return [(s, z) for (s, z), prev in zip(trace[1:], trace) if z != prev[1]]


@pytest.mark.parametrize("lag", [1, 2, 3])
def test_a_lagged_decision_applies_the_waiting_decisions_plans_lag_steps_later(comm, lag):
    ref, *rest = _hook(comm, 0)
    ref_trace, _ = _epoch(ref, *rest)
    ref.close()
    dyn, model, x, y = _hook(comm, lag)
    trace, seen = _epoch(dyn, model, x, y)
    everything = comm.gather(seen, root=0)
    traces = comm.allgather(trace)
    assert all(t == traces[0] for t in traces), "ranks disagree on step sizes"
    if comm.Get_rank() == 0:
        assert sorted(i for r in everything for i in r) == list(range(len(x))), "an index skipped or repeated"
    want, got = _changes(ref_trace), _changes(trace)
    assert len(want) >= (3 if comm.Get_size() > 1 else 0)
    n = len(got)                       # (the lagged epoch may end before its last plan applies)
    assert n >= len(want) - 1
    assert got == [(s + lag, z) for s, z in want[:n]]
    if comm.Get_rank() == 0:
        threads = dyn.controller.threads
        assert threads and all(t.startswith("dynamix-decide") for t in threads), threads
        assert all(t == threading.main_thread().name for t in ref.controller.threads)
    dyn.close()


@pytest.mark.parametrize("lag", [2, 3])
def test_the_rows_and_the_plan_travel_during_the_steps_of_the_lag(comm, lag):
    """Lag 2: the gather is waited for one step after it started (Horovod's background thread moved
    it); lag 3: the broadcast too, started one step before the plan applies. Noted on every rank."""
    dyn, model, x, y = _hook(comm, lag)
    stages = []                             # (steps since the gather, rows travelling, plan travelling)
    for _ in range(12):
        _epoch(dyn, model, x, y, until=dyn.step_count + 1)
        fl = dyn._inflight                  # noqa: SLF001 - the state under test
        if fl is not None:
            stages.append((dyn.step_count - 1 - fl.step, fl.rows is not None, fl.plan is not None))
        elif stages:
            break
    if lag == 2:
        assert stages == [(0, True, False), (1, False, False)], stages
    else:
        assert stages == [(0, True, False), (1, False, False), (2, False, True)], stages
    assert comm.allgather(stages) == [stages] * comm.Get_size()
    dyn.close()


def test_a_checkpoint_with_a_decision_in_flight_holds_its_plan(comm, tmp_path_factory):
    path = comm.bcast(str(tmp_path_factory.mktemp("ckpt") / "c.pt") if comm.Get_rank() == 0 else None)
    dyn, model, x, y = _hook(comm, 2)
    before = dyn.sampler.plans.latest
    for _ in range(10):                   # until the first decision is in flight
        _epoch(dyn, model, x, y, until=dyn.step_count + 1)
        if dyn._inflight is not None:      # noqa: SLF001 - the state under test
            break
    assert dyn._inflight is not None and dyn.sampler.plans.latest == before
    gathered = dyn._inflight.step           # noqa: SLF001
    dyn.save(path)                         # collective: the plan is broadcast first
    assert dyn._inflight is None
    saved = dyn.sampler.plans.latest
    if comm.Get_size() > 1:               # (one rank: the scripted sizes renormalise to the same plan)
        assert saved.version == before.version + 1 and saved.start_step == gathered + 1 + 2
    fresh, model2, _, _ = _hook(comm, 2)
    fresh.load(path)
    assert fresh.sampler.plans.latest == saved
    trace, seen = _epoch(fresh, model2, x, y)          # the rest of the epoch, from the checkpoint
    if comm.Get_size() > 1:
        assert dict(trace)[saved.start_step] == saved.batch_sizes
    assert len(seen) > 0
    dyn.close()
    fresh.close()


class ShrinkingMemory:
    """Emulated device: from step ``at`` on, the last rank fits at most ``limit`` samples (another
    job took memory); notes whether a decision was in flight at each out-of-memory error."""

    def __init__(self, dyn, rank: int, world: int, at: int, limit: int) -> None:
        self.dyn, self.at, self.limit = dyn, at, (limit if rank == world - 1 else 10**9)
        self.rank = rank
        self.in_flight: list[bool] = []

    def check(self, batch_size: int) -> None:
        if self.dyn.step_count >= self.at and batch_size > self.limit:
            self.in_flight.append(self.dyn._inflight is not None)   # noqa: SLF001
            raise OutOfMemoryError(self.rank, batch_size, self.limit)


def test_an_out_of_memory_re_split_drops_the_decision_in_flight(comm):
    rank, world = comm.Get_rank(), comm.Get_size()
    x, y = make_data(n=500)
    model = make_model()
    cfg = DynamixConfig(base_batch=16, interval_steps=3, min_decision_s=0, max_batch=64, controller="static",
                        collector=False, decision_lag=2)
    dyn = Dynamix(model, torch.optim.SGD(model.parameters(), lr=0.05), dataset_size=len(x), config=cfg)
    emu = ShrinkingMemory(dyn, rank, world, at=3, limit=11)    # the first decision: gathered after step 2
    seen: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for idx in dyn.batches(0):
            dyn.optimizer.zero_grad()
            try:
                emu.check(len(idx))
                F.cross_entropy(model(x[idx]), y[idx]).backward()
            except OutOfMemoryError:
                dyn.report(oom=True)
            dyn.optimizer.step()
            if not dyn._redo:               # noqa: SLF001
                seen.extend(idx.tolist())
    everything = comm.gather(seen, root=0)
    noted = comm.allgather(emu.in_flight)
    if rank == 0:
        assert sorted(i for r in everything for i in r) == list(range(len(x)))
    assert sum(len(v) for v in noted) >= 1 and all(v[0] for v in noted if v), noted
    assert dyn.plan.batch_sizes[world - 1] <= 11
    dyn.close()


def test_an_early_decision_drops_the_regular_one_in_flight_and_does_not_wait(comm, tmp_path_factory):
    rank, world = comm.Get_rank(), comm.Get_size()
    run_dir = comm.bcast(str(tmp_path_factory.mktemp("early")) if rank == 0 else None)
    dyn, model, x, y = _hook(comm, 3, run_dir=run_dir, tensorboard=False, react=True)
    flagged_at = None
    for idx in dyn.batches(0):
        step = dyn.current_slice.step
        if flagged_at is None and step > 5 and dyn._inflight is not None:   # noqa: SLF001 - (on every rank)
            flagged_at = step
            if rank == world - 1:
                dyn.local.react_flag = 1       # this rank's detector "fired" while a decision is in flight
        dyn.optimizer.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        dyn.optimizer.step()
        if flagged_at is not None and step >= flagged_at + 4:
            break
    dyn.close()
    if rank == 0:
        from dynamix_hvd.runlog import read_decisions, read_events
        dropped = [e["decision_dropped"] for e in map(lambda r: r.to_dict(), read_events(run_dir))
                   if "decision_dropped" in e]
        early = [r.to_dict() for r in read_decisions(run_dir) if r.early is not None]
        # the next regular decision, gathered after step flagged_at + 4, is in flight when the job closes
        assert [d["reason"] for d in dropped] == ["a rank flagged a change", "closed"], dropped
        assert len(early) == 1 and early[0]["early"]["ranks"] == [world - 1], early
        assert early[0]["step"] > dropped[0]["gathered"]
        if world > 1:                          # (one rank: the scripted sizes renormalise to the same plan)
            assert early[0]["next_plan"]["start_step"] == early[0]["step"]   # from the next step: no lag
