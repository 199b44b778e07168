"""The hindsight oracle: the best schedule of global batch and split it can find, knowing the truth.

It runs in the same world as the controllers (same seed: same hardware factors and fluctuation
series) but sees the true per-step speeds of the coming interval and the true progress curves.
At every decision interval:

1. candidates: ~24 global batches log-spaced over the bounds' [min, max] global batch, plus the
   static plan's B0, the measured batches inside the bounds and the bounds themselves;
2. for each candidate, the split that equalises the ranks' true times over the interval (exact
   water filling on the measured time curves, ``throughput.equal_time_totals``) and its step time;
3. score: if some candidates reach the target inside the interval, the least time to reach it;
   otherwise the most progress per second (metric-level progress from the true curves);
4. the 3 best by this estimate are run exactly (integer split, true per-step speeds) and the best
   actual one is committed.

This greedy (one-interval lookahead) schedule takes the fastest rate of progress at every
interval. It is not a proof of optimality (the end of the run and changing speeds can make a
steadier schedule faster), so the oracle also runs the 3 most promising *constant* global batches
(by their time to target at the starting speeds), each with the equal-time split of every
interval, and reports the fastest of the four schedules. ``tests/unit/test_replay_oracle.py``
checks that it is never slower than any controller on any tested seed.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from dynamix_hvd.replay.progress import ProgressModel
from dynamix_hvd.replay.sim import ReplaySim
from dynamix_hvd.safety import MoveLimits, global_range

N_GRID = 24
N_EXACT = 3
N_CONSTANT = 3


def candidate_batches(sim: ReplaySim, n_grid: int = N_GRID) -> np.ndarray:
    bnd = sim.bounds()
    lo, hi = int(bnd.min_global_batch), int(bnd.max_global_batch)
    grid = np.round(np.geomspace(lo, hi, n_grid)) if hi > lo else np.array([lo])
    meas = [b for b in sim.pm.batches if lo <= b <= hi]
    return np.unique(np.concatenate([grid, meas, [lo, hi, sim.B0]]).astype(np.int64))


def integer_split(sim: ReplaySim, h: np.ndarray, B: int, cont: np.ndarray) -> np.ndarray:
    """Integer local batches summing to B near the continuous split, extra samples to the ranks
    whose time grows least."""
    cap = np.asarray(sim.caps)    # per-rank memory (a scenario may lower it below the workload cap)
    b = np.clip(np.floor(cont + 1e-9).astype(np.int64), 1, cap)
    rem = int(B - b.sum())
    while abs(rem) >= b.size:      # bulk: spread whole rounds over the ranks with room
        room = b < cap if rem > 0 else b > 1
        if not room.any():
            break
        q = abs(rem) // int(room.sum())
        if q == 0:
            break
        new = np.clip(b + np.where(room, q if rem > 0 else -q, 0), 1, cap)
        rem -= int(new.sum() - b.sum())
        b = new
    while rem != 0:
        if rem > 0:
            cand = b + 1
            ok = cand <= cap
            t = np.where(ok, sim.tp.rank_times(h, np.minimum(cand, cap), sim.link), np.inf)
            k = min(rem, int(ok.sum()))
            if k == 0:
                break                  # every rank at its memory cap: B is not reachable
            pick = np.argpartition(t, k - 1)[:k] if k < t.size else np.arange(t.size)
            b[pick] += 1
            rem -= k
        else:
            ok = b > 1
            t = np.where(ok, sim.tp.rank_times(h, b, sim.link), -np.inf)
            k = min(-rem, int(ok.sum()))
            if k == 0:
                break
            pick = np.argpartition(-t, k - 1)[:k] if k < t.size else np.arange(t.size)
            b[pick] -= 1
            rem += k
    return b


def _score(reached: np.ndarray, t_finish: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Higher is better: reaching the target (sooner better) beats any rate of progress."""
    return np.where(reached, 1e12 - t_finish, rate)


def _estimates(sim: ReplaySim, cands: np.ndarray, cumC: np.ndarray, T: np.ndarray) -> np.ndarray:
    """``_score`` of every candidate global batch over the coming interval, from the true curves
    (``cumC``: samples to each level per candidate) and the step times ``T``."""
    K = sim.interval_steps
    s_now = ProgressModel.position(sim.P, cumC)
    with np.errstate(invalid="ignore"):
        need = np.ceil((cumC[:, -1] - s_now) / cands - 1e-9)
    reach = np.isfinite(need) & (need <= K)
    steps = np.where(reach, np.maximum(need, 1), K)
    newP = ProgressModel.advance(sim.P, cumC, K * cands)
    return _score(reach, steps * T, (newP - sim.P) / (K * T))


