"""The replay simulator: a data-parallel job whose physics and statistics are measurements.

One ``step(sizes)`` = one decision interval of ``interval_steps`` optimizer steps (fewer when the
target is reached inside it) at per-rank local batches ``sizes``. Unless given, the interval is the
live hook's own cadence (``DynamixConfig.next_interval`` with its defaults: 10 steps, or enough
steps for 0.5 s) at the start plan's step time in the seed's world: a controller decides as often
as it would live. (Until session 26 the interval was chosen for about 300 decisions per static run:
on ncf, whose steps take 28 ms, that was a decision every 246 steps, 7 s, against the hook's 18
steps, and the ramp of every controller that grows the global batch took 25x longer than live.)

* progress: ``ProgressModel`` (measured validation curves, ``replay/progress.py``);
* step time: ``max_i tau_i(b_i)`` per step (``replay/throughput.py``), rank i's speed multiplier =
  hardware factor x fluctuation of that step (``replay/speeds.py``);
* what the controllers see (``cluster_state``: the live hook's ``ClusterState``): per-rank mean
  compute, step, wait + allreduce and allreduce times with lognormal measurement noise (sigma =
  the spread of repeated measurements at the same local batch in the throughput tables; also
  reported as ``compute_se_s``), the noise scale of the live hook's ``NoiseScaleEstimator`` fed one
  estimate per interval: the true ``unit_batch x grad_var / grad_sqr`` at the current progress
  and batch times ``exp(sigma_gns z)`` (estimator noise from the traces' within-run scatter; the
  estimator's EMA, relative error and ``stable`` flag are the live ones),
  and a loss proxy (the traces hold no training loss: the gap of the current metric to the best
  measured one, normalised, with its relative change per interval as loss and val-loss trend).
  Never the true curves, speeds or the time to target. NIC, CPU, GPU and memory metrics are not
  in the traces and are NaN ("no data");
* memory: every rank's cap is the largest measured local batch (``bounds().max_batch``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.plan import Plan, PlanBounds
from dynamix_hvd.records import NAN, ClusterState, GlobalStats, WorkerStats
from dynamix_hvd.replay.progress import ProgressModel
from dynamix_hvd.replay.speeds import Fluctuation, SpeedTrace, cycle_speeds, draw_hardware
from dynamix_hvd.replay.throughput import NO_LINK, Link, ThroughputModel
from dynamix_hvd.state import RAW_WORKER_FIELDS
from dynamix_hvd.stats import NoiseScaleEstimator

DEFAULT_BUDGET_STEPS = 3000  # budget reference when the start batch never reaches the target
_HOOK = DynamixConfig()      # the live hook's defaults (frozen): its decision cadence


def hook_interval(step_s: float) -> int:
    """Steps per decision the live hook takes with its defaults at steps of ``step_s`` seconds."""
    return _HOOK.next_interval(step_s)


def default_base_batch(progress: ProgressModel, tp: ThroughputModel, n: int) -> int:
    """Per-rank batch of the static plan: the smallest measured local batch, raised so that the
    global batch is at least the smallest measured global batch, within the memory cap and (where
    possible) not above the largest measured global batch."""
    b = max(int(tp.grid[1]) if tp.grid.size > 1 else 1, math.ceil(progress.batches[0] / n))
    b = min(b, tp.cap, max(1, int(progress.batches[-1] // n)))
    return max(1, b)


@dataclass
class Interval:
    """Result of running one interval (pure: nothing committed)."""

    steps: int
    elapsed: float
    new_progress: float
    reached: bool
    tau: np.ndarray        # (C, N) per-chunk rank times
    lengths: np.ndarray    # (C,)
    step_mean: float
    link: Link = NO_LINK    # the links over the interval (step-weighted mean; a scenario's links)
    sync: np.ndarray | None = None   # (N,) step-weighted exposed sync ("collective" sync model; else from b)


LOSS_NOISE = 0.005                    # the loss trend's observation noise in every evaluation world
GNS_MODELS = ("run", "continuous")     # ReplaySim(gns_model=...): how the measured noise scale moves


class ReplaySim:
    def __init__(self, progress: ProgressModel, tp: ThroughputModel, trace: SpeedTrace, n: int,
                 speeds: Sequence[float] | None = None, interval_steps: int | None = None,
                 base_batch: int | None = None, budget_factor: float = 20.0, deadband: float = 0.05,
                 dynamics: Any = None, caps: Sequence[int] | None = None, gns_model: str = "run",
                 loss_noise: float = LOSS_NOISE, sync_model: str | None = None) -> None:
        # sync_model (throughput.SYNC_MODELS): whose compute hides the allreduce; None keeps tp's
        if sync_model is not None and sync_model != tp.sync_model:
            tp = replace(tp, sync_model=sync_model)
        self.pm, self.tp, self.trace, self.n = progress, tp, trace, int(n)
        self.max_global_batch: int | None = None   # the live hook's cap (set for a scenario), None: the traces' range
        self.dyn = dynamics      # replay.scenario.ScenarioDynamics: hardware, links, events in time
        self.caps = tuple(int(c) for c in caps) if caps is not None else (tp.cap,) * self.n
        self.link = NO_LINK      # a scenario's links now (replay/scenario.py)
        self.scenario_info: dict[str, Any] | None = None   # set by runner.make_scenario_world
        self.fixed_speeds = None if speeds is None else cycle_speeds(speeds, self.n)
        self.base_batch = int(base_batch) if base_batch else default_base_batch(progress, tp, self.n)
        if not 1 <= self.base_batch <= tp.cap:
            raise ValueError(f"base_batch={self.base_batch}: must be in 1..{tp.cap} (the memory cap)")
        self.B0 = self.base_batch * self.n
        self._cum: dict[int, np.ndarray] = {}
        self._cum_list: dict[int, list[float]] = {}
        K = progress.n_levels
        s0 = float(self.cum(self.B0)[K])
        self.static_steps = math.ceil(s0 / self.B0) if math.isfinite(s0) else DEFAULT_BUDGET_STEPS
        self._interval_given = int(interval_steps) if interval_steps else None
        b0 = np.full(self.n, self.base_batch)
        self.interval_steps = self._interval_given or hook_interval(float(tp.rank_times(np.ones(self.n), b0).max()))
        self.budget_factor, self.deadband = float(budget_factor), float(deadband)
        # the noise scale the job's estimator measures (``observe``): "run" reads the run measured at
        # the batch running, at the job's progress (as the Pollux artifact's simulator reads its
        # gradient statistics), so it jumps when the batch changes by the difference between two
        # separate runs (ncf: up to 5x at one level); "continuous" starts from that and then moves
        # along the running batch's run, so a batch change changes its trend, not its level
        if gns_model not in GNS_MODELS:
            raise ValueError(f"gns_model={gns_model!r}: expected one of {GNS_MODELS}")
        self.gns_model = gns_model
        # the loss trend's observation noise (absolute, per interval); a training option draws it per
        # world (``worlds.WorldDraw(loss_noise=...)``): live trends are steeper and noisier (session 45)
        if not (math.isfinite(loss_noise) and loss_noise >= 0):
            raise ValueError(f"loss_noise={loss_noise!r}: must be a number >= 0")
        self.loss_noise = float(loss_noise)
        self.K = K
        self._raw_template = np.full((self.n, len(RAW_WORKER_FIELDS)), NAN)
        self._raw_template[:, 1] = self.caps

    # ------------------------------------------------------------------ setup
    def cum(self, B: int) -> np.ndarray:
        c = self._cum.get(B)
        if c is None:
            c = self._cum[B] = self.pm.cum_for(float(B))[0]
            self._cum_list[B] = [float(x) for x in c]
        return c

    def _position(self, P: float, cum: np.ndarray) -> float:
        k = min(int(P), self.K - 1)
        f = P - k
        c0, c1 = float(cum[k]), float(cum[k + 1])
        return c0 + f * (c1 - c0) if f > 0 else c0

    def bounds(self) -> PlanBounds:
        n = self.n
        hi = max(self.B0, min(sum(self.caps), int(self.pm.batches[-1])))
        if self.max_global_batch is not None:
            hi = max(self.B0, min(hi, int(self.max_global_batch)))
        return PlanBounds(max_batch=self.caps, min_batch=1, quantum=1, max_global_batch=hi,
                          min_global_batch=max(n, self.B0), deadband=self.deadband)

    def reset(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        if self.dyn is not None:
            st = self.dyn.state_at(0.0)
            self.hw, self.link = st.hw.copy(), st.link
        else:
            self.hw = self.fixed_speeds.copy() if self.fixed_speeds is not None else draw_hardware(self.n, rng)
        self.fluct = Fluctuation(self.trace, self.n, rng)
        self.noise = np.random.default_rng([seed, 7])
        self.P, self.t, self.time, self.decisions = 0.0, 0, 0.0, 0
        self.reached = False
        b0 = np.full(self.n, self.base_batch)
        step0 = float(self.tp.rank_times(self.hw, b0, self.link).max())
        self.interval_steps = self._interval_given or hook_interval(step0)   # the hook's cadence in this world
        self.budget_s = self.budget_factor * self.static_steps * step0
        self._gap = self._gap_at(0.0)
        self._phi_obs = math.nan
        self._log_phi = math.nan       # the job's true log noise scale ("continuous")
        self._P_start = 0.0            # progress at the start of the last committed interval
        self.gns = NoiseScaleEstimator()

    @property
    def done(self) -> bool:
        return self.reached or self.time >= self.budget_s

    # ------------------------------------------------------------------ physics
    def run_interval(self, sizes: Sequence[int] | np.ndarray, P: float | None = None, t: int | None = None,
                     time: float | None = None) -> Interval:
        """Run one interval from progress P at step t and simulated time ``time`` (default: the
        current ones), without committing."""
        b = np.asarray(sizes, dtype=np.int64)
        if b.shape != (self.n,) or not 1 <= b.min() <= b.max() <= self.tp.cap:
            raise ValueError(f"sizes {b.tolist()}: need {self.n} local batches in 1..{self.tp.cap}")
        P = self.P if P is None else P
        t = self.t if t is None else t
        B = int(b.sum())
        cum = self.cum(B)
        s_now = self._position(P, cum)
        need = (cum[-1] - s_now) / B
        steps_needed = math.ceil(need - 1e-9) if math.isfinite(need) else math.inf
        steps = int(min(self.interval_steps, max(1, steps_needed)))
        reached = steps_needed <= self.interval_steps
        lengths, F = self.fluct.chunks(t, steps)
        link = NO_LINK
        sync = None
        if self.dyn is None:
            H = F * self.hw
            tau = self.tp.rank_times(H, b)
        else:
            lengths, tau, link, H = self._timeline(b, self.time if time is None else time, lengths, F)
        if self.tp.sync_model == "collective":       # what each rank measures: the pacing compute's exposure
            sync = (lengths @ (tau - self.tp.compute_times(H, b))) / steps
        elapsed = float(lengths @ tau.max(axis=1))
        newP = float(self.K) if reached else ProgressModel.advance1(P, self._cum_list[B], steps * B)
        return Interval(steps, elapsed, newP, reached, tau, lengths, elapsed / steps, link, sync)

    def _timeline(self, b: np.ndarray, time0: float, lengths: np.ndarray, F: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, Link, np.ndarray]:
        """Chunks split where a scenario event's time falls (the step it falls in runs at the old
        state): (lengths, (C, N) rank times, the step-weighted mean link, (C, N) compute multipliers)."""
        dyn, T = self.dyn, time0
        ls, taus, links, hs = [], [], [], []
        for ell, f in zip(lengths.astype(int), F):
            while ell > 0:
                st = dyn.state_at(T)
                tau = self.tp.rank_times(f * st.hw, b, st.link)
                hs.append(f * st.hw)
                d = float(tau.max())
                nxt = dyn.next_change(T)
                k = ell if T + ell * d < nxt else min(ell, max(1, math.ceil((nxt - T) / d - 1e-12)))
                ls.append(float(k))
                taus.append(tau)
                links.append(st.link)
                T += k * d
                ell -= k
        L = np.asarray(ls)
        return L, np.asarray(taus), Link.mean(links, L), np.asarray(hs)

    def step(self, sizes: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """Run and commit one interval; returns the raw per-rank measurements and the job stats."""
        b = np.asarray(sizes, dtype=np.int64)
        iv = self.run_interval(b)
        self.commit(iv)
        return self.observe(b, iv)

    def commit(self, iv: Interval) -> None:
        """Make an interval returned by ``run_interval`` (from the current state) happen."""
        self._P_start = self.P
        self.P, self.t, self.time = iv.new_progress, self.t + iv.steps, self.time + iv.elapsed
        self.reached = iv.reached
        self.decisions += 1
        if self.dyn is not None:       # what the oracle's estimates start from
            st = self.dyn.state_at(self.time)
            self.hw, self.link = st.hw.copy(), st.link

    def observe(self, b: np.ndarray, iv: Interval) -> dict[str, Any]:
        n = self.n
        z = self.noise.standard_normal(3 * n + 4)
        sig = self.tp.timing_sigma
        sync = iv.link.apply(self.tp.sync_at(b)) if iv.sync is None else iv.sync
        mult = np.exp(sig * z[:3 * n])
        compute = (iv.lengths @ iv.tau) / iv.steps - sync
        raw = self._raw_template.copy()
        raw[:, 0] = b
        raw[:, 2] = np.maximum(compute, 1e-9) * mult[:n]
        raw[:, 3] = iv.step_mean * mult[n:2 * n]
        raw[:, 4] = np.maximum(raw[:, 3] - raw[:, 2], 0.0)
        raw[:, 5] = sync * mult[2 * n:]
        B = float(b.sum())
        # one noisy per-interval estimate (S relative to |G|^2 = 1) into the live hook's estimator
        self.gns.update(self.true_noise_scale(B) * math.exp(self.pm.gns_sigma * z[-1]), 1.0)
        phi = self.gns.noise_scale
        gap = self._gap_at(self.P)
        trend = gap / self._gap - 1.0 if self._gap > 0 else 0.0
        gv = phi / self._phi_obs - 1.0 if math.isfinite(self._phi_obs) else 0.0
        self._gap, self._phi_obs = gap, phi
        return {"raw": raw, "noise_scale": phi, "noise_scale_rel_err": self.gns.rel_err,
                "noise_scale_stable": self.gns.stable, "noise_scale_room": self.gns.growth_room, "loss": gap, "loss_trend": trend + self.loss_noise * z[-2],
                "val_loss_trend": trend + self.loss_noise * z[-3], "grad_var_trend": gv, "progress": self.P / self.K,
                "samples_per_s": B * iv.steps / iv.elapsed, "steps": iv.steps, "elapsed": iv.elapsed,
                "global_batch": B}

    def true_noise_scale(self, B: float) -> float:
        """The job's true noise scale after the interval just committed at global batch ``B``
        (``gns_model``); called once per interval, by ``observe``."""
        now = self.pm.noise_scale(self.P, B)
        if self.gns_model == "run":
            return now
        if not math.isfinite(self._log_phi):
            self._log_phi = math.log(now)
        else:
            self._log_phi += math.log(now) - math.log(self.pm.noise_scale(self._P_start, B))
        return math.exp(self._log_phi)

    def _gap_at(self, P: float) -> float:
        pm = self.pm
        span = abs(pm.best - pm.start)
        return abs(pm.best - pm.metric_at(P)) / span if span > 0 else 0.0

    # ------------------------------------------------------------------ records
    def cluster_state(self, plan: Plan, out: Mapping[str, Any], last_action: np.ndarray | None = None) -> ClusterState:
        raw = out["raw"]
        sig = self.tp.timing_sigma
        workers = []
        for r in range(raw.shape[0]):
            row = raw[r]
            workers.append(WorkerStats(rank=r, batch_size=int(row[0]), max_batch=int(row[1]), steps=int(out["steps"]),
                                       compute_s=float(row[2]), step_s=float(row[3]), comm_s=float(row[4]),
                                       allreduce_p50_s=float(row[5]), loss=float(out["loss"]),
                                       compute_se_s=sig * float(row[2])))
        # progress and the validation-loss trend as the live hook gives them: it knows neither the
        # training budget nor a validation loss (``decide.Decider.global_stats``: progress 0, NaN).
        # Until session 27 the replay showed the policy P / K and a validation trend here, which it
        # never sees live (the progress column of every live observation is 0)
        glob = GlobalStats(step=self.t, progress=0.0, noise_scale=out["noise_scale"],
                           noise_scale_rel_err=out["noise_scale_rel_err"], noise_scale_stable=out["noise_scale_stable"],
                           noise_scale_room=out.get("noise_scale_room", 0.0),
                           loss=out["loss"],
                           loss_trend=out["loss_trend"], grad_var_trend=out["grad_var_trend"], val_loss=NAN,
                           val_loss_trend=NAN, samples_per_s=out["samples_per_s"])
        return ClusterState(plan=plan, workers=workers, glob=glob, last_action=last_action)
