"""Where goodput's gap to the causal oracle comes from, in the replay world (issue 19).

Runs the goodput controller in the same worlds (``dynamix eval-replay``'s: unperturbed shipped
workloads, seeds 0..K-1 + offset) with one of its inputs or rules replaced by the truth, and prints
the median time to target per workload relative to plain goodput:

* ``goodput``: as shipped;
* ``nohold``: the noise-scale estimate counts as stable from the first decision (the global batch
  may move at once; ``MoveLimits.hold_global_without_gns`` and goodput's own hold are both off);
* ``lognoholdK`` (e.g. ``lognohold2``): as ``nohold``, with goodput's robust gain taken at phi x exp(-/+ K x
  rel_err) instead of phi x (1 -/+ rel_err), whose pessimistic side vanishes at rel_err >= 1 (session 51, 10 seeds:
  ncf 0.855x / 0.865x goodput against nohold's 0.853x; on the six pairings where lifting the hold has a sign the
  same signs, ncf's curves on cifar10's steps 1.013x / 1.011x against 1.008x: the estimate's spread is not what
  makes passing the hold cost there);
* ``marginM`` / ``marginMzZ`` (e.g. ``margin3``, ``margin1z0``): the hold's room (``stats.growth_room``) at the
  pessimistic noise scale phi x exp(-Z x rel_err) divided by M instead of ``stats.GROWTH_MARGIN`` (Z: ``GROWTH_Z``).
  Session 51, 10 seeds, against the margin of 10 it had then: margin 3 0.978x over the 24 shipped cells (ncf 0.916x,
  bert 0.997x, cifar10 / deepspeech2 1.000x), 0.985x over 36 pairing cells with an ncf half (largest 1.025x), 1.000x on
  YOLOv3; margin 1 0.975x / 0.984x (largest 1.026x); Z changes nothing. ``GROWTH_MARGIN`` is 3 since;
* ``truephi``: as ``nohold``, and the noise scale it reads is the true one of the coming
  interval's progress level (no estimator noise, no lag; relative error 0);
* ``scaleS`` (e.g. ``scale2``): PPO's decision path with one constant action, the global scale S x
  goodput's choice at every decision (the best such constant, per workload, is what a policy
  that learned only "larger than goodput" could get);
* ``probeM`` (e.g. ``probe20``): PPO's decision path (goodput anchor, gates, move limits) with
  the no-op at every decision but one in M, where it asks for 1.6 x goodput's global batch: a
  fixed exploration schedule (what a larger batch costs is measured, not extrapolated);
  ``probeMgG`` (e.g. ``probe10g0.9``): the same, probing only where the efficiency model says the
  probe keeps >= G of the per-sample progress, E(1.6 B) / E(B) >= G;
* ``phiC`` (e.g. ``phi2``): goodput with its efficiency model fed the noise scale x C;
* ``trueE`` / ``trueEnohold``: goodput with its efficiency model replaced by the true one of the
  current metric level (the measured curves' samples per level at the reference batch over those at
  B), with the shipped hold / as ``nohold``: the most any calibration of E(B) from measurements
  could give goodput's decision rule;
* ``trueT``: goodput's efficiency model, but every candidate's step time and split the true ones
  at the speeds of the interval that has just ended;
* ``memT``: goodput's own splits, each rank's compute read off the curve of every (local batch, compute
  time) the job measured (median per size, linear between sizes, the last slope beyond, scaled to
  the latest interval's level) instead of the affine fit: a model learned from the job's own
  history, no exploration (session 33, 4 seeds, trace none: bert 0.996x, cifar10 1.093x,
  deepspeech2 0.971x, ncf 1.001x goodput: the extrapolation beyond the sizes run decides it);
  ``memA``: the same, but beyond the sizes run the affine fit's shape carried from the nearest size run
  (session 34, 10 seeds x 24 cells: bert 0.990x, cifar10 1.007x, deepspeech2 0.983x, ncf 0.992x);
* ``optF`` (e.g. ``opt0.5``): a rank whose history does not identify a fixed cost takes share F of its
  time as fixed (Pollux's optimistic prior for one local batch size is F = 0.5) instead of none
  (session 34, 10 seeds x 24 cells: opt0.5 bert 0.972x, cifar10 0.992x, deepspeech2 1.005x, ncf 1.000x,
  cells 0.937-1.079x; opt0.25 0.986 / 0.992 / 0.999 / 0.997x);
* ``histH`` (e.g. ``hist64``): goodput's compute and overlap histories H intervals long instead of 16
  (session 34, 10 seeds x 24 cells: hist64 0.991 / 1.004 / 1.018 / 1.000x, hist6 0.995 / 1.032 / 0.995 / 0.995x);
* ``trueTB``: goodput's own splits (its model, its evidence gate), each timed by the truth at the
  speeds of the interval that has just ended: what the throughput model costs the choice of the
  global batch alone (``trueT`` also takes the true equal-time split);
* ``trueET``: as ``trueE``, and every candidate's step time and split are the true ones at the
  speeds of the interval that has just ended (the causal oracle's): goodput's gates, grid and the
  safety layer are what is left between it and ``causal_safe``;
* ``causal_safe`` / ``causal_safe_nohold``: the causal oracle behind the safety layer's global rules
  (``oracle.run_causal_safe``), with / without the hold on an unstable noise-scale estimate: the
  room of a controller that passes the hold (``ActionConfig.pass_hold``, session 48);
* ``nofit`` / ``nofitMODE`` (e.g. ``nofitprobe10``): goodput (or MODE) with its overlap fit
  (``perfmodel.fit_overlap``, session 31) switched off: the overlap read off the last interval;
* ``lookH`` (e.g. ``look10``): goodput with the noise scale it reads carried forward along its own
  recent growth: a least-squares slope of log phi against the samples processed over the last 8
  stable estimates, applied over H decisions at the last interval's samples (factor clipped to
  [1/2, 4]); a batch change is held for tens of decisions, so the noise scale that matters is the
  one the job will have, and the efficiency model's error grows with that growth
  (``benchmarks/efficiency_error.py``);
* ``causal4``: the causal oracle within goodput's global-batch range (true curves, last
  interval's speeds);
* ``ditherM`` / ``ditherMdD`` / ``ditherM+MODE`` (e.g. ``dither8``): goodput's split moved by
  +-D (default 0.125) for one interval at one decision in M, alternate ranks up and down, the
  global batch kept, goodput's own split restored at the next decision: the compute histories then
  hold two local sizes per rank, so the fixed cost is identified without changing the global batch
  (session 43, 6 seeds, traces none / PAI job 3, N = 8 and 32: dither8 bert 1.015x, cifar10 1.000x,
  deepspeech2 0.995x, ncf 1.000x goodput; trueTB 0.978 / 0.970 / 0.960 / 0.995x in the same worlds);
* ``spancS`` / ``spancS+MODE`` (e.g. ``spanc+dither8``): goodput's overlap fit also identified when
  the slowest compute of its history spans S (default 0.1) at one global batch (the dithered
  intervals give it that span; session 43, same worlds: spanc+dither8 1.009 / 0.966 / 1.015 / 1.000x).
* ``seenE`` / ``seenEnohold``: goodput's efficiency model calibrated on the job by a *perfect*
  measurement at the batches it ran: the noise scale x C, C chosen so that the model equals the true
  efficiency (current metric level, no noise) at the global batch run farthest from the reference
  (C = 1 until one 10% away ran): the most a one-parameter calibration of E(B) from measured
  progress per sample could give, without exploring (session 46);
* ``exploreM`` / ``exploreMfF`` / ``exploreMfFd`` (e.g. ``explore20``, ``explore40f2``,
  ``explore20d``): goodput, and at one decision in M (on a stable noise-scale estimate) one interval at
  F x its global batch (default 1.6; ``d``: alternately / F); every interval's goodput is measured as
  its samples/s x the *true* efficiency of its global batch at the current level; a probe measured 2%
  better than the interval before it is kept (goodput asked to keep it as its incumbent), and
  goodput's proposal to leave a batch for one measured worse in the last 30 decisions is vetoed: an
  upper bound for a controller that explores the global batch and judges by measured progress
  (session 46).

Since session 31 (8fef71f) goodput fits the overlap over the batches it ran; the ``fitO`` /
``fitOprobeM`` figures in docs/policy.md were measured at 108cb0c, before that, by a patch that
fitted the same model (``git show 108cb0c:benchmarks/goodput_gap.py``); on the current code
``--modes nofit,goodput`` compares goodput without and with the fit.

What is left between ``truephi`` and ``causal4`` is the error of the efficiency model
``E(B) = (phi + B0) / (phi + B)`` itself against the measured curves.

    .venv/bin/python benchmarks/goodput_gap.py --seeds 6 --workers 8,32 --traces none,job_3_norm
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _patched_observe(sim, mode: str):
    orig = sim.observe

    def observe(b, iv):
        out = orig(b, iv)
        if mode in ("nohold", "truephi"):
            out["noise_scale_stable"] = bool(math.isfinite(out["noise_scale"]) and out["noise_scale"] > 0) \
                or mode == "truephi"
        if mode == "truephi":
            out["noise_scale"] = sim.pm.noise_scale(sim.P, float(np.sum(b)))
            out["noise_scale_rel_err"] = 0.0
        return out
    return observe


def _run_scaled(sim, seed: int, s: float) -> float | None:
    """The PPO controller's live decision path (goodput anchor, evidence gate, move limits) with a
    constant action: no per-worker move, global scale ``s`` x goodput's choice at every decision."""
    from dynamix_hvd.agent.replay_env import EnvController, ReplayEnvConfig
    from dynamix_hvd.decide import control_loop
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.safety import MoveLimits
    cfg = ReplayEnvConfig(history=0)
    sim.reset(seed)
    ctl = EnvController(sim.bounds(), sim.base_batch, cfg)
    ctl.pending = (np.zeros(sim.n), cfg.action.global_scales.index(s))
    for _ in control_loop(sim, ctl, sim.bounds(), Plan.uniform(sim.n, sim.base_batch), limits=MoveLimits()):
        pass
    return sim.time if sim.reached else None


