"""Honest accuracy figures for ``dynamix bench`` (issue 24).

One evaluation of the small emulated workloads moves by 1-2 points, so a run's final accuracy
is the **mean of its last ``LAST_K`` evaluations**, and "time to target" is reported at several
targets, as fractions of the scenario's **plateau** (the static controller's median final
accuracy; without a static run, the best controller's), from early in training to near the
plateau. A run reaches a target at its first evaluation at or above it (training clock).
Pure functions over the runs' ``evals.jsonl`` records (``runlog.read_evals``).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from dynamix_hvd.runlog import DecisionRecord, EvalRecord

LAST_K = 5
TAIL_SHARE = 0.10
FRACTIONS = (0.80, 0.85, 0.90, 0.95)


def final_accuracy(evals: Sequence[EvalRecord], k: int = LAST_K) -> float:
    """Mean accuracy of the last ``k`` evaluations (NaN without any)."""
    accs = [float(e.acc) for e in evals]
    return float(np.mean(accs[-k:])) if accs else float("nan")


def tail_accuracy(evals: Sequence[EvalRecord], share: float = TAIL_SHARE, k: int = LAST_K) -> float:
    """Mean accuracy of the evaluations in the last ``share`` of the run's training clock (at least
    the last ``k``; NaN without any).

    With an evaluation every few steps the last five cover a second or so of a 75 s run, and where
    to cut lands on a different point of the same trajectory for two controllers: live
    (heldout_bn5, session 22) proportional and PPO ran the same plan, seed and trajectory, two
    evaluations apart at the budget's end, and their mean of the last five was 0.958 and 0.965
    (one dip to 0.93 inside the window or not). This window averages over the dips."""
    if not evals:
        return float("nan")
    t_end = float(evals[-1].t)
    start = (1.0 - share) * t_end
    tail = [float(e.acc) for e in evals if float(e.t) >= start]
    if len(tail) < k:
        tail = [float(e.acc) for e in evals[-k:]]
    return float(np.mean(tail))


def time_to(evals: Sequence[EvalRecord], target: float) -> float | None:
    """Training-clock time of the first evaluation at or above ``target``; None if never."""
    for e in evals:
        if float(e.acc) >= target:
            return float(e.t)
    return None


def plateau(final_by_controller: Mapping[str, Sequence[float]]) -> float:
    """The static controller's median final accuracy, else the best controller's."""
    if final_by_controller.get("static"):
        return float(np.median(final_by_controller["static"]))
    meds = [float(np.median(v)) for v in final_by_controller.values() if len(v)]
    return max(meds) if meds else float("nan")


def median_or_none(times: Iterable[float | None]) -> float | None:
    """Median of the runs that reached; None when most did not (as ``bench.combine``)."""
    ts = list(times)
    reached = [t for t in ts if t is not None]
    return float(np.median(reached)) if ts and 2 * len(reached) > len(ts) else None


def targets_table(evals_by_controller: Mapping[str, Sequence[Sequence[EvalRecord]]],
                  fractions: Sequence[float] = FRACTIONS) -> dict[str, Any]:
    """``{"plateau", "targets": [acc...], "fractions", "controllers": {NAME: {"final_accuracy_mean5",
    "final_accuracy_runs", "final_accuracy_tail" (``tail_accuracy``, median over runs), "final_accuracy_tail_runs",
    "time_to_target_s": [median per target], "runs": [[t per target] per run]}}}``."""
    finals = {n: [final_accuracy(ev) for ev in runs if ev] for n, runs in evals_by_controller.items()}
    tails = {n: [tail_accuracy(ev) for ev in runs if ev] for n, runs in evals_by_controller.items()}
    top = plateau(finals)
    targets = [round(f * top, 4) for f in fractions]
    out: dict[str, Any] = {"plateau": top, "fractions": list(fractions), "targets": targets, "last_k": LAST_K,
                           "controllers": {}}
    for name, runs in evals_by_controller.items():
        per_run = [[time_to(ev, t) for t in targets] for ev in runs if ev]
        out["controllers"][name] = {
            "final_accuracy_mean5": float(np.median(finals[name])) if finals[name] else float("nan"),
            "final_accuracy_runs": finals[name],
            "final_accuracy_tail": float(np.median(tails[name])) if tails[name] else float("nan"),
            "final_accuracy_tail_runs": tails[name],
            "time_to_target_s": [median_or_none(r[j] for r in per_run) for j in range(len(targets))],
            "runs": per_run,
        }
    return out


BASELINES = ("static", "proportional")


def baseline_times(tab: Mapping[str, Any], baselines: Sequence[str] = BASELINES) -> list[float | None]:
    """Per target of ``targets_table``: the better (smaller) median time of static and proportional,
    or None when neither reached it: what "(x)" ratios are taken against."""
    ctl = tab["controllers"]
    base: list[float | None] = []
    for j in range(len(tab["targets"])):
        cands = [ctl[n]["time_to_target_s"][j] for n in baselines if n in ctl]
        cands = [c for c in cands if c is not None]
        base.append(min(cands) if cands else None)
    return base


def paired_ratios(tab: Mapping[str, Any], name: str, baselines: Sequence[str] = BASELINES) -> list[float | None]:
    """Per target of ``targets_table``: the median over repeats of ``name``'s time divided by the
    better of static's and proportional's time *in the same repeat* (``dynamix bench`` runs every
    controller of a repeat on the same seed, so the seed's own speed cancels). Repeats where a
    run did not reach the target are left out; None when fewer than half of them remain.
    ``baselines``: the controllers to take the better of (an A/A twin may stand in for one)."""
    ctl = tab["controllers"]
    mine = ctl[name]["runs"]
    bases = [ctl[n]["runs"] for n in baselines if n in ctl]
    out: list[float | None] = []
    for j in range(len(tab["targets"])):
        ratios = []
        for r, row in enumerate(mine):
            b = [runs[r][j] for runs in bases if r < len(runs) and runs[r][j] is not None]
            if row[j] is not None and b and min(b) > 0:
                ratios.append(row[j] / min(b))
        out.append(float(np.median(ratios)) if ratios and 2 * len(ratios) >= len(mine) else None)
    return out


def format_targets(tab: Mapping[str, Any]) -> str:
    """Plain-text table: time to each target (x the better of static and proportional), final accuracy."""
    ctl = tab["controllers"]
    head = ["controller"] + [f"{f:.0%} ({t:.3f})" for f, t in zip(tab["fractions"], tab["targets"])] + ["final (mean5)", f"last {TAIL_SHARE:.0%}"]
    rows = [head]
    base = baseline_times(tab)
    for name, m in ctl.items():
        cells = [name]
        for j, t in enumerate(m["time_to_target_s"]):
            if t is None:
                cells.append("not reached")
            else:
                cells.append(f"{t:.1f} s" + (f" ({t / base[j]:.2f}x)" if base[j] else ""))
        cells.append(f"{m['final_accuracy_mean5']:.3f}")
        cells.append(f"{m.get('final_accuracy_tail', float('nan')):.3f}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return (f"time to a fraction of the plateau {tab['plateau']:.3f} (static's median final accuracy, mean of the "
            f"last {tab['last_k']} evaluations); (x) = vs the better of static and proportional; last "
            f"{TAIL_SHARE:.0%}: mean of the evaluations in the last {TAIL_SHARE:.0%} of the training clock\n" + "\n".join(lines))


def same_plan_time_ratio(a: Sequence[EvalRecord], b: Sequence[EvalRecord]) -> tuple[float, int]:
    """(run a's training-clock time / run b's, number of intervals) over the evaluation intervals
    (consecutive evaluations at the same steps in both runs) where both ran the same plan at both
    ends; (NaN, 0) without any.

    A step's time depends on the plan and the host, not on the model's trajectory, so on these
    intervals the ratio is the host's speed in run a against run b: the bench's timing noise
    between two runs, measured inside the runs. Live, session 25: PPO and proportional ran the same
    plans for 20-101 intervals per run and the ratio was 0.96-1.04 (15 pairs, five scenarios)."""
    tb = {e.step: (float(e.t), list(e.plan)) for e in b}
    ta, tt, n = 0.0, 0.0, 0
    for e0, e1 in zip(a, a[1:]):
        b0, b1 = tb.get(e0.step), tb.get(e1.step)
        if b0 is None or b1 is None or list(e0.plan) != b0[1] or list(e1.plan) != b1[1]:
            continue
        ta += float(e1.t) - float(e0.t)
        tt += b1[0] - b0[0]
        n += 1
    return (ta / tt, n) if n and tt > 0 else (float("nan"), 0)


def late_plan_changes(decisions: Sequence[DecisionRecord], after_s: float = 10.0) -> tuple[int, float]:
    """(plan changes after ``after_s`` seconds of the run, and the span they were counted over in
    s) from a run's decision records (``runlog.read_decisions``; ``t``: seconds since the hook started)."""
    late = [e for e in decisions if e.t >= after_s]
    changes = sum(1 for e in late if e.plan_changed)
    span = (late[-1].t - after_s) if late else 0.0
    return changes, span
