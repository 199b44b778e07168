"""The AdaptDL baseline: the real ``adaptdl.goodput`` library choosing one local batch for every
rank (AdaptDL assumes identical replicas), from the profile of the configurations run."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("adaptdl.goodput", reason="the adaptdl baseline's optional dependency (scripts/setup_env.sh)")

from dynamix_hvd.controllers import make_controller  # noqa: E402
from dynamix_hvd.plan import Plan, PlanBounds  # noqa: E402
from dynamix_hvd.records import ClusterState, GlobalStats, WorkerStats  # noqa: E402

N, B0 = 4, 32


def _state(local: list[int], phi: float, per_sample=(0.001,) * N, fixed=0.02, sync=0.01) -> ClusterState:
    compute = [fixed + ps * b for ps, b in zip(per_sample, local)]
    step = max(compute) + sync
    workers = [WorkerStats(rank=r, batch_size=b, max_batch=512, steps=10, compute_s=c, step_s=step)
               for r, (b, c) in enumerate(zip(local, compute))]
    return ClusterState(plan=Plan(1, tuple(local)), workers=workers,
                        glob=GlobalStats(noise_scale=phi, noise_scale_rel_err=0.05, noise_scale_stable=True))


def _ctl():
    return make_controller("adaptdl", PlanBounds(max_batch=(512,) * N, min_global_batch=N * B0), B0)


def test_a_large_noise_scale_grows_the_batch_evenly_and_a_small_one_keeps_the_initial_batch():
    grow, keep = _ctl(), _ctl()
    for local in ([32] * N, [48] * N):          # two configurations: the fit sees the fixed cost
        big = grow.decide(_state(local, phi=20000.0))
        small = keep.decide(_state(local, phi=20.0))
    assert len(set(big)) == 1 and big[0] > 48, big         # one local batch for every rank
    assert small == [B0] * N, small                         # AdaptDL's floor: the initial batch
    assert "GoodputFunction.optimize" in grow.last_reason


def test_a_straggler_does_not_change_the_even_split():
    ctl = _ctl()
    slow = (0.001, 0.001, 0.001, 0.004)
    out = [ctl.decide(_state([b] * N, phi=5000.0, per_sample=slow)) for b in (32, 40, 48)][-1]
    assert len(set(out)) == 1, out


def test_without_a_noise_scale_or_a_profile_it_keeps_the_plan():
    ctl = _ctl()
    assert ctl.decide(_state([40, 40, 40, 8], phi=math.nan)) == [40.0, 40.0, 40.0, 8.0]   # uneven: not profiled
    assert ctl.decide(_state([40, 40, 40, 8], phi=1000.0)) == [40.0, 40.0, 40.0, 8.0]
    assert "keeps the plan" in ctl.last_reason
    assert ctl.decide(_state([32] * N, phi=math.nan)) == [32.0] * N


def test_state_round_trips_and_bad_refit_is_refused():
    ctl = _ctl()
    ctl.decide(_state([32] * N, phi=5000.0))
    again = _ctl()
    again.load_state_dict(ctl.state_dict())
    assert again.decide(_state([32] * N, phi=5000.0)) == ctl.decide(_state([32] * N, phi=5000.0))
    with pytest.raises(ValueError, match="refit_every"):
        make_controller("adaptdl", PlanBounds(max_batch=(512,) * N), B0, refit_every=0)
