"""Exact-once coverage of the sampler for random datasets, worlds and plan sequences."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamix_hvd.data import ExactOnceSampler, SamplerError, proportional_split, step_sizes
from dynamix_hvd.plan import Plan


@st.composite
def scenarios(draw):
    world = draw(st.integers(1, 16))
    n = draw(st.integers(world, 3000))
    k = draw(st.integers(1, 3))
    first = draw(st.lists(st.integers(1, 64), min_size=world, max_size=world))
    changes = draw(st.lists(
        st.tuples(st.integers(1, 40), st.lists(st.integers(1, 64), min_size=world, max_size=world)),
        max_size=6))
    epochs = draw(st.integers(1, 3))
    return world, n, k, first, changes, epochs


def run_epochs(world, n, k, first, changes, epochs, seed=3):
    """Drive one sampler per rank with the same plan changes; return per-epoch coverage."""
    samplers = [ExactOnceSampler(n, Plan(0, tuple(first)), seed=seed, accumulation=k) for _ in range(world)]
    pending = sorted(((s, sizes) for s, sizes in changes), key=lambda t: t[0])
    seen_per_epoch, steps_per_rank = [], []
    version = 0
    for epoch in range(epochs):
        seen = [[] for _ in range(world)]
        counts = []
        for r, smp in enumerate(samplers):
            steps = 0
            for sl in smp.iter_epoch(epoch):
                mbs = smp.rank_micro_batches(sl, r)
                assert len(mbs) == k
                if n >= world * k:
                    assert all(len(m) >= 1 for m in mbs), sl
                seen[r].extend(np.concatenate(mbs).tolist())
                steps += 1
            counts.append(steps)
        steps_per_rank.append(counts)
        seen_per_epoch.append(seen)
        # plan changes between epochs and mid-epoch are both exercised below
        for s, sizes in pending:
            version += 1
            start = samplers[0].step + s
            for smp in samplers:
                smp.plans.add(Plan(version, tuple(sizes), start))
        pending = []
    return seen_per_epoch, steps_per_rank


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_every_index_exactly_once_and_equal_steps(sc):
    world, n, k, first, changes, epochs = sc
    # mid-epoch changes: register them before the first epoch, at various future steps
    samplers_changes = [(s, sizes) for s, sizes in changes]
    seen_per_epoch, steps = run_epochs(world, n, k, first, [], 1)
    # now with the changes applied from step s (mid-epoch when s < steps)
    samplers = [ExactOnceSampler(n, Plan(0, tuple(first)), seed=1, accumulation=k) for _ in range(world)]
    for v, (s, sizes) in enumerate(sorted(samplers_changes, key=lambda t: t[0]), start=1):
        for smp in samplers:
            smp.plans.add(Plan(v, tuple(sizes), s))
    for epoch in range(epochs):
        all_idx, counts = [], []
        for r, smp in enumerate(samplers):
            c = 0
            for sl in smp.iter_epoch(epoch):
                all_idx.extend(smp.indices(sl, r).tolist())
                c += 1
            counts.append(c)
        assert len(set(counts)) == 1, counts
        assert sorted(all_idx) == list(range(n))
    for s in steps:
        assert len(set(s)) == 1


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_rank_steps_equals_iter_epoch_and_indices(sc):
    """The per-step path's fused generator yields what the two separate calls yield, with plan
    changes mid-epoch (added while the generator runs, as a decision does), epoch tails and
    accumulation; its cached total is the slice's sum."""
    world, n, k, first, changes, epochs = sc
    for r in sorted({0, world - 1, world // 2}):
        a = ExactOnceSampler(n, Plan(0, tuple(first)), seed=5, accumulation=k)
        b = ExactOnceSampler(n, Plan(0, tuple(first)), seed=5, accumulation=k)
        todo = sorted(changes, key=lambda t: t[0])
        version = 0
        for epoch in range(epochs):
            fused = a.rank_steps(epoch, r)
            for sl in b.iter_epoch(epoch):
                sl2, idx = next(fused)
                assert sl2 == sl and sl2.total == sum(sl.sizes)
                assert np.array_equal(idx, b.indices(sl, r))
                while todo and todo[0][0] <= sl.step:      # a decision after this step
                    version += 1
                    for smp in (a, b):
                        smp.plans.add(Plan(version, tuple(todo[0][1]), sl.step + 1))
                    todo.pop(0)
            assert next(fused, None) is None
            assert a.position() == b.position()


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_plans_between_epochs(sc):
    world, n, k, first, changes, epochs = sc
    seen_per_epoch, steps = run_epochs(world, n, k, first, changes, max(epochs, 2))
    for seen in seen_per_epoch:
        flat = sorted(i for r in seen for i in r)
        assert flat == list(range(n))
    for s in steps:
        assert len(set(s)) == 1


def test_resume_mid_epoch_sees_the_rest_once():
    n, world = 1000, 3
    plan = Plan(0, (10, 20, 30))
    a = ExactOnceSampler(n, plan, seed=7)
    a.plans.add(Plan(1, (5, 5, 50), 4))
    seen = []
    it = a.iter_epoch(0)
    for _ in range(6):
        sl = next(it)
        seen += [i for r in range(world) for i in a.indices(sl, r).tolist()]
    state = a.state_dict()
    b = ExactOnceSampler(n, Plan(0, (1, 1, 1)), seed=7)
    b.load_state_dict(state)
    for sl in b.iter_epoch(0):
        seen += [i for r in range(world) for i in b.indices(sl, r).tolist()]
    assert sorted(seen) == list(range(n))


def test_full_steps_use_plan_exactly():
    plan = Plan(0, (3, 5, 8))
    assert step_sizes(1000, plan, 1) == (3, 5, 8)
    assert step_sizes(1000, plan, 2) == (6, 10, 16)
    # 17 left: a full step would leave 1 < 3 ranks behind, so take 14 now (within the plan)
    tail = step_sizes(17, plan, 1)
    assert sum(tail) == 14 and all(1 <= t <= b for t, b in zip(tail, plan.batch_sizes))
    assert step_sizes(3, plan, 1) == (1, 1, 1)


def test_proportional_split_sums_and_minimum():
    assert sum(proportional_split(101, [1, 2, 3], 2)) == 101
    assert min(proportional_split(101, [1, 2, 3], 2)) >= 2
    assert proportional_split(2, [1, 1, 1], 1).count(0) == 1  # tiny dataset: 2 samples, 3 ranks


def test_checkpoint_mismatch_is_named():
    a = ExactOnceSampler(100, Plan(0, (4, 4)), seed=1)
    b = ExactOnceSampler(101, Plan(0, (4, 4)), seed=1)
    with pytest.raises(SamplerError, match="dataset_size"):
        b.load_state_dict(a.state_dict())


def test_bad_arguments():
    with pytest.raises(SamplerError, match="dataset_size"):
        ExactOnceSampler(0, Plan(0, (1,)))
    with pytest.raises(SamplerError, match="accumulation"):
        ExactOnceSampler(10, Plan(0, (1,)), accumulation=0)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.lists(st.integers(1, 64), min_size=1, max_size=16), st.integers(1, 3))
def test_no_step_exceeds_plan(remaining, sizes, k):
    plan = Plan(0, tuple(sizes))
    out = step_sizes(remaining, plan, k)
    assert sum(out) <= remaining
    full, floor_ = k * sum(sizes), len(sizes) * k
    if not full < remaining < 2 * floor_:
        assert all(o <= k * b for o, b in zip(out, sizes)), (out, sizes)
    if remaining >= len(sizes) * k:
        assert all(o >= k for o in out)
