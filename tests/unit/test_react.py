"""The rank-local change detector behind early decisions (dynamix_hvd.react)."""
from __future__ import annotations

import numpy as np
import pytest

from dynamix_hvd.react import ChangeDetector


def _feed(det, key, compute, step):
    b, B = (key, 4 * key) if not isinstance(key, tuple) else key
    return [det.add(b, B, c, s) for c, s in zip(compute, step)]


def test_a_sustained_slowdown_fires_once_after_three_steps():
    rng = np.random.default_rng(0)
    c = list(0.035 * (1 + 0.05 * rng.random(30))) + [0.131] * 10
    out = _feed(ChangeDetector(), 16, c, [x + 0.01 for x in c])
    fired = [i for i, ch in enumerate(out) if ch is not None]
    assert fired == [32]                      # the third slow step, and only once
    ch = out[32]
    assert ch.compute and ch.step and ch.steps_since == 3


def test_a_short_reference_needs_a_longer_run():
    """Right after a (re)base the reference holds a few steps: it is not trusted to be steady
    (Laplace-smoothed outlier share >= 1/(m + 2)), so 9 reference steps need a run of 4."""
    out = _feed(ChangeDetector(), 16, [0.03] * 12 + [0.12] * 5, [0.04] * 12 + [0.13] * 5)
    assert [i for i, ch in enumerate(out) if ch is not None] == [15]


def test_a_step_time_change_alone_is_not_a_compute_change():
    # another rank slowed down: this rank waits longer at the allreduce, its compute is the same
    out = _feed(ChangeDetector(), 16, [0.03] * 20, [0.04] * 10 + [0.09] * 10)
    ch = [x for x in out if x is not None]
    assert len(ch) == 1 and ch[0].step and not ch[0].compute


def test_a_speedup_fires_with_the_mirrored_threshold():
    # 1/(1 + tol): with tol = 0.5 a 1.6x speed-up (t x 0.625) counts, a 1.4x one (t x 0.71) does not
    assert any(_feed(ChangeDetector(), 16, [0.1] * 30 + [0.0625] * 3, [0.2] * 33))
    assert not any(_feed(ChangeDetector(), 16, [0.1] * 30 + [0.071] * 5, [0.2] * 35))


@pytest.mark.parametrize("tail", [[0.2, 0.03, 0.2, 0.2], [0.2, 0.2, 0.03, 0.2, 0.2], [0.2, 0.2]])
def test_spikes_and_short_bursts_do_not_fire(tail):
    assert not any(_feed(ChangeDetector(), 16, [0.03] * 10 + tail, [0.05] * (10 + len(tail))))


def test_a_new_plan_resets_the_reference():
    det = ChangeDetector()
    _feed(det, (16, 64), [0.03] * 10, [0.05] * 10)
    # this rank's batch tripled: times move on purpose; too few steps under it to judge anything
    assert not any(_feed(det, (48, 96), [0.09] * 7, [0.15] * 7))
    assert det.add(48, 96, 0.3, 0.4) is None   # 8th step under the new plan: one step over the reference
    assert not any(_feed(det, (48, 96), [0.09] * 3, [0.15] * 3))
    # so does a global batch 20% larger with this rank's unchanged (the others' shares grew)
    assert not any(_feed(det, (48, 116), [0.09] * 7, [0.3] * 7))


def test_a_small_plan_change_keeps_the_reference():
    # a controller moved this rank from 22 to 21 samples and B from 64 to 65 one step before the
    # link slowed down (live, link_degrade): the slowdown must still be seen
    det = ChangeDetector()
    _feed(det, (22, 64), [0.028] * 30, [0.039] * 30)
    out = _feed(det, (21, 65), [0.028] * 3, [0.085] * 3)
    assert out[-1] is not None and out[-1].step and not out[-1].compute


def test_rebase_consumes_a_change_another_rank_confirmed():
    det = ChangeDetector()
    _feed(det, 16, [0.03] * 10, [0.04] * 10)
    assert not any(_feed(det, 16, [0.03] * 2, [0.1] * 2))   # two slow steps: not yet confirmed here
    det.rebase()                                           # another rank's flag: a decision happened
    assert not any(_feed(det, 16, [0.03] * 20, [0.1] * 20))


def test_bad_timings_are_skipped_and_bad_settings_named():
    det = ChangeDetector()
    assert det.add(16, 64, float("nan"), 0.1) is None and det.add(16, 64, 0.0, 0.1) is None
    for kw, word in [({"tol": 0}, "tol"), ({"confirm": 0}, "confirm"), ({"window": 4}, "window"),
                     ({"plan_tol": -1}, "plan_tol")]:
        with pytest.raises(ValueError, match=word):
            ChangeDetector(**kw)