def _equal_time(sim: ReplaySim, h: np.ndarray, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step time and continuous split of each candidate global batch at compute multipliers
    ``h`` under the simulator's links now (``ThroughputModel.equal_time``)."""
    return sim.tp.equal_time(h, cands, sim.link)


def _multipliers(sim: ReplaySim, step0: int, K: int) -> np.ndarray:
    """Every rank's true compute multiplier over steps step0 .. step0 + K - 1 (hardware x fluctuation)."""
    lengths, F = sim.fluct.chunks(step0, K)
    return sim.hw * (lengths @ F) / lengths.sum()


def last_interval_multipliers(sim: ReplaySim, blind: bool = False) -> np.ndarray:
    """What a controller could know of the speeds when it decides: every rank's true compute
    multiplier over the interval that has just ended; before the first, the hardware alone, or
    with ``blind`` nothing (equal multipliers: the static plan, as a controller that has not
    measured yet)."""
    K = sim.interval_steps
    if sim.t >= K:
        return _multipliers(sim, sim.t - K, K)
    return np.ones(sim.n) if blind else sim.hw.astype(float)


def causal_scores(sim: ReplaySim, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The causal oracles' decision rule from the simulator's current state: the ``_score`` of
    each candidate global batch over the coming interval (true progress curves, the last
    interval's true speeds, each candidate split to equal times) and the continuous splits."""
    cands = np.asarray(cands)
    T, cont = _equal_time(sim, last_interval_multipliers(sim), cands)
    return _estimates(sim, cands, sim.pm.cum_for(cands.astype(float)), T), cont


def _run_best(sim: ReplaySim, h: np.ndarray, cands: np.ndarray, cont: np.ndarray,
              order: list[int]) -> tuple[Any, np.ndarray]:
    """Run each of the candidates ``order`` exactly from the current state (integer split at
    multipliers ``h``, not committed); the best by ``_score`` and its local batches."""
    best_iv, best_b, best_s = None, None, -math.inf
    for m in order:
        b = integer_split(sim, h, int(cands[m]), cont[m])
        iv = sim.run_interval(b)
        sc = float(_score(np.array(iv.reached), np.array(iv.elapsed), np.array((iv.new_progress - sim.P) / iv.elapsed)))
        if sc > best_s:
            best_iv, best_b, best_s = iv, b, sc
    return best_iv, best_b


def _episode(sim: ReplaySim, seed: int, cands: np.ndarray, cumC: np.ndarray, n_exact: int,
             max_decisions: int, causal: bool = False, blind: bool = False) -> tuple[float, list[int]]:
    """One oracle episode over ``cands``: per interval the best of the ``n_exact`` best-estimated
    candidates, run exactly. Returns (time to target or inf, global batch per decision).

    ``causal``: decide on the true speeds of the interval that has just ended (the hardware alone
    before the first; ``blind``: nothing before the first), not the coming one's, and commit the
    best estimate without trial runs."""
    sim.reset(seed)
    K = sim.interval_steps
    schedule: list[int] = []
    while not sim.done and sim.decisions < max_decisions:
        if causal:
            h = last_interval_multipliers(sim, blind)
            n_exact = 1
        else:
            h = _multipliers(sim, sim.t, K)
        T, cont = _equal_time(sim, h, cands)
        order = list(np.argsort(-_estimates(sim, cands, cumC, T))[:n_exact]) if cands.size > 1 else [0]
        best_iv, best_b = _run_best(sim, h, cands, cont, order)
        sim.commit(best_iv)
        schedule.append(int(best_b.sum()))
    return (sim.time if sim.reached else math.inf), schedule


def run_causal(sim: ReplaySim, seed: int, max_scale: float | None = None, max_decisions: int = 200_000,
               blind: bool = False) -> dict[str, Any]:
    """The causal oracle: the greedy schedule of ``run_hindsight`` deciding on what a controller
    could know at each decision: the true progress curves (a perfect workload model) and the true
    speeds of the interval that has just ended, not the coming one's; no trial runs, no search
    over constant schedules. Between goodput and the hindsight oracle it splits goodput's gap in
    two: what a better model of the workload and the cluster could gain (goodput -> causal), and
    what only knowing the future fluctuations gains (causal -> hindsight), which no controller
    can learn. Neither oracle is optimal (greedy schedules): either can be the faster by a few
    percent. ``max_scale``: only global batches up to this many times B0 (``causal4``: 4 x B0,
    where the goodput controller's candidates ended until session 24; they now run up to the
    bounds, ``goodput.candidate_scales``), to tell what the range of global batches is worth
    from what the model is. ``blind`` (``causal_blind``): the first interval is split evenly (no
    speed measured yet: at B0 that is the static plan every controller starts from) instead of by
    the true hardware speeds: the bound for a controller that measures perfectly but only what has
    happened."""
    sim.reset(seed)
    cands = candidate_batches(sim)
    if max_scale is not None:
        cands = cands[cands <= max(max_scale * sim.B0, cands.min())]
    cumC = sim.pm.cum_for(cands.astype(float))
    t, sched = _episode(sim, seed, cands, cumC, 1, max_decisions, causal=True, blind=blind)
    sim.time, sim.reached = t, math.isfinite(t)
    return {"time_to_target_s": t if math.isfinite(t) else None, "schedule": sched,
            "decisions": len(sched), "found_by": "causal_blind" if blind else "causal"}


def safe_candidates(grid: np.ndarray, B_cur: float, stable: bool, room: float, hi: float,
                    limits: MoveLimits | None = None) -> np.ndarray:
    """The global batches the safety layer lets a decision reach from ``B_cur`` (pure; the range
    is ``safety.global_range``, the rule ``limit_proposal`` applies to every controller): the
    grid's points in that range plus its ends (the clipped values a controller gets for a proposal
    beyond them), at most ``hi``."""
    lo_B, hi_B = global_range(B_cur, stable, room, limits or MoveLimits())
    lo_B = max(lo_B, float(grid.min()))
    hi_B = max(min(hi_B, hi), lo_B)
    inside = grid[(grid >= lo_B) & (grid <= hi_B)]
    return np.unique(np.concatenate([inside, np.round([lo_B, B_cur, hi_B])]).clip(grid.min(), hi)).astype(np.int64)


def causal_safe_step(sim: ReplaySim, B_cur: float, grid: np.ndarray, limits: MoveLimits) -> np.ndarray:
    """One decision of ``run_causal_safe`` from the simulator's state (the global batch now
    ``B_cur``): the best safe candidate by ``causal_scores``, split on the last interval's speeds,
    run, committed and observed (the noise-scale estimator a controller would read). Returns the
    local batches it ran."""
    cands = safe_candidates(grid, B_cur, bool(sim.gns.stable), float(sim.gns.growth_room), float(grid.max()), limits)
    score, cont = causal_scores(sim, cands)
    m = int(np.argmax(score)) if cands.size > 1 else 0
    b = integer_split(sim, last_interval_multipliers(sim), int(cands[m]), cont[m])
    iv = sim.run_interval(b)
    sim.commit(iv)
    sim.observe(b, iv)
    return b


def run_causal_safe(sim: ReplaySim, seed: int, max_decisions: int = 200_000,
                    limits: MoveLimits | None = None) -> dict[str, Any]:
    """The causal oracle under the safety layer every controller runs behind (``safety.MoveLimits``
    defaults): the true progress curves and the last interval's true speeds, but each decision may
    only move the global batch as ``limit_proposal`` lets a controller (1.5x per decision; held
    while the noise-scale estimate, fed by the same simulated measurements, is unstable, or grown
    only within its lower bound). Per-rank limits are not applied (they rarely bind on the global
    batch). It tells how much of goodput's gap the safety layer leaves to a controller that knew
    the workload. Like the other oracles it is greedy (one interval's lookahead), so it is an
    estimate of that room, not a ceiling: behind the hold a greedy step can strand it at a batch
    it may not leave (session 25: slower than goodput in 3 of 24 perturbed worlds, 1.42x in one).
    ``limits``: other limits than the defaults (``MoveLimits().without_hold()``: the room of a policy
    that passes the hold, ``benchmarks/goodput_gap.py --modes causal_safe_nohold``)."""
    lim = limits or MoveLimits()
    sim.reset(seed)
    grid = candidate_batches(sim)
    B_cur = float(sim.B0)
    schedule: list[int] = []
    while not sim.done and sim.decisions < max_decisions:
        B_cur = float(causal_safe_step(sim, B_cur, grid, lim).sum())
        schedule.append(int(B_cur))
    t = sim.time if sim.reached else math.inf
    return {"time_to_target_s": t if math.isfinite(t) else None, "schedule": schedule,
            "decisions": len(schedule), "found_by": "causal_safe"}


def _safe_episode(sim: ReplaySim, seed: int, grid: np.ndarray, limits: MoveLimits, n_exact: int,
                  toward: int | None, max_decisions: int) -> tuple[float, list[int]]:
    """One episode behind the safety layer's global rules, splitting every interval by the coming
    interval's true speeds (hindsight). ``toward=None``: per interval the ``n_exact`` best safe
    candidates by the true curves are run exactly and the best committed; ``toward=B``: the safe
    candidate nearest B (log scale), i.e. grow or shrink to B as fast as the rules let and hold it."""
    sim.reset(seed)
    K = sim.interval_steps
    B_cur = float(sim.B0)
    schedule: list[int] = []
    hi = float(grid.max())
    while not sim.done and sim.decisions < max_decisions:
        cands = safe_candidates(grid, B_cur, bool(sim.gns.stable), float(sim.gns.growth_room), hi, limits)
        h = _multipliers(sim, sim.t, K)
        T, cont = _equal_time(sim, h, cands)
        if toward is None:
            est = _estimates(sim, cands, sim.pm.cum_for(cands.astype(float)), T)
            order = list(np.argsort(-est)[:n_exact]) if cands.size > 1 else [0]
        else:
            order = [int(np.argmin(np.abs(np.log(cands / float(toward)))))]
        best_iv, best_b = _run_best(sim, h, cands, cont, order)
        sim.commit(best_iv)
        sim.observe(best_b, best_iv)
        B_cur = float(best_b.sum())
        schedule.append(int(B_cur))
    return (sim.time if sim.reached else math.inf), schedule


def _snapshot(sim: ReplaySim) -> tuple:
    """Everything ``commit`` and ``observe`` change (the beam search's restore point)."""
    return (sim.P, sim.t, sim.time, sim.decisions, sim.reached, copy.deepcopy(sim.gns),
            copy.deepcopy(sim.noise.bit_generator.state), sim._gap, sim._phi_obs, sim.hw.copy(), sim.link,
            sim._log_phi, sim._P_start)


def _restore(sim: ReplaySim, snap: tuple) -> None:
    (sim.P, sim.t, sim.time, sim.decisions, sim.reached, gns, rng, sim._gap, sim._phi_obs, hw, sim.link,
     sim._log_phi, sim._P_start) = snap
    sim.gns = copy.deepcopy(gns)
    sim.noise.bit_generator.state = copy.deepcopy(rng)
    sim.hw = hw.copy()


def _time_to_go(sim: ReplaySim, grid: np.ndarray, cumC: np.ndarray) -> float:
    """Optimistic time still needed from the current state: the best constant global batch at
    the current hardware speeds, ignoring the move limits (the beam's ranking)."""
    T, _ = _equal_time(sim, sim.hw.astype(float), grid)
    s_now = ProgressModel.position(sim.P, cumC)
    with np.errstate(invalid="ignore"):
        t = (cumC[:, -1] - s_now) / grid * T
    t = t[np.isfinite(t)]
    return float(t.min()) if t.size else math.inf


def _beam_safe(sim: ReplaySim, seed: int, grid: np.ndarray, limits: MoveLimits, width: int,
               max_decisions: int) -> tuple[float, list[int]]:
    """Beam search behind the safety layer's global rules with the coming interval's true speeds:
    every state of the beam tries every safe candidate; the ``width`` states with the least time
    so far plus ``_time_to_go`` (at most two per global batch) go on. Returns the fastest found."""
    sim.reset(seed)
    cumC = sim.pm.cum_for(grid.astype(float))
    hi = float(grid.max())
    beam: list[tuple[tuple, float, list[int]]] = [(_snapshot(sim), float(sim.B0), [])]
    best_t, best_sched = math.inf, []
    for _ in range(max_decisions):
        children: list[tuple[float, tuple, float, list[int]]] = []
        for snap, B_cur, sched in beam:
            _restore(sim, snap)
            cands = safe_candidates(grid, B_cur, bool(sim.gns.stable), float(sim.gns.growth_room), hi, limits)
            h = _multipliers(sim, sim.t, sim.interval_steps)
            _, cont = _equal_time(sim, h, cands)
            for m in range(cands.size):
                _restore(sim, snap)
                b = integer_split(sim, h, int(cands[m]), cont[m])
                iv = sim.run_interval(b)
                sim.commit(iv)
                sim.observe(b, iv)
                if sim.reached:
                    if sim.time < best_t:
                        best_t, best_sched = sim.time, sched + [int(b.sum())]
                elif not sim.done:
                    children.append((sim.time + _time_to_go(sim, grid, cumC), _snapshot(sim), float(b.sum()),
                                     sched + [int(b.sum())]))
        children = [c for c in children if c[0] < best_t]
        if not children:
            break
        children.sort(key=lambda c: c[0])
        beam, per_B = [], {}
        for est, snap, B, sched in children:
            if per_B.get(B, 0) < 2:
                per_B[B] = per_B.get(B, 0) + 1
                beam.append((snap, B, sched))
                if len(beam) >= width:
                    break
    return best_t, best_sched


def run_hindsight_safe(sim: ReplaySim, seed: int, n_ramps: int = 6, max_decisions: int = 200_000,
                       beam: int = 0) -> dict[str, Any]:
    """The hindsight oracle behind the safety layer's global rules (``safety.global_range`` with
    the default ``MoveLimits``: 1.5x per decision, held or grown only within the noise-scale
    estimate's lower bound while that estimate, fed by the same simulated measurements, is
    unstable): the true curves and the *coming* interval's true speeds, so the fastest any
    controller running behind those rules could be, whatever it knew or learned. Fastest of: the
    greedy schedule (``N_EXACT`` safe candidates run exactly per interval), ``n_ramps`` schedules
    that go to one global batch as fast as the rules let and hold it (the batches with the least
    time to target at the start's speeds), and ``causal_safe``. Per-rank limits are not applied
    (optimistic). Greedy and constant searches are not a proof of optimality: it is the best
    schedule found, as ``run_hindsight``'s is. ``beam`` > 0 (``hindsight_safe_beam``): also a beam
    search of that width over every safe candidate at every decision (``_beam_safe``; slow on long
    runs, tens of decisions are cheap)."""
    lim = MoveLimits()
    sim.reset(seed)
    grid = candidate_batches(sim)
    runs: list[tuple[float, list[int], str]] = []
    t, sched = _safe_episode(sim, seed, grid, lim, N_EXACT, None, max_decisions)
    runs.append((t, sched, "greedy"))
    if n_ramps > 0:
        sim.reset(seed)
        cumC = sim.pm.cum_for(grid.astype(float))
        T, _ = _equal_time(sim, sim.hw.astype(float), grid)
        with np.errstate(invalid="ignore"):
            est = np.ceil(cumC[:, -1] / grid) * T
        for m in np.argsort(est)[:n_ramps]:
            if math.isfinite(est[m]):
                t, sched = _safe_episode(sim, seed, grid, lim, 1, int(grid[m]), max_decisions)
                runs.append((t, sched, f"ramp to B={int(grid[m])}"))
    if beam > 0:
        t, sched = _beam_safe(sim, seed, grid, lim, beam, max_decisions)
        runs.append((t, sched, f"beam {beam}"))
    cs = run_causal_safe(sim, seed, max_decisions)
    runs.append((cs["time_to_target_s"] if cs["time_to_target_s"] is not None else math.inf, cs["schedule"], "causal_safe"))
    best_t, best_sched, found = min(runs, key=lambda r: r[0])
    sim.time, sim.reached = best_t, math.isfinite(best_t)
    return {"time_to_target_s": best_t if math.isfinite(best_t) else None, "schedule": best_sched,
            "decisions": len(best_sched), "found_by": found}


def run_hindsight(sim: ReplaySim, seed: int, n_constant: int = N_CONSTANT,
                  max_decisions: int = 200_000) -> dict[str, Any]:
    """Run the oracle on ``seed``: the greedy schedule and the ``n_constant`` most promising
    constant global batches (each with the equal-time split of every interval); the fastest wins.
    Returns time to target (None if not reached), its schedule and which search found it."""
    sim.reset(seed)
    cands = candidate_batches(sim)
    cumC = sim.pm.cum_for(cands.astype(float))
    best_t, best_sched = _episode(sim, seed, cands, cumC, N_EXACT, max_decisions)
    found = "greedy"
    if n_constant > 0:
        # constant batches ranked by their time to target at the start's speeds
        sim.reset(seed)
        T, _ = _equal_time(sim, sim.hw.astype(float), cands)
        with np.errstate(invalid="ignore"):
            est = np.ceil(cumC[:, -1] / cands) * T
        for m in np.argsort(est)[:n_constant]:
            if not math.isfinite(est[m]):
                continue
            t, sched = _episode(sim, seed, cands[m:m + 1], cumC[m:m + 1], 1, max_decisions)
            if t < best_t:
                best_t, best_sched, found = t, sched, f"constant B={int(cands[m])}"
    # leave the simulator in the state of the winning schedule's end (time, reached)
    sim.time, sim.reached = best_t, math.isfinite(best_t)
    return {"time_to_target_s": best_t if math.isfinite(best_t) else None, "schedule": best_sched,
            "decisions": len(best_sched), "found_by": found}
