"""The one performance model (perfmodel.py) and its users agree."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dynamix_hvd import perfmodel
from dynamix_hvd.emulate.device import ring_latency_s
from dynamix_hvd.stats import statistical_efficiency


def test_efficiency_is_pollux_and_one_without_a_noise_scale():
    assert perfmodel.efficiency(64, 64, 100.0) == 1.0
    assert perfmodel.efficiency(256, 64, 100.0) == pytest.approx(164 / 356)
    assert perfmodel.efficiency(256, 64, math.nan) == 1.0 and perfmodel.efficiency(256, 64, -3.0) == 1.0
    assert statistical_efficiency(256, 64, 100.0) == perfmodel.efficiency(256, 64, 100.0)
    assert np.allclose(perfmodel.efficiency_array(np.array([64.0, 256.0]), 64, 100.0), [1.0, 164 / 356])


def test_step_time_overlaps_communication_with_compute_but_never_all_of_it():
    assert perfmodel.step_time(0.1, 0.04, 0.5) == pytest.approx(0.1 + 0.002)   # 5% stays exposed
    assert perfmodel.step_time(0.01, 0.04, 0.5) == pytest.approx(0.01 + 0.035)
    assert perfmodel.step_time(0.01, 0.04, 0.0, overhead_s=0.003) == pytest.approx(0.053)


def test_ring_allreduce_bandwidth_and_latency_terms():
    # 4 ranks, 1 MB, slowest link 1e6 B/s: 2*3/4 * 1e6 / 1e6 = 1.5 s; hop latency 1 ms + 3 ms
    t = perfmodel.ring_allreduce_s(1e6, [1e7, 1e6, 1e7, 1e7], [0.001, 0.001, 0.003, 0.001])
    assert t == pytest.approx(1.5 + 6 * 0.004)
    assert perfmodel.ring_allreduce_s(1e6, [1e6], [0.001]) == 0.0


def test_emulator_latency_is_the_same_ring_model():
    lat_ms = [0.05, 5.0, 0.05, 0.05]
    assert ring_latency_s(lat_ms) == pytest.approx(perfmodel.ring_allreduce_s(0.0, [1.0] * 4, [x / 1e3 for x in lat_ms]))
    assert ring_latency_s(lat_ms) == pytest.approx(6 * 5.05e-3)


def test_fit_overlap_is_the_negative_slope_once_the_batches_span_enough():
    c = np.array([0.032, 0.064, 0.048])
    assert perfmodel.fit_overlap(c, 0.09 - 0.5 * c, [128, 256, 192]) == pytest.approx(0.5)
    assert perfmodel.fit_overlap(c, 0.01 + 0.2 * c, [128, 256, 192]) == 0.0          # clipped at 0
    assert perfmodel.fit_overlap(c, 0.2 - 3.0 * c, [128, 256, 192]) == 1.0           # ... and at 1
    assert perfmodel.fit_overlap(c, 0.09 - 0.5 * c, [128, 150, 140]) is None        # span < 20%
    assert perfmodel.fit_overlap([0.032], [0.06], [128]) is None
    assert perfmodel.fit_overlap([0.05, 0.05], [0.06, 0.03], [128, 256]) is None    # compute alike
    assert perfmodel.fit_overlap([0.032, np.nan, 0.064], [0.06, 0.0, 0.03], [128, 512, 256]) == pytest.approx(30 / 32)
