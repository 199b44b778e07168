"""The emulated device: compute padding, memory limit, timed events, latency model, clock."""
from __future__ import annotations

import pytest

from dynamix_hvd.emulate.device import EmulatedDevice, EmulatedOOM, TrainingClock, ring_latency_s
from dynamix_hvd.emulate.scenario import parse_scenario
from dynamix_hvd.errors import OutOfMemoryError

SC = parse_scenario("""
name = "d"
workload = "mnist1d_mlp"
target_accuracy = 0.5
max_time_s = 10
base_batch = 8
seed = 0
[[workers]]
fixed_ms = 2
per_sample_ms = 1
max_batch = 32
latency_ms = 1
[[workers]]
fixed_ms = 2
per_sample_ms = 3
latency_ms = 2
[[events]]
at_s = 5
rank = 0
per_sample_ms = 4
[[events]]
at_s = 7
rank = 1
bandwidth_mbit = 10
""")


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeLink:
    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []

    def shape(self, bw: float, lat: float) -> None:
        self.calls.append((bw, lat))


def make(rank: int = 0, link: object = None, emulate_latency: bool = True):
    slept: list[float] = []
    clock = FakeClock()
    dev = EmulatedDevice(SC, rank, clock=clock, link=link, emulate_latency=emulate_latency, sleep=slept.append)
    return dev, clock, slept


def test_padding_reaches_the_model_time() -> None:
    dev, _, slept = make()
    dev.before_backward(10, elapsed_s=0.004)
    assert slept == [pytest.approx((2 + 10) / 1000 - 0.004)]
    dev.before_backward(10, elapsed_s=0.5)   # already slower than the model: no sleep
    assert len(slept) == 1


def test_oom_above_max_batch() -> None:
    dev, _, _ = make()
    dev.before_backward(32, 0.0)
    with pytest.raises(EmulatedOOM) as exc:
        dev.before_backward(33, 0.0)
    assert isinstance(exc.value, OutOfMemoryError)
    assert exc.value.rank == 0 and exc.value.batch_size == 33 and exc.value.max_batch == 32


def test_events_apply_on_the_training_clock() -> None:
    link = FakeLink()
    dev, clock, slept = make(rank=1, link=link)
    clock.t = 4.9
    dev.before_backward(10, 0.0)
    assert dev.workers[0].per_sample_ms == 1 and not dev.applied
    clock.t = 5.0
    dev.before_backward(10, 0.0)
    assert dev.workers[0].per_sample_ms == 4           # another rank's change is tracked (oracle)
    assert dev.true_speeds() == [250.0, pytest.approx(1000 / 3)]
    assert link.calls == []                            # not this rank's link
    clock.t = 8.0
    dev.poll_events()
    assert link.calls == [(10.0, 2.0)]                 # own link re-shaped once
    assert [e.at_s for _, e in dev.applied] == [5.0, 7.0]
    dev.poll_events()
    assert len(link.calls) == 1


def test_compute_event_changes_padding() -> None:
    dev, clock, slept = make(rank=0)
    clock.t = 6.0
    dev.before_backward(10, 0.0)
    assert slept[-1] == pytest.approx((2 + 4 * 10) / 1000)


def test_ring_latency_model() -> None:
    assert ring_latency_s([1.0]) == 0.0
    assert ring_latency_s([1.0, 2.0]) == pytest.approx(2 * 1 * 3.0 / 1000)
    assert ring_latency_s([1, 1, 1, 5]) == pytest.approx(2 * 3 * 6 / 1000)
    dev, _, slept = make()
    dev.after_step()
    assert slept == [pytest.approx(0.006)]
    dev2, _, slept2 = make(emulate_latency=False)
    dev2.after_step()
    assert slept2 == []


def test_training_clock_pauses() -> None:
    now = [0.0]
    c = TrainingClock(now=lambda: now[0])
    now[0] = 2.0
    c.pause()
    now[0] = 5.0
    assert c() == 2.0
    c.resume()
    now[0] = 6.0
    assert c() == pytest.approx(3.0)
    c.restart()
    assert c() == 0.0


def test_rank_out_of_range() -> None:
    with pytest.raises(ValueError):
        EmulatedDevice(SC, 2)
