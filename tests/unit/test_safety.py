from dynamix_hvd.safety import ControllerErrors, GoodputGuard


def test_guard_fires_after_two_bad_intervals():
    g = GoodputGuard(drop=0.1, patience=2)
    assert not g.observe(100.0, False)
    assert not g.observe(101.0, False)
    assert not g.observe(85.0, True)      # one bad interval
    assert g.observe(80.0, True)          # second in a row: fire


def test_guard_recovers_and_ignores_missing():
    g = GoodputGuard(drop=0.1, patience=2)
    g.observe(100.0, False)
    g.observe(80.0, True)
    assert not g.observe(99.0, False)     # back to normal resets the count
    assert not g.observe(float("nan"), True)
    assert not g.observe(80.0, True)


def test_controller_errors():
    e = ControllerErrors(max_errors=2)
    assert not e.failed()
    e.ok()
    assert not e.failed()
    assert e.failed()


def _interval(sizes, compute, step):
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats
    ws = [WorkerStats(rank=r, batch_size=b, max_batch=256, compute_s=c, step_s=step)
          for r, (b, c) in enumerate(zip(sizes, compute))]
    return ClusterState(Plan(0, tuple(sizes)), ws, GlobalStats())


def test_unexplained_slowdown_separates_the_cluster_from_the_plan():
    import math
    from dynamix_hvd.safety import unexplained_slowdown
    # 4 ranks, 3 ms fixed + 1 ms per sample, 9 ms per step outside compute
    before = _interval([16] * 4, [0.019] * 4, 0.028)
    # rank 2 becomes 4x slower per sample at the same plan: the cluster explains the slower step
    node = _interval([16] * 4, [0.019, 0.019, 0.067, 0.019], 0.076)
    assert unexplained_slowdown(before, node) > 2.0
    # a link degrades: compute unchanged, the overhead outside compute goes from 9 to 50 ms
    link = _interval([16] * 4, [0.019] * 4, 0.069)
    assert unexplained_slowdown(before, link) > 2.0
    # the plan moves 10 samples onto rank 2 (no cluster change): the step time is what the plan
    # predicts from the old rates, so the slowdown is the plan's
    plan = _interval([13, 13, 26, 12], [0.016, 0.016, 0.029, 0.015], 0.038)
    assert 0.9 < unexplained_slowdown(before, plan) < 1.1
    # halving every batch of an overhead-dominated model (15 ms fixed, 0.2 ms per sample): per-sample
    # scaling would expect 16 ms of compute, the truth is 21.4 ms; the plan still explains it
    heavy = _interval([64] * 4, [0.0278] * 4, 0.038)
    halved = _interval([32] * 4, [0.0214] * 4, 0.0316)
    assert unexplained_slowdown(heavy, halved) <= 1.0
    assert math.isnan(unexplained_slowdown(None, plan))
    assert math.isnan(unexplained_slowdown(before, _interval([16] * 4, [float("nan")] * 4, 0.03)))


def test_guard_does_not_blame_the_controller_for_a_cluster_slowdown():
    g = GoodputGuard(drop=0.1, patience=2)
    g.observe(100.0, False)
    g.observe(100.0, False)
    # a node slows right after a plan change: goodput halves, but the cluster explains it
    assert not g.observe(50.0, True, slowdown=1.9)
    assert not g.observe(48.0, False, slowdown=1.0)   # the new level is the reference
    assert not g.observe(49.0, False, slowdown=1.0)
    assert g.external == 1 and g.bad == 0
    # a drop the cluster does not explain after a decision still fires
    assert not g.observe(40.0, True, slowdown=1.02)
    assert g.observe(39.0, False, slowdown=1.0)


def test_guard_remembers_the_global_batch_of_its_reference():
    g = GoodputGuard(drop=0.1, patience=2)
    g.observe(100.0, False, global_batch=128)
    g.observe(100.0, False, global_batch=128)
    assert not g.observe(80.0, True, global_batch=256)      # the decision that doubled B
    assert g.observe(80.0, False, global_batch=256)
    assert g.baseline_B == 128                               # what the fallback restores


def test_guard_does_not_blame_the_controller_for_a_drop_under_the_reference_plan():
    # live: a PPO run whose plan had not changed for 12 intervals fell back after a two-interval
    # throughput dip (14% and 13% below the reference); no decision had moved anything
    g = GoodputGuard(drop=0.1, patience=2)
    for _ in range(5):
        assert not g.observe(2250.0, False, slowdown=1.0)
    assert not g.observe(1926.0, False, slowdown=1.08)
    assert g.baseline == 1926.0 and g.external == 1 and g.bad == 0
    assert not g.observe(1954.0, False, slowdown=0.98)   # the previous rule fired here
    # a plan change followed by a drop is still the controller's, also while the changed plan
    # stays in force for the next interval
    assert not g.observe(1950.0, False, slowdown=1.0)
    assert not g.observe(1700.0, True, slowdown=1.0)
    assert g.observe(1690.0, False, slowdown=1.0)