def _run_probing(sim, seed: int, every: int, scale: float = 1.6, gate: float = 0.0) -> float | None:
    """``_run_scaled`` with the no-op except at one decision in ``every``, where the global scale
    is ``scale``; with ``gate`` > 0, only if the efficiency model's ratio E(scale x B) / E(B) at the
    current global batch B and a stable noise-scale estimate is >= ``gate`` (the probe's statistical
    cost is small; its throughput is what is unknown)."""
    from dynamix_hvd.perfmodel import efficiency
    from dynamix_hvd.agent.replay_env import EnvController, ReplayEnvConfig
    from dynamix_hvd.decide import control_loop
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.safety import MoveLimits
    cfg = ReplayEnvConfig(history=0)
    scales = cfg.action.global_scales
    sim.reset(seed)

    class Probing(EnvController):
        k = 0

        def act(self, obs):
            self.k += 1
            probe = self.k % every == every // 2
            if probe and gate > 0:
                st = self._obs_state
                phi, B = float(st.glob.noise_scale), float(sum(st.plan.batch_sizes))
                probe = bool(st.glob.noise_scale_stable) and math.isfinite(phi) and phi > 0 \
                    and efficiency(scale * B, B, phi) >= gate
            return np.zeros(sim.n), scales.index(scale if probe else 1.0)
    ctl = Probing(sim.bounds(), sim.base_batch, cfg)
    for _ in control_loop(sim, ctl, sim.bounds(), Plan.uniform(sim.n, sim.base_batch), limits=MoveLimits()):
        pass
    return sim.time if sim.reached else None