def _naive_moved(xs, confirm, reference, tol, window):
    """The definition, written plainly: the run of latest values beyond ``tol`` of the median of
    the ones before the last ``confirm``, in the same direction, when it is at least ``confirm``
    long and at least ``log(1e-4) / log(p)`` long (p: the Laplace-smoothed fraction of the other
    reference values beyond the band; at most window // 2); else 0."""
    import math
    import statistics
    if len(xs) < confirm + reference:
        return 0
    ref = xs[:-confirm]
    med = statistics.median(ref)
    up = [x > med * (1 + tol) for x in xs]
    down = [x < med / (1 + tol) for x in xs]
    for beyond in (up, down):
        run = 0
        for b in reversed(beyond):
            if not b:
                break
            run += 1
        if run >= confirm:
            others = ref[:len(ref) - (run - confirm)]
            out = sum(1 for x in others if x > med * (1 + tol) or x < med / (1 + tol))
            p = (out + 1) / (len(others) + 2)
            need = max(confirm, min(math.ceil(math.log(1e-4) / math.log(p)), window // 2))
            return run if run >= need else 0
    return 0


def test_incremental_detector_matches_the_definition():
    """The sorted sliding reference gives exactly the plain definition's answers, step by step,
    over random series with level shifts, plan changes and rebases."""
    import numpy as np
    rng = np.random.default_rng(0)
    for trial in range(40):
        tol, confirm, reference, window = [(0.5, 3, 5, 32), (0.2, 2, 3, 8), (0.1, 4, 6, 12)][trial % 3]
        det = ChangeDetector(tol=tol, confirm=confirm, reference=reference, window=window)
        hist_c: list[float] = []
        hist_s: list[float] = []
        sizes = None
        level = 1.0
        for t in range(300):
            if rng.random() < 0.03:
                level *= float(rng.choice([0.3, 0.6, 1.7, 3.0]))
            b = 32.0 if rng.random() > 0.02 else float(rng.choice([20, 33, 64]))
            c = level * float(rng.lognormal(0, 0.15))
            s = c * 1.2 + float(rng.lognormal(-3, 0.5))
            if sizes is None or abs(b - sizes) > 0.1 * sizes:
                hist_c, hist_s, sizes = [], [], b
            hist_c.append(c)
            hist_s.append(s)
            del hist_c[:-window], hist_s[:-window]
            mc = _naive_moved(hist_c, confirm, reference, tol, window)
            ms = _naive_moved(hist_s, confirm, reference, tol, window)
            got = det.add(b, 128.0, c, s)
            assert (got is not None) == bool(mc or ms), (trial, t)
            if got is not None:
                assert (got.compute, got.step, got.steps_since) == (bool(mc), bool(ms), max(mc, ms))
                del hist_c[:-got.steps_since], hist_s[:-got.steps_since]
            elif rng.random() < 0.02:
                det.rebase()
                del hist_c[:-confirm], hist_s[:-confirm]


def test_noisy_steps_need_a_longer_run_but_a_quiet_series_reacts_as_before():
    """Issue 25: on a loaded machine, 3-step bursts 2x slower every ~10 steps took an early
    decision each time. The run needed grows with the share of such outliers in the reference;
    a steady series still confirms after ``confirm`` steps."""
    det = ChangeDetector(tol=0.5, confirm=3, reference=5, window=32)
    fired = 0
    for t in range(600):                                  # bursts of 3 every 10 steps, no change
        c = 0.01 * (2.0 if t % 10 in (7, 8, 9) else 1.0)
        fired += det.add(32, 128, c, c * 1.1) is not None
    assert fired <= 2, fired
    det = ChangeDetector(tol=0.5, confirm=3, reference=5, window=32)
    for t in range(20):
        assert det.add(32, 128, 0.01, 0.011) is None
    got = [det.add(32, 128, 0.04, 0.044) for _ in range(3)]
    assert got[:2] == [None, None] and got[2] is not None and got[2].compute and got[2].steps_since == 3
    det = ChangeDetector(tol=0.5, confirm=3, reference=5, window=32)
    for t in range(45):                                   # noisy, then a real 4x slowdown
        c = 0.01 * (2.0 if t % 10 in (7, 8, 9) else 1.0)
        det.add(32, 128, c, c * 1.1)
    got = [det.add(32, 128, 0.04, 0.044) for _ in range(16)]
    first = next(i for i, g in enumerate(got) if g is not None)
    assert 3 <= first + 1 <= 16 and got[first].steps_since == first + 1, first


def test_a_change_must_last_min_run_s_however_short_the_steps():
    """Issue 25, session 20: on ~2 ms steps the step time jumps to ~3.8 ms for 3-5 steps at a
    time on this machine; each burst took an early decision. With ``min_run_s`` (the hook: a
    tenth of ``min_decision_s``) a change must last that long; long steps are not affected."""
    rng = np.random.default_rng(1)

    def bursts(det):
        fired = 0
        for t in range(2000):
            s = 0.0038 if t % 40 in (20, 21, 22, 23) else 0.002 * (1 + 0.05 * rng.random())
            fired += det.add(32, 128, 0.001, s) is not None
        return fired
    assert bursts(ChangeDetector(min_run_s=0.0)) > 10           # the old rule: every burst
    assert bursts(ChangeDetector(min_run_s=0.05)) == 0
    det = ChangeDetector(min_run_s=0.05)                         # a lasting 2 -> 4 ms change
    for _ in range(30):
        det.add(32, 128, 0.001, 0.002)
    got = [det.add(32, 128, 0.001, 0.004) for _ in range(16)]
    first = next(i for i, g in enumerate(got) if g is not None)
    assert first + 1 == 13 and got[first].step and not got[first].compute   # 13 x 4 ms >= 50 ms
    det = ChangeDetector(min_run_s=0.05)                         # scenario-length steps: 3 steps
    out = _feed(det, 16, [0.035] * 30 + [0.131] * 4, [0.045] * 30 + [0.141] * 4)
    assert [i for i, ch in enumerate(out) if ch is not None] == [32]
    with pytest.raises(ValueError, match="min_run_s"):
        ChangeDetector(min_run_s=-1)
