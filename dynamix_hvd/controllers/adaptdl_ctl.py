"""AdaptDL / Pollux as it ships: the real ``adaptdl.goodput`` library deciding the batch.

The baseline "AdaptDL/Pollux" of the README, run with AdaptDL's own code rather than our reading
of it (``goodput.py`` is Pollux's rule with the heterogeneity-aware parts Cannikin adds). AdaptDL
(Qiao et al., OSDI 2021; ``pip install adaptdl``, Apache-2.0) assumes identical replicas: every
rank trains the same local batch, and the job's batch is chosen by ``GoodputFunction.optimize``
from

- a performance model fitted by ``adaptdl.goodput.fit_perf_params`` to a profile of the
  configurations the job ran, keyed like AdaptDL's ``(num_nodes, num_replicas, atomic_bsz)``:
  the mean compute time of a step at that local batch (AdaptDL's accumulation-step time; here the
  mean over ranks of ``compute_s``, as its replicas' profiles are averaged) and the synchronous
  step time (its optimizer-step time; here ``step_s``, which includes the wait for a straggler,
  as it does in AdaptDL's measurement);
- the gradient statistics ``(sqr, var)``: with the noise scale ``phi`` measured by the hook,
  ``(1, phi / B0)`` gives AdaptDL's efficiency ``(phi + B0) / (phi + B)``, the same as
  ``perfmodel.efficiency``.

Each rank is its own node (one GPU per node: ``num_nodes = num_replicas = N``). Without a noise
scale, or before a step time was measured, it keeps the current batch. Local batches stay within
every rank's cap (``max_batch_size = N x min(max_batch)``) and gradient accumulation is off (the
replay world runs none), so ``optimize(..., accumulation=True)`` never splits a batch: AdaptDL
0.2.11's ``accumulation=False`` branch calls ``np.int``, which numpy 1.24 removed.

Fitting is a scipy optimisation with autograd (0.05-1 s here); it runs when the profile gains a
configuration and otherwise every ``refit_every`` decisions (a fit at every decision would cost
more than the rest of it; AdaptDL's own refit cadence is not copied).
Needs the optional dependency ``adaptdl`` (installed by ``scripts/setup_env.sh``).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.plan import PlanBounds
from dynamix_hvd.records import ClusterState


def _goodput_module() -> Any:
    try:
        import adaptdl.goodput as goodput
    except ImportError as exc:   # a clear error naming what is missing
        raise ImportError("controller 'adaptdl' needs the adaptdl package (pip install --no-deps adaptdl==0.2.11 "
                          f"autograd; scripts/setup_env.sh installs both): {exc}") from exc
    return goodput


class AdaptDLController(Controller):
    name = "adaptdl"
    # not behind the goodput guard (it would fall back to proportional: no longer AdaptDL); the
    # safety layer's limits (decide.decide_plan) apply to it as to every controller
    guarded = False

    def __init__(self, bounds: PlanBounds, base_batch: int, refit_every: int = 10) -> None:
        super().__init__(bounds, base_batch)
        if refit_every < 1:
            raise ValueError(f"adaptdl: refit_every={refit_every}: must be >= 1")
        self.refit_every = int(refit_every)
        self._goodput = _goodput_module()
        # AdaptDL's profile: local batch -> [steps, sum compute_s x steps, sum step_s x steps]
        self._profile: dict[int, list[float]] = {}
        self._params: Any = None
        self._since_fit = 0

    def _record(self, state: ClusterState) -> bool:
        """Add the interval to the profile; True when it is a configuration not seen before."""
        local = state.plan.batch_sizes
        if len(set(local)) != 1:           # not one of AdaptDL's configurations (an even split)
            return False
        steps = min(w.steps for w in state.workers)
        compute = float(np.nanmean([w.compute_s for w in state.workers]))
        step = float(np.nanmax([w.step_s for w in state.workers]))
        if steps <= 0 or not (math.isfinite(compute) and math.isfinite(step)) or compute <= 0 or step <= 0:
            return False
        new = local[0] not in self._profile
        p = self._profile.setdefault(local[0], [0.0, 0.0, 0.0])
        p[0] += steps
        p[1] += compute * steps
        p[2] += max(step, compute) * steps
        return new

    def _fit(self, n: int) -> None:
        bsz = np.array(sorted(self._profile), dtype=float)
        counts = np.array([self._profile[int(b)][0] for b in bsz])
        compute = np.array([self._profile[int(b)][1] for b in bsz]) / counts
        step = np.array([self._profile[int(b)][2] for b in bsz]) / counts
        nodes = np.full(len(bsz), n)
        self._params = self._goodput.fit_perf_params(nodes, nodes, bsz, compute, step)
        self._since_fit = 0

    def decide(self, state: ClusterState) -> Sequence[float]:
        n = state.world_size
        current = [float(b) for b in state.plan.batch_sizes]
        new_config = self._record(state)
        self._since_fit += 1
        if self._profile and (self._params is None or new_config or self._since_fit >= self.refit_every):
            self._fit(n)
        phi = state.glob.noise_scale
        if self._params is None or not (math.isfinite(phi) and phi > 0):
            self.last_reason = "adaptdl: no noise scale or no measured step yet; keeps the plan"
            return current
        b0 = self.base_batch * n
        cap = n * min(self.bounds.max_batch)
        if self.bounds.max_global_batch is not None:
            cap = min(cap, self.bounds.max_global_batch)
        if cap <= b0:
            self.last_reason = f"adaptdl: the largest even global batch {cap} is not above the initial {b0}"
            return [float(self.base_batch)] * n
        fn = self._goodput.GoodputFunction(self._params, (1.0, phi / b0), b0)
        _, atomic, accum = fn.optimize(n, n, max_batch_size=cap, atomic_bsz_range=(1, cap // n), accumulation=True)
        local = float(atomic) * (int(accum) + 1)
        self.last_reason = f"adaptdl: GoodputFunction.optimize: local batch {local:.0f} on every rank (phi {phi:.0f})"
        return [local] * n

    def state_dict(self) -> dict[str, Any]:
        return {"profile": {str(k): v for k, v in self._profile.items()}, "since_fit": self._since_fit}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._profile = {int(k): [float(x) for x in v] for k, v in state.get("profile", {}).items()}
        self._since_fit = int(state.get("since_fit", 0))
        self._params = None      # refitted at the next decision