def _run_lookahead(sim, seed: int, horizon: float, points: int = 8) -> float | None:
    import dataclasses
    import dynamix_hvd.controllers.goodput as gmod
    from dynamix_hvd.replay.runner import run_controller
    orig = gmod.GoodputController.choose
    hist: list[tuple[float, float]] = []
    last = {"step": 0, "samples": 0.0, "d": 0.0}

    def choose(self, state, incumbent=None):
        g = state.glob
        steps = int(g.step) - last["step"]
        d = steps * float(sum(state.plan.batch_sizes))
        last["step"], last["samples"], last["d"] = int(g.step), last["samples"] + d, d
        phi = float(g.noise_scale)
        if bool(g.noise_scale_stable) and math.isfinite(phi) and phi > 0:
            hist.append((last["samples"], math.log(phi)))
            del hist[:-points]
            if len(hist) >= 4:
                x, y = np.array(hist).T
                if np.ptp(x) > 0:
                    slope = float(np.polyfit(x, y, 1)[0])
                    f = float(np.clip(math.exp(slope * horizon * last["d"]), 0.5, 4.0))
                    state = dataclasses.replace(state, glob=dataclasses.replace(g, noise_scale=phi * f))
        return orig(self, state, incumbent)
    gmod.GoodputController.choose = choose
    try:
        return run_controller(sim, "goodput", seed)["time_to_target_s"]
    finally:
        gmod.GoodputController.choose = orig


class _Measured:
    """What the explorers measure: each interval's goodput, per global batch, from the decision it was
    taken at: samples/s x the *true* efficiency of the batch at the current level, or with
    ``from_loss`` the job's observed loss trend over the interval's wall time."""

    def __init__(self, sim, from_loss: bool, window: int) -> None:
        self.sim, self.from_loss, self.window = sim, from_loss, window
        self.b_ref = float(sim.base_batch * sim.n)
        self.k, self.by_batch, self.last = 0, {}, {}
        orig = sim.observe

        def observe(b, iv):
            self.last = orig(b, iv)
            return self.last
        sim.observe = observe

    def add(self, state) -> None:
        """One decision: count it and record the interval that has just ended."""
        self.k += 1
        B = float(sum(state.plan.batch_sizes))
        if self.from_loss:
            g = -float(self.last["loss_trend"]) / float(self.last["elapsed"])
        else:
            steps = [w.step_s for w in state.workers if math.isfinite(w.step_s) and w.step_s > 0]
            e = float(self.sim.pm.level_efficiency(self.sim.P, self.b_ref, [B])[0])
            if not steps or not math.isfinite(e):
                return
            g = B / float(np.median(steps)) * e
        self.by_batch.setdefault(round(B), []).append((self.k, g))

    def g(self, B: float, n: int) -> float | None:
        """The mean of batch ``B``'s last ``n`` measurements within the window (None: none)."""
        pts = [g for k, g in self.by_batch.get(round(B), []) if self.k - k <= self.window]
        return float(np.mean(pts[-n:])) if pts else None


