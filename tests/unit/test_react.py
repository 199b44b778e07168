"""The rank-local change detector behind early decisions (dynamix_hvd.react)."""
from __future__ import annotations

import numpy as np
import pytest

from dynamix_hvd.react import ChangeDetector


def _feed(det, key, compute, step):
    return [det.add(key, c, s) for c, s in zip(compute, step)]


def test_a_sustained_slowdown_fires_once_after_three_steps():
    rng = np.random.default_rng(0)
    c = list(0.035 * (1 + 0.05 * rng.random(12))) + [0.131] * 10
    out = _feed(ChangeDetector(), 1, c, [x + 0.01 for x in c])
    fired = [i for i, ch in enumerate(out) if ch is not None]
    assert fired == [14]                      # the third slow step, and only once
    ch = out[14]
    assert ch.compute and ch.step and ch.steps_since == 3


def test_a_step_time_change_alone_is_not_a_compute_change():
    # another rank slowed down: this rank waits longer at the allreduce, its compute is the same
    out = _feed(ChangeDetector(), 1, [0.03] * 20, [0.04] * 10 + [0.09] * 10)
    ch = [x for x in out if x is not None]
    assert len(ch) == 1 and ch[0].step and not ch[0].compute


def test_a_speedup_fires_with_the_mirrored_threshold():
    # 1/(1 + tol): with tol = 0.5 a 1.6x speed-up (t x 0.625) counts, a 1.4x one (t x 0.71) does not
    assert any(_feed(ChangeDetector(), 1, [0.1] * 8 + [0.0625] * 3, [0.2] * 11))
    assert not any(_feed(ChangeDetector(), 1, [0.1] * 8 + [0.071] * 5, [0.2] * 13))


@pytest.mark.parametrize("tail", [[0.2, 0.03, 0.2, 0.2], [0.2, 0.2, 0.03, 0.2, 0.2], [0.2, 0.2]])
def test_spikes_and_short_bursts_do_not_fire(tail):
    assert not any(_feed(ChangeDetector(), 1, [0.03] * 10 + tail, [0.05] * (10 + len(tail))))


def test_a_new_plan_resets_the_reference():
    det = ChangeDetector()
    _feed(det, 1, [0.03] * 10, [0.05] * 10)
    # the plan changed (key 2): times move on purpose; too few steps under it to judge anything
    assert not any(_feed(det, 2, [0.09] * 7, [0.15] * 7))
    assert det.add(2, 0.3, 0.4) is None       # 8th step under plan 2: the reference is 0.09, one step
    assert not any(_feed(det, 2, [0.09] * 3, [0.15] * 3))


def test_bad_timings_are_skipped_and_bad_settings_named():
    det = ChangeDetector()
    assert det.add(1, float("nan"), 0.1) is None and det.add(1, 0.0, 0.1) is None
    for kw, word in [({"tol": 0}, "tol"), ({"confirm": 0}, "confirm"), ({"window": 4}, "window")]:
        with pytest.raises(ValueError, match=word):
            ChangeDetector(**kw)
