"""Goodput controller (Pollux style).

Per rank it fits a throughput model ``t_i(b) = alpha_i + beta_i * b`` (least squares over the
recent (b_i, compute_s) observations; ``alpha_i = 0`` until two distinct sizes were seen), adds
the per-step communication left exposed after overlap (the larger of the allreduce p50 and the
measured step time minus the slowest rank's compute; once the last decisions ran global batches
that span 20%, the overlap is fitted over them, ``perfmodel.fit_overlap``), and multiplies
throughput by the statistical efficiency ``E(B) = (phi + B_ref) / (phi + B)`` from the gradient
noise scale ``phi = glob.noise_scale``. It picks the global batch B from a grid around B_ref
(= base_batch x N) that maximises predicted goodput ``B / T(B) * E(B)`` and splits it so every
rank's predicted compute time is equal. The grid (``candidate_scales``) is ``scales`` (0.5-4 x B_ref) continued in the
same 1.25x steps up to the plan bounds' largest global batch: the cap on growth is the bounds'
(the LR rule's ``max_batch_growth``, the user's ``max_global_batch``, memory), not the grid's, as
in Pollux, whose goodput search runs up to the job's batch-size limit. (Until session 24 the grid
stopped at 4 x B_ref whatever the bounds allowed: under ``lr_rule = "linear"`` (8x) or
``"adascale"`` (no cap), and in the replay world's ncf, whose step time barely grows with the
batch, goodput left most of its throughput unused.) Without a noise scale it keeps the current global batch. A switching threshold
(``switch_gain``) stops B from flapping between near-equal candidates.

The global batch moves only on a gain that holds across the noise scale's uncertainty: each
candidate's gain over the current B is evaluated at phi and at phi x (1 -/+ ``robust_k`` x rel_err)
(the estimator's relative standard error), and the smallest of the three must exceed
``switch_gain``. E(B) is steep in phi where phi is near B, so a +3% prediction at the point
estimate is often a loss one standard error away. Live (transient_slowdown_link, session 11),
the model lowered B from 128 to 81 and to 104 on "+3%" with the noise scale at 20% relative
error, and PPO (anchored on this model) reached 95% of the plateau 1.11x later than proportional,
which held B.

The overlap fit (session 31): one interval shows the exposed allreduce at one batch only, and a
longer backward hides more of it (the Pollux traces: cifar10's step is flat from B = 256 to ~800
at 8 replicas while its exposed sync shrinks). Read off one interval the overlap was ~0.1 and a
larger batch was priced 1.3-1.6x its true step time; fitted over the history's global batches
(as Pollux fits its sync term to every configuration it has run) goodput reaches the target
in 0.93x the time on cifar10 in the replay world (24 cells x 10 held-out seeds), bert, deepspeech2
and ncf 1.005-1.010x: with a truer step time its noise-scale model grows bert's batch past what
the measured curves reward (README, issue 19). Live, without an LR rule that lets the global
batch move, the fit never engages.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.controllers.evidence import (MIN_COMPUTE_S, MIN_EXCESS, Z_MIN, LastingGain, SplitEvidence,  # noqa: F401
                                              rel_uncertainty, resplit_gain, split_evidence)
from dynamix_hvd.controllers.model import ComputeModel
from dynamix_hvd.controllers.split import equal_time_splits, round_by_time
from dynamix_hvd.perfmodel import efficiency_array, fit_overlap, step_time
from dynamix_hvd.plan import PlanBounds, split_global
from dynamix_hvd.records import ClusterState
from dynamix_hvd.stats import GROWTH_MARGIN

SCALES = (0.5, 0.63, 0.8, 1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0)
BEYOND_STEP = 1.25      # the grid continues above max(scales) in these steps, up to the bounds


def candidate_scales(scales: Sequence[float], max_scale: float, step: float = BEYOND_STEP) -> list[float]:
    """``scales`` below ``max_scale``, continued from the largest of them in ``step`` ratios, and
    ``max_scale`` itself: the global batches goodput weighs, in units of B_ref."""
    out = [s for s in scales if s < max_scale]
    top = max(scales)
    while top * step < max_scale * (1 - 1e-9):
        top *= step
        out.append(top)
    return out + [max_scale]


def _finite_median(xs: Sequence[float]) -> float:
    """Median of the finite values; NaN ("no data", e.g. no collective timing) when there are none."""
    v = [float(x) for x in xs if math.isfinite(x)]
    return statistics.median(v) if v else math.nan


class GoodputController(Controller):
    name = "goodput"
    guarded = True

    def __init__(self, bounds: PlanBounds, base_batch: int, history: int = 16, switch_gain: float = 0.03,
                 scales: Sequence[float] = SCALES, min_compute_s: float = MIN_COMPUTE_S, z_min: float = Z_MIN,
                 robust_k: float = 1.0) -> None:
        super().__init__(bounds, base_batch)
        if not (math.isfinite(robust_k) and robust_k >= 0):
            raise ValueError(f"robust_k={robust_k}: must be a number >= 0")
        self.switch_gain = float(switch_gain)
        self.robust_k = float(robust_k)
        self.min_compute_s, self.z_min = float(min_compute_s), float(z_min)
        self.scales = tuple(float(s) for s in scales)
        self.model = ComputeModel(history=history)
        # (slowest compute, exposed communication, global batch) of the last decisions: the overlap fit
        self.sync_history: deque[tuple[float, float, float]] = deque(maxlen=history)
        self.lasting = LastingGain()
        self.last_fit: dict[str, Any] = {}
        self.last_evidence: SplitEvidence | None = None
        self._last_model: tuple | None = None     # the last choose()'s fit, for predicted_ratio
        self._last_inputs: tuple | None = None    # the last choose()'s candidates and fit, for unheld_choice

    def predict(self, alpha: np.ndarray, beta: np.ndarray, totals: Sequence[float], comm: float, overlap: float,
                phi: float, b_ref: float, shares: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Predicted goodput of each candidate global batch and its equal-time split (or, with
        ``shares``, the split in those fixed proportions): (goodput (M,), splits (M, N)), all
        candidates in one pass of array operations."""
        lo = max(self.bounds.min_batch, 1)
        hi = np.asarray(self.bounds.max_batch, dtype=float)
        if shares is None:
            b = equal_time_splits(alpha, beta, totals, lo, hi)
        else:
            b = np.clip(np.asarray(totals, dtype=float)[:, None] * shares[None, :], lo, hi)
        tc = np.max(alpha + beta * b, axis=1)
        step = step_time(tc, comm, overlap)
        B = b.sum(axis=1)
        eff = efficiency_array(B, b_ref, phi)
        return B / step * eff, b

    def decide(self, state: ClusterState) -> Sequence[float]:
        return list(self.choose(state)[0])

    def choose(self, state: ClusterState, incumbent: float | None = None) -> tuple[np.ndarray, float]:
        """Feed the state to the model; return (split, global batch) of the plan to run next.

        The global batch switches away from ``incumbent`` (default: the current plan's global
        batch) only for a predicted gain above ``switch_gain``."""
        current = np.asarray(state.plan.batch_sizes, dtype=float)
        n = state.world_size
        self.model.add_state(state)
        self._last_model = self._last_inputs = None
        alpha, beta = self.model.fit()
        if not np.isfinite(beta).all():
            self.last_reason = "keep plan: no compute timings yet"
            return current, float(current.sum())
        ev = split_evidence(alpha + beta * current, rel_uncertainty(self.model, state), self.min_compute_s, self.z_min,
                            min_excess=self.lasting.floor)    # 4-10%: taken once it lasts (LastingGain)
        # without evidence against the current split, every candidate keeps its proportions
        self.last_evidence = ev
        shares = None if ev.act else current / current.sum()
        compute = np.array([w.compute_s for w in state.workers])
        step = _finite_median([w.step_s for w in state.workers])
        comm = _finite_median([w.allreduce_p50_s for w in state.workers])
        max_c = np.nanmax(compute) if np.isfinite(compute).any() else math.nan
        exposed = step - max_c if math.isfinite(step) and math.isfinite(max_c) else math.nan
        # The per-step cost that does not scale with the batch is at least what the slowest rank
        # spends outside compute: Horovod issues several allreduces per step plus its negotiation,
        # so one call's p50 undercounts it (live, link_degrade: 5-14 ms modelled, ~50 ms exposed),
        # which made small global batches look cheap. Pollux fits its sync term to measured
        # iteration times for the same reason. Neither measured: no per-step overhead.
        comm = max([0.0] + [x for x in (comm, exposed) if math.isfinite(x)])
        if not math.isfinite(exposed):
            exposed = comm
        else:
            self.sync_history.append((float(max_c), float(max(exposed, 0.0)), float(current.sum())))
        overlap = float(np.clip((comm - exposed) / max_c, 0.0, 1.0)) if max_c and math.isfinite(max_c) and max_c > 0 else 0.0
        fitted = fit_overlap(*zip(*self.sync_history)) if len(self.sync_history) >= 2 else None
        if fitted is not None:
            # the history ran several global batches: how much of the allreduce a longer backward
            # hides is measured (fit_overlap), not read off one interval; the level stays the last
            # interval's (a link change moves it at once)
            overlap = fitted
            comm = max(exposed, 0.0) + fitted * max_c
        phi = float(state.glob.noise_scale)
        b_ref = float(self.base_batch * n)
        lo = max(self.bounds.min_global_batch, self.bounds.min_batch * n, 1)
        hi = float(sum(self.bounds.max_batch))
        if self.bounds.max_global_batch is not None:
            hi = min(hi, self.bounds.max_global_batch)
        B_now = float(np.clip(incumbent, lo, hi)) if incumbent is not None else float(current.sum())
        grid = sorted({float(np.clip(s * b_ref, lo, hi)) for s in candidate_scales(self.scales, hi / b_ref)})
        fit = (alpha, beta, comm, overlap, phi, b_ref, shares)
        self._last_inputs = (fit, grid, B_now, float(state.glob.noise_scale_rel_err))
        # the global batch moves only on a stable noise-scale estimate (stats.NoiseScaleEstimator)
        stable = bool(state.glob.noise_scale_stable) and math.isfinite(phi) and phi > 0
        # not stable, but even its pessimistic value is >= GROWTH_MARGIN x these batches (stats.growth_room)
        room = 0.0 if stable else float(state.glob.noise_scale_room)   # 0 without a positive estimate
        if stable:
            cands = sorted(set(grid) | {B_now})
        else:
            cands = [B_now] + [c for c in grid if B_now < c <= room]
        gns_ok = stable or len(cands) > 1
        if stable:
            self._last_model = fit
        goodput, splits, gain, i_now = self._candidate_gains(fit, cands, B_now, float(state.glob.noise_scale_rel_err),
                                                             robust=gns_ok and len(cands) > 1)   # B_now included
        i_best = int(np.argmax(gain))
        g_now, b_now = float(goodput[i_now]), splits[i_now]
        g_best, b_best = float(g_now * gain[i_best]), splits[i_best]
        B_best = cands[i_best]
        self.last_fit = {"alpha": alpha.tolist(), "beta": beta.tolist(), "comm": comm, "overlap": overlap,
                         "B": B_best, "goodput": g_best}
        rel = state.glob.noise_scale_rel_err
        gns = (f"noise scale {phi:.0f} (rel. err {rel:.2f})" if stable else
               f"noise scale {phi:.0f} not stable (rel. err {rel:.2f}) but >= {GROWTH_MARGIN:g}x any batch up to {room:.0f}"
               if gns_ok else f"global batch held: noise scale not stable (rel. err {rel:.2f})")
        if g_best < (1.0 + self.switch_gain) * g_now:
            b_int = self._integer(alpha, beta, b_now)
            if ev.act and B_now == float(current.sum()):
                gain_split = resplit_gain(alpha, beta, current, b_int)
                if not self.lasting.admit(gain_split):
                    self.last_reason = (f"keep split: {ev.reason}, but {self.lasting.describe(gain_split)}; "
                                        f"{gns}; B {B_now:.0f} kept")
                    return current, float(current.sum())
            else:
                self.lasting.reset()
            self.last_reason = f"{ev.reason}; {gns}; B {B_now:.0f} kept"
            return b_int, float(b_now.sum())
        self.lasting.reset()
        self.last_reason = (f"{ev.reason}; {gns}; B {B_now:.0f} -> {B_best:.0f}, predicted goodput "
                            f"{g_best / g_now - 1:+.0%} (the least within the noise scale's error)")
        return self._integer(alpha, beta, b_best), float(b_best.sum())

    def unheld_choice(self) -> float | None:
        """The global batch the last ``choose`` would have picked had its noise-scale estimate counted as
        stable (every candidate, the same fit, robust gain and switching threshold): what the *pass* action
        of a policy trained to pass the hold proposes (``ActionConfig.pass_global``). None before a fit or
        without a positive estimate. Reads only what ``choose`` kept; feeds nothing."""
        if self._last_inputs is None:
            return None
        fit, grid, B_now, rel_err = self._last_inputs
        phi = fit[4]
        if not (math.isfinite(phi) and phi > 0):
            return None
        _, splits, gain, i_now = self._candidate_gains(fit, sorted(set(grid) | {B_now}), B_now, rel_err, robust=True)
        i_best = int(np.argmax(gain))
        i = i_now if gain[i_best] < 1.0 + self.switch_gain else i_best
        return float(splits[i].sum())

    def predicted_ratio(self, B: float, B_ref: float) -> float:
        """The model's predicted goodput at global batch ``B`` over its prediction at ``B_ref``,
        from the last ``choose``'s fit; NaN when that fit had no stable noise-scale estimate (the
        model has no opinion on other global batches then)."""
        if self._last_model is None or not (B > 0 and B_ref > 0):
            return math.nan
        alpha, beta, comm, overlap, phi, b_ref, shares = self._last_model
        g = self.predict(alpha, beta, [float(B), float(B_ref)], comm, overlap, phi, b_ref, shares)[0]
        return float(g[0] / g[1]) if g[1] > 0 else math.nan

    def _candidate_gains(self, fit: tuple, cands: Sequence[float], B_now: float, rel_err: float,
                         robust: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Predicted goodput and split of each candidate (``fit``: alpha, beta, comm, overlap, phi, b_ref,
        shares), and each one's gain over ``B_now`` (a candidate): robust to the noise scale's error
        (``_robust_gain``) when ``robust``, else the plain ratio. Returns (goodput, splits, gain, index of B_now)."""
        goodput, splits = self.predict(*fit[:2], cands, *fit[2:])
        i_now = cands.index(B_now)
        gain = self._robust_gain(goodput, i_now, *fit[:2], cands, *fit[2:], rel_err) if robust \
            else goodput / goodput[i_now]
        return goodput, splits, gain, i_now

    def _robust_gain(self, goodput: np.ndarray, i_now: int, alpha: np.ndarray, beta: np.ndarray,
                     cands: Sequence[float], comm: float, overlap: float, phi: float, b_ref: float,
                     shares: np.ndarray | None, rel_err: float) -> np.ndarray:
        """Each candidate's goodput relative to the current B's, the smallest over phi and
        phi x (1 -/+ robust_k x rel_err): what the move gains if the noise scale is one
        ``robust_k`` standard errors off either way (an unknown error counts as 0)."""
        gain = goodput / goodput[i_now]
        d = self.robust_k * rel_err if math.isfinite(rel_err) and rel_err > 0 else 0.0
        for f in (1.0 - d, 1.0 + d):
            if d > 0 and phi * f > 0:
                g = self.predict(alpha, beta, cands, comm, overlap, phi * f, b_ref, shares)[0]
                gain = np.minimum(gain, g / g[i_now])
        return gain

    def _integer(self, alpha: np.ndarray, beta: np.ndarray, split: np.ndarray) -> np.ndarray:
        """Integer sizes summing exactly to the split's rounded total (rounding each rank alone
        drifted the global batch by a sample or two), rounded by predicted time (split.round_by_time)."""
        if not (np.isfinite(alpha).all() and np.isfinite(beta).all()):
            return np.asarray(split_global(int(round(float(split.sum()))), list(split), self.bounds), dtype=float)
        return round_by_time(split, alpha, beta, int(round(float(split.sum()))), self.bounds)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "lasting": self.lasting.streak,
                "sync_history": [list(p) for p in self.sync_history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state.get("model", {}))
        self.lasting.streak = int(state.get("lasting", 0))
        points = state.get("sync_history", [])
        if not isinstance(points, list) or not all(isinstance(p, (list, tuple)) and len(p) == 3 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in p) for p in points):
            raise ValueError("goodput state 'sync_history': expected a list of [slowest compute s, exposed s, "
                             f"global batch] triples of finite numbers, got {str(points)[:120]}")
        self.sync_history.clear()
        self.sync_history.extend(tuple(float(x) for x in p) for p in points)