def _run_explorer(sim, seed: int, every: int, factor: float, window: int = 30, margin: float = 0.02,
                  both: bool = False, from_loss: bool = False, probe_len: int = 1, recent: int = 3) -> float | None:
    """Goodput with exploration judged by a perfect measurement (an upper bound for any controller
    that probes the global batch and keeps what it measured better): every ``every`` decisions
    (on a stable noise-scale estimate) one interval runs at ``factor`` x the current global batch,
    split by goodput's model; each interval's goodput is measured as its samples/s x the *true*
    statistical efficiency of its global batch at the current metric level (no noise, no lag).
    Goodput's own proposal is followed unless a measurement of the last ``window`` decisions says
    the current global batch does better than the proposed one (a veto), and a probe measured
    ``margin`` better than the interval before it becomes the global batch goodput is asked to keep.

    ``from_loss``: the measurement a live controller has instead, the job's observed (noisy) loss trend
    over the interval's wall time (relative loss decrease per second), a batch's value the mean of its
    last ``recent`` intervals; a probe then runs ``probe_len`` intervals."""
    from dynamix_hvd.controllers.goodput import GoodputController
    from dynamix_hvd.replay.runner import run_controller
    meas = _Measured(sim, from_loss, window)

    class Explorer(GoodputController):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.probe, self.keep, self.left = None, None, 0

        def _g(self, B):
            n = probe_len if from_loss and self.probe is not None and round(B) != round(self.probe) else \
                (recent if from_loss else 1)
            return meas.g(B, n)

        def _split(self, sizes, B):
            if self._last_model is not None:
                alpha, beta, comm, overlap, phi, bref, shares = self._last_model
                return list(self._integer(alpha, beta, self.predict(alpha, beta, [B], comm, overlap, phi, bref, shares)[1][0]))
            return [x * B / sum(sizes) for x in sizes]

        def decide(self, state):
            meas.add(state)
            B_now = float(sum(state.plan.batch_sizes))
            sizes, B_new = self.choose(state, incumbent=self.keep)
            if self.probe is not None and self.left > 1:   # the probe runs on
                self.left -= 1
                return self._split(sizes, B_now)
            if self.probe is not None:                 # the interval just measured was a probe
                B_before = self.probe
                g_p, g_b = self._g(B_now), self._g(B_before)
                self.probe = None
                self.keep = B_now if (g_p and g_b and g_p > (1 + margin) * g_b) else B_before
                return self._split(sizes, self.keep)
            if abs(B_new - B_now) > 0.5:
                g_new, g_now = self._g(B_new), self._g(B_now)
                if g_new is not None and g_now is not None and g_now > g_new:
                    return self._split(sizes, B_now)     # measured: the current batch does better
                self.keep = B_new
            stable = bool(state.glob.noise_scale_stable)
            if stable and meas.k % every == every // 2:
                self.probe, self.left = float(sum(sizes)), probe_len
                down = both and (meas.k // every) % 2 == 1
                return self._split(sizes, self.probe / factor if down else factor * self.probe)
            return list(sizes)
    ctl = Explorer(sim.bounds(), sim.base_batch)
    return run_controller(sim, "goodput", seed, controller=ctl)["time_to_target_s"]


def _run_wrapped_explorer(sim, seed: int, inner: str, every: int, factor: float, window: int = 30,
                          margin: float = 0.02, from_loss: bool = False, probe_len: int = 1, recent: int = 3) -> float | None:
    """``_run_explorer``'s probes, keeps and vetoes around any controller (``inner``: the shipped ppo or
    goodput), scaling the inner controller's own split to the global batch chosen: one interval (or
    ``probe_len``) at ``factor`` x its proposal every ``every`` decisions on a stable noise-scale
    estimate; a probe measured ``margin`` better than the batch before it is held (the inner
    controller's next move away from it is vetoed while the measurement says the probe does better)."""
    from dynamix_hvd.replay.runner import build_controller, run_controller
    meas = _Measured(sim, from_loss, window)
    ctl_inner = build_controller(inner, sim, seed)

    class Wrapped:
        exact = False

        def __init__(self):
            self.probe, self.left = None, 0

        def __getattr__(self, name):
            return getattr(ctl_inner, name)

        def decide(self, state):
            meas.add(state)
            B_now = float(sum(state.plan.batch_sizes))
            prop = [float(x) for x in ctl_inner.decide(state)]
            B_new = sum(prop)

            def at(B):
                return [x * B / B_new for x in prop]
            n_now = recent if from_loss else 1
            if self.probe is not None and self.left > 1:
                self.left -= 1
                return at(B_now)
            if self.probe is not None:
                g_p, g_b = meas.g(B_now, probe_len if from_loss else 1), meas.g(self.probe, n_now)
                keep = B_now if (g_p and g_b and g_p > (1 + margin) * g_b) else self.probe
                self.probe = None
                return at(keep) if abs(keep - B_new) > 0.5 else prop
            if abs(B_new - B_now) > 0.5:
                g_new, g_now = meas.g(B_new, n_now), meas.g(B_now, n_now)
                if g_new is not None and g_now is not None and g_now > g_new:
                    return at(B_now)
            if bool(state.glob.noise_scale_stable) and meas.k % every == every // 2:
                self.probe, self.left = B_new, probe_len
                return at(factor * B_new)
            return prop
    return run_controller(sim, inner, seed, controller=Wrapped())["time_to_target_s"]


def _wmean(b, w=None) -> float:
    ws = [1.0] * len(b) if w is None else list(w)
    pts = [(x, v) for x, v in zip(b, ws) if math.isfinite(x) and x > 0 and math.isfinite(v) and v > 0]
    return sum(x * v for x, v in pts) / sum(v for _, v in pts)


def run(wl: str, trace: str, n: int, seed: int, mode: str, gns_model: str = "run", sync_model: str = "rank") -> float:
    from dynamix_hvd.replay.runner import run_controller, run_one
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    sim = build_sim(WorldSpec(wl, n, trace, seed, gns_model=gns_model, sync_model=sync_model))
    if mode.startswith("nofit"):       # nofit[MODE]: MODE with goodput's overlap fit off (as before 8fef71f)
        import dynamix_hvd.controllers.goodput as gmod
        orig_fit, gmod.fit_overlap = gmod.fit_overlap, lambda *args, **kw: None
        try:
            return run(wl, trace, n, seed, mode[5:] or "goodput", gns_model, sync_model)
        finally:
            gmod.fit_overlap = orig_fit
    if mode.startswith("opt"):         # optF: an unidentified fit takes share F of the time as fixed cost
        import dynamix_hvd.controllers.affine as amod
        import dynamix_hvd.controllers.model as mmod
        f = float(mode[3:])
        orig_fit, orig_min = mmod.fit_affine, mmod.BATCH_FIT_MIN

        def opt_fit(b, t, w=None):
            if amod.identified([x for x in b if math.isfinite(x) and x > 0]):
                return orig_fit(b, t, w)
            a0, b0 = orig_fit(b, t, w)
            return (f * b0 * _wmean(b, w), (1 - f) * b0) if math.isfinite(b0) else (a0, b0)
        mmod.fit_affine, mmod.BATCH_FIT_MIN = opt_fit, 10 ** 9
        try:
            return run(wl, trace, n, seed, "goodput", gns_model, sync_model)
        finally:
            mmod.fit_affine, mmod.BATCH_FIT_MIN = orig_fit, orig_min
    if mode.startswith("hist"):        # histH: goodput's compute / overlap histories H intervals long (default 16)
        import dynamix_hvd.controllers.goodput as gmod
        orig_init = gmod.GoodputController.__init__

        def init(self, *args, **kw):
            kw["history"] = int(mode[4:])
            orig_init(self, *args, **kw)
        gmod.GoodputController.__init__ = init
        try:
            return run(wl, trace, n, seed, "goodput", gns_model, sync_model)
        finally:
            gmod.GoodputController.__init__ = orig_init
    if mode.startswith("spanc"):       # spancS[+MODE]: goodput's overlap fit also once the slowest compute spans S (0.1)
        import dynamix_hvd.controllers.goodput as gmod
        spec, _, inner = mode[5:].partition("+")
        cspan = float(spec) if spec else 0.1
        orig_fit = gmod.fit_overlap

        def span_fit(c, e, B, **kw):
            got = orig_fit(c, e, B, **kw)
            if got is not None:
                return got
            cc = np.asarray(c, dtype=float)
            cc = cc[np.isfinite(cc)]
            if cc.size >= 2 and cc.max() > (1.0 + cspan) * cc.min():
                return orig_fit(c, e, np.where(np.asarray(c, dtype=float) == cc.max(), 2.0, 1.0))
            return None
        gmod.fit_overlap = span_fit
        try:
            return run(wl, trace, n, seed, inner or "goodput", gns_model, sync_model)
        finally:
            gmod.fit_overlap = orig_fit
    if mode.startswith("margin"):      # marginM[zZ]: the hold's room at the pessimistic noise scale / M (stats: 3; z 2)
        import dynamix_hvd.stats as smod
        m, _, z = mode[6:].partition("z")
        orig_room = smod.growth_room

        def room(noise_scale, rel_err, updates=1_000_000, min_updates=4, **_):
            return orig_room(noise_scale, rel_err, updates, min_updates, z=float(z) if z else smod.GROWTH_Z,
                             margin=float(m))
        smod.growth_room = room
        try:
            return run(wl, trace, n, seed, "goodput", gns_model, sync_model)
        finally:
            smod.growth_room = orig_room
    if mode.startswith("lognohold"):   # lognoholdK: nohold, the robust gain at phi x exp(-/+ K x rel_err)
        import dynamix_hvd.controllers.goodput as gmod
        k = float(mode[9:] or 1.0)
        orig_robust = gmod.GoodputController._robust_gain

        def log_robust(self, goodput, i_now, alpha, beta, cands, comm, overlap, phi, b_ref, shares, rel_err):
            gain = goodput / goodput[i_now]
            d = k * rel_err if math.isfinite(rel_err) and rel_err > 0 else 0.0
            for f in ((math.exp(-d), math.exp(d)) if d > 0 else ()):
                g = self.predict(alpha, beta, cands, comm, overlap, phi * f, b_ref, shares)[0]
                gain = np.minimum(gain, g / g[i_now])
            return gain
        gmod.GoodputController._robust_gain = log_robust
        try:
            return run(wl, trace, n, seed, "nohold", gns_model, sync_model)
        finally:
            gmod.GoodputController._robust_gain = orig_robust
    if mode.startswith("dither"):      # ditherM[dD][+MODE]: goodput's split moved +-D (0.125) at one decision in M
        import dynamix_hvd.controllers.goodput as gmod
        spec, _, inner = mode[6:].partition("+")
        every, _, d = spec.partition("d")
        every, d = int(every), float(d) if d else 0.125
        orig_decide = gmod.GoodputController.decide
        count: dict = {"k": 0, "shares": None}

        def dither_decide(self, state):
            b = np.asarray(orig_decide(self, state), dtype=float)
            count["k"] += 1
            k = count["k"]
            if count["shares"] is not None:
                # the interval after a dither: goodput's global batch on the split it had chosen
                # before the dither (without evidence against the current split goodput keeps its
                # proportions, so the dither would otherwise last)
                out = np.maximum(np.round(count["shares"] * b.sum()), 1.0)
                out[np.argmax(out)] += b.sum() - out.sum()
                count["shares"] = None
                return list(out)
            if k % every != every // 2 or b.size < 2:
                return list(b)
            count["shares"] = b / b.sum()
            sign = np.where(np.arange(b.size) % 2 == (k // every) % 2, 1.0, -1.0)
            out = np.maximum(np.round(b * (1.0 + d * sign)), 1.0)
            out[np.argmax(out)] += b.sum() - out.sum()          # the global batch unchanged
            return list(out)
        gmod.GoodputController.decide = dither_decide
        try:
            return run(wl, trace, n, seed, inner or "goodput", gns_model, sync_model)
        finally:
            gmod.GoodputController.decide = orig_decide
    if mode == "causal4":
        t = run_one(sim, "causal4", seed)["time_to_target_s"]
    elif mode in ("causal_safe", "causal_safe_nohold"):   # the oracle behind the safety layer, with / without its hold
        from dynamix_hvd.replay.oracle import run_causal_safe
        from dynamix_hvd.safety import MoveLimits
        lim = MoveLimits().without_hold() if mode == "causal_safe_nohold" else MoveLimits()
        t = run_causal_safe(sim, seed, limits=lim)["time_to_target_s"]
    elif mode.startswith("probe"):     # probeM[gG]: 1.6 x goodput's global batch at one decision in M
        every, _, g = mode[5:].partition("g")
        t = _run_probing(sim, seed, int(every), gate=float(g) if g else 0.0)
    elif mode.startswith("scale"):     # scaleS: PPO's action space, global scale S at every decision
        t = _run_scaled(sim, seed, float(mode[5:]))
    elif mode in ("memT", "memA"):   # per-rank step-time curve from every (b, compute) the job measured (diagnostic)
        import dynamix_hvd.controllers.goodput as gmod
        from dynamix_hvd.perfmodel import step_time as st_fn
        orig_predict, orig_observe = gmod.GoodputController.predict, sim.observe
        seen: list[dict[int, list[float]]] = [dict() for _ in range(sim.n)]
        last: list[tuple[int, float]] = [(0, math.nan)] * sim.n

        def observe(b, iv):
            out = orig_observe(b, iv)
            for i, (bi, ci) in enumerate(zip(out["raw"][:, 0], out["raw"][:, 2])):
                seen[i].setdefault(int(bi), []).append(float(ci))
                last[i] = (int(bi), float(ci))
            return out

        def curve(i, x, alpha, beta):
            pts = sorted((k, float(np.median(v[-8:]))) for k, v in seen[i].items())
            if len(pts) < 2:
                return alpha + beta * x
            bs, cs = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts])
            y = np.interp(x, bs, cs)
            hi_slope = max((cs[-1] - cs[-2]) / (bs[-1] - bs[-2]), 0.0)
            lo_slope = max((cs[1] - cs[0]) / (bs[1] - bs[0]), 0.0)
            if mode == "memA":      # beyond the sizes run: the affine fit's shape from the nearest one run
                def aff(z):
                    return alpha + beta * z
                y = np.where(x > bs[-1], cs[-1] * aff(x) / aff(bs[-1]), y)
                y = np.where(x < bs[0], cs[0] * aff(x) / aff(bs[0]), y)
            else:
                y = np.where(x > bs[-1], cs[-1] + hi_slope * (x - bs[-1]), y)
                y = np.where(x < bs[0], np.maximum(cs[0] - lo_slope * (bs[0] - x), 1e-6), y)
            lb, lc = last[i]        # the level of the latest interval (speeds drift), the shape of the history
            ref = float(np.interp(lb, bs, cs)) if bs[0] <= lb <= bs[-1] else lc
            return y * (lc / ref if ref > 0 and math.isfinite(lc) else 1.0)

        def mem_predict(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares=None):
            _, b = orig_predict(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares)
            tc = np.max(np.stack([curve(i, b[:, i], alpha[i], beta[i]) for i in range(b.shape[1])], axis=1), axis=1)
            B = b.sum(axis=1)
            return B / st_fn(tc, comm, overlap) * gmod.efficiency_array(B, b_ref, phi), b
        sim.observe = observe
        gmod.GoodputController.predict = mem_predict
        try:
            t = run_controller(sim, "goodput", seed)["time_to_target_s"]
        finally:
            gmod.GoodputController.predict = orig_predict
            sim.observe = orig_observe
    elif mode == "trueTB":      # goodput's own splits, each timed by the truth (the B choice's model only)
        import dynamix_hvd.controllers.goodput as gmod
        from dynamix_hvd.replay.oracle import last_interval_multipliers
        orig_predict = gmod.GoodputController.predict

        def split_timed_predict(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares=None):
            _, b = orig_predict(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares)
            h = last_interval_multipliers(sim)
            bi = np.clip(np.round(b), 1, sim.tp.cap)
            T = np.array([float(sim.tp.rank_times(h, row.astype(np.int64), sim.link).max()) for row in bi])
            B = b.sum(axis=1)
            return B / T * gmod.efficiency_array(B, b_ref, phi), b
        gmod.GoodputController.predict = split_timed_predict
        try:
            t = run_controller(sim, "goodput", seed)["time_to_target_s"]
        finally:
            gmod.GoodputController.predict = orig_predict
    elif mode == "trueS":       # goodput's own scores choose B; each candidate applied with the true equal-time split
        import dynamix_hvd.controllers.goodput as gmod
        from dynamix_hvd.replay.oracle import _equal_time, last_interval_multipliers
        orig_predict = gmod.GoodputController.predict

        def true_split_predict(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares=None):
            score, _ = orig_predict(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares)
            _, cont = _equal_time(sim, last_interval_multipliers(sim), np.asarray(totals, dtype=float))
            return score, np.clip(cont, 1.0, None)
        gmod.GoodputController.predict = true_split_predict
        try:
            t = run_controller(sim, "goodput", seed)["time_to_target_s"]
        finally:
            gmod.GoodputController.predict = orig_predict
    elif mode in ("trueE", "trueEnohold", "trueET", "trueT"):
        import dynamix_hvd.controllers.goodput as gmod
        from dynamix_hvd.replay.oracle import _equal_time, last_interval_multipliers
        orig, orig_predict = gmod.efficiency_array, gmod.GoodputController.predict

        def true_efficiency(B, ref, phi):
            e = np.nan_to_num(sim.pm.level_efficiency(sim.P, ref, B), nan=0.0, posinf=np.inf)
            return e if np.ndim(B) else float(e[0])

        def true_predict(self, alpha, beta, totals, comm, overlap, phi, b_ref, shares=None):
            tot = np.asarray(totals, dtype=float)
            T, cont = _equal_time(sim, last_interval_multipliers(sim), tot)
            eff = orig(tot, b_ref, phi) if mode == "trueT" else true_efficiency(tot, b_ref, phi)
            return tot / T * eff, np.clip(cont, 1.0, None)
        if mode != "trueT":
            gmod.efficiency_array = true_efficiency
        if mode == "trueEnohold":
            sim.observe = _patched_observe(sim, "nohold")
        if mode in ("trueET", "trueT"):
            gmod.GoodputController.predict = true_predict
        try:
            t = run_controller(sim, "goodput", seed)["time_to_target_s"]
        finally:
            gmod.efficiency_array, gmod.GoodputController.predict = orig, orig_predict
    elif mode in ("seenE", "seenEnohold"):   # the efficiency model calibrated (phi x C) by the truth at the batches run
        import dynamix_hvd.controllers.goodput as gmod
        from dynamix_hvd.perfmodel import efficiency_array
        orig, orig_observe = gmod.efficiency_array, sim.observe
        ran: set[float] = set()
        inner_observe = _patched_observe(sim, "nohold") if mode == "seenEnohold" else orig_observe

        def observe(b, iv):
            ran.add(float(np.sum(b)))
            return inner_observe(b, iv)

        def seen_efficiency(B, ref, phi):
            if not (math.isfinite(phi) and phi > 0):
                return orig(B, ref, phi)
            far = [r for r in ran if abs(math.log(r / ref)) > math.log(1.1)]
            c = 1.0
            if far:
                r = max(far, key=lambda x: abs(math.log(x / ref)))
                e = float(sim.pm.level_efficiency(sim.P, ref, [r])[0])
                if math.isfinite(e) and e > 0:
                    # E = (phi C + ref) / (phi C + r)  =>  phi C = (ref - E r) / (E - 1)
                    pc = (ref - e * r) / (e - 1.0) if abs(e - 1.0) > 1e-9 else math.inf
                    c = float(np.clip(pc / phi, 1 / 16, 64)) if pc > 0 else (64.0 if (r > ref) == (e > 1) else 1 / 16)
            return efficiency_array(B, ref, phi * c)
        sim.observe = observe
        gmod.efficiency_array = seen_efficiency
        try:
            t = run_controller(sim, "goodput", seed)["time_to_target_s"]
        finally:
            gmod.efficiency_array = orig
    elif "+explore" in mode:           # INNER+exploreM[fF][L][pP]: the explorer's probes and vetoes around ppo or goodput
        import re
        inner, _, spec = mode.partition("+explore")
        m = re.fullmatch(r"(\d+)(?:f([\d.]+))?(L?)(?:p(\d+))?", spec)
        if m is None or inner not in ("ppo", "goodput"):
            raise SystemExit(f"mode {mode!r}: expected ppo+exploreM[fF][L][pP] or goodput+explore...")
        t = _run_wrapped_explorer(sim, seed, inner, int(m[1]), float(m[2] or 1.6), from_loss=bool(m[3]),
                                  probe_len=int(m[4] or 1))
    elif mode.startswith("explore"):   # exploreM[fF]: goodput, plus a probe at F x B every M decisions, kept by the measured truth
        import re
        m = re.fullmatch(r"(\d+)(?:f([\d.]+))?(d?)(L?)(?:p(\d+))?", mode[7:])
        if m is None:
            raise SystemExit(f"mode {mode!r}: expected exploreM[fF][d][L][pP]")
        t = _run_explorer(sim, seed, int(m[1]), float(m[2] or 1.6), both=bool(m[3]), from_loss=bool(m[4]),
                          probe_len=int(m[5] or 1))
    elif mode.startswith("look"):      # lookH: the noise scale carried forward along its recent growth
        t = _run_lookahead(sim, seed, float(mode[4:]))
    elif mode.startswith("phi"):       # phiC: goodput's efficiency model with the noise scale x C
        import dynamix_hvd.controllers.goodput as gmod
        from dynamix_hvd.perfmodel import efficiency_array
        c = float(mode[3:])
        orig, gmod.efficiency_array = gmod.efficiency_array, lambda B, ref, phi: efficiency_array(B, ref, phi * c)
        try:
            t = run_controller(sim, "goodput", seed)["time_to_target_s"]
        finally:
            gmod.efficiency_array = orig
    elif mode == "ppo":                # the shipped default, for reference
        t = run_one(sim, "ppo", seed)["time_to_target_s"]
    elif mode in ("static", "proportional"):    # the simple controllers, for reference
        t = run_controller(sim, mode, seed)["time_to_target_s"]
    else:
        if mode not in ("goodput", "nohold", "truephi"):
            raise SystemExit(f"unknown mode {mode!r} (see the module's docstring)")
        if mode != "goodput":
            sim.observe = _patched_observe(sim, mode)
        t = run_controller(sim, "goodput", seed)["time_to_target_s"]
    return math.inf if t is None else float(t)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default="bert,cifar10,deepspeech2,ncf")
    p.add_argument("--traces", default="none,job_3_norm")
    p.add_argument("--workers", default="8,32")
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--seed-offset", type=int, default=5)
    p.add_argument("--modes", default="goodput,nohold,truephi,causal4")
    p.add_argument("--gns-model", default="run", help="the worlds' noise-scale model (replay.sim.GNS_MODELS)")
    p.add_argument("--sync-model", default="rank", help="the worlds' sync model (replay.throughput.SYNC_MODELS)")
    a = p.parse_args(argv)
    modes = a.modes.split(",")
    t0 = time.time()
    rows = []
    for wl in a.workloads.split(","):
        ratios = {m: [] for m in modes}
        for tr in a.traces.split(","):
            for n in (int(x) for x in a.workers.split(",")):
                med = {m: float(np.median([run(wl, tr, n, a.seed_offset + s, m, a.gns_model, a.sync_model) for s in range(a.seeds)]))
                       for m in modes}
                cell = " ".join(f"{m} {med[m] / med['goodput']:.3f}" for m in modes)
                print(f"{wl:12s} {tr:12s} N={n:3d} goodput {med['goodput']:9.0f} s | {cell}", flush=True)
                for m in modes:
                    ratios[m].append(med[m] / med["goodput"])
        rows.append((wl, {m: float(np.exp(np.mean(np.log(v)))) for m, v in ratios.items()}))
    print("\ngeomean over cells, relative to goodput:")
    for wl, g in rows:
        print(f"  {wl:12s} " + "  ".join(f"{m} {v:.3f}" for m, v in g.items()))
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
