"""Honest bench accuracy figures (emulate/targets.py)."""
from __future__ import annotations

import pytest

from dynamix_hvd.emulate.targets import (final_accuracy, late_plan_changes, paired_ratios, same_plan_time_ratio,
                                         tail_accuracy, targets_table,
                                         time_to)
from dynamix_hvd.plan import Plan
from dynamix_hvd.records import GlobalStats
from dynamix_hvd.runlog import DecisionRecord, EvalRecord


def _evals(accs, dt=1.0):
    return [EvalRecord(t=dt * (i + 1), step=i + 1, acc=a, samples=0, wall=0.0, plan=[]) for i, a in enumerate(accs)]


def test_final_accuracy_is_the_mean_of_the_last_five():
    assert final_accuracy(_evals([0.1, 0.5, 0.9, 0.8, 0.9, 1.0, 0.9])) == pytest.approx((0.9 + 0.8 + 0.9 + 1.0 + 0.9) / 5)
    assert final_accuracy(_evals([0.4, 0.6])) == pytest.approx(0.5)


def test_tail_accuracy_averages_the_last_tenth_of_the_clock_and_at_least_five():
    # 100 evaluations 1 s apart: the last 10% of the clock is t >= 90, i.e. evaluations 90..100
    accs = [0.5] * 80 + [0.9] * 20
    accs[-2] = 0.2                          # one dip inside the window
    assert tail_accuracy(_evals(accs)) == pytest.approx((0.9 * 10 + 0.2) / 11)
    # the same trajectory cut three evaluations earlier (before the dip): the mean of the last
    # five moves by 0.14, the tail by a dip's 1/11
    a, b = _evals(accs), _evals(accs[:-3])
    assert abs(final_accuracy(a) - final_accuracy(b)) > 2 * abs(tail_accuracy(a) - tail_accuracy(b)) > 0
    # a short run: at least the last five
    assert tail_accuracy(_evals([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])) == pytest.approx(0.4)
    assert tail_accuracy([]) != tail_accuracy([])        # NaN
    tab = targets_table({"static": [_evals(accs)]})
    assert tab["controllers"]["static"]["final_accuracy_tail"] == pytest.approx(tail_accuracy(_evals(accs)))


def test_time_to_is_the_first_evaluation_at_or_above():
    ev = _evals([0.5, 0.79, 0.8, 0.7, 0.9])
    assert time_to(ev, 0.8) == 3.0 and time_to(ev, 0.95) is None


def test_targets_are_fractions_of_static_plateau_and_medians_need_a_majority():
    static = [_evals([0.5, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9])] * 3
    fast = [_evals([0.85, 0.9, 0.9, 0.9, 0.9, 0.9]), _evals([0.85, 0.9, 0.9, 0.9, 0.9, 0.9]), _evals([0.1] * 6)]
    tab = targets_table({"static": static, "fast": fast}, fractions=(0.8, 1.0))
    assert tab["plateau"] == pytest.approx(0.9) and tab["targets"] == [0.72, 0.9]
    assert tab["controllers"]["static"]["time_to_target_s"] == [2.0, 3.0]
    assert tab["controllers"]["fast"]["time_to_target_s"] == [1.0, 2.0]      # 2 of 3 runs reached
    slow = [_evals([0.1] * 6)] * 2 + [_evals([0.9] * 6)]
    assert targets_table({"static": static, "slow": slow})["controllers"]["slow"]["time_to_target_s"][0] is None


def test_paired_ratios_divide_by_the_better_baseline_of_the_same_repeat():
    # repeat 0 is a slow seed for everyone, repeat 1 a fast one: unpaired medians mix them
    static = [_evals([0.0] * 5 + [0.9] * 5), _evals([0.0, 0.9] + [0.9] * 8), _evals([0.0] * 3 + [0.9] * 7)]
    prop = [_evals([0.0] * 3 + [0.9] * 7), _evals([0.9] * 10), _evals([0.0] * 2 + [0.9] * 8)]
    ppo = [_evals([0.0] * 3 + [0.9] * 7), _evals([0.0, 0.9] + [0.9] * 8), _evals([0.0] * 2 + [0.9] * 8)]
    tab = targets_table({"static": static, "proportional": prop, "ppo": ppo}, fractions=(1.0,))
    # per repeat: 4/4, 2/1, 3/3 -> median 1.0; proportional against itself is 1.0
    assert paired_ratios(tab, "ppo") == [pytest.approx(1.0)]
    assert paired_ratios(tab, "proportional") == [pytest.approx(1.0)]
    assert paired_ratios(tab, "static") == [pytest.approx(1.5)]        # 6/4, 2/1, 4/3
    late = [_evals([0.0] * 10)] * 2 + [_evals([0.9] * 10)]
    tab = targets_table({"static": static, "proportional": prop, "late": late}, fractions=(1.0,))
    assert paired_ratios(tab, "late") == [None]                          # 1 of 3 repeats reached


def test_late_plan_changes_counts_changes_after_the_cut():
    ev = [DecisionRecord(step=i, t=t, controller="x", decide_ms=0.0, plan=[32, 32], proposed=nb,
                         next_plan=Plan(i, tuple(nb), i), glob=GlobalStats(), workers=[], goodput=0.0, reason=None)
          for i, (t, nb) in enumerate(((5, [40, 24]), (12, [32, 32]), (15, [32, 32]), (20, [30, 34]), (30, [30, 34])))]
    assert late_plan_changes(ev, 10.0) == (2, 20.0)


def test_same_plan_time_ratio_compares_only_intervals_with_the_same_plan_at_both_ends():
    def run(dts: list[float], plans: list[list[int]]) -> list[EvalRecord]:
        t, out = 0.0, []
        for k, (dt, pl) in enumerate(zip(dts, plans)):
            t += dt
            out.append(EvalRecord(t=t, step=10 * (k + 1), acc=0.5, samples=0, wall=t, plan=pl))
        return out

    even, moved = [8, 8], [12, 4]
    # b ran [12, 4] around its third evaluation; a stayed even. The intervals 10-20 and 40-50
    # have the same plan at both ends in both runs: a took 1.1 and 1.3 s, b 1.0 and 1.0 s
    a = run([1.0, 1.1, 5.0, 5.0, 1.3], [even, even, even, even, even])
    b = run([1.0, 1.0, 0.5, 0.5, 1.0], [even, even, moved, even, even])
    r, n = same_plan_time_ratio(a, b)
    assert n == 2 and r == pytest.approx(2.4 / 2.0)
    assert same_plan_time_ratio(a, a) == (pytest.approx(1.0), 4)
    r, n = same_plan_time_ratio(a, run([1.0] * 5, [moved] * 5))
    assert n == 0 and r != r
