from dynamix_hvd.safety import ControllerErrors, GoodputGuard


def test_guard_fires_after_two_bad_intervals():
    g = GoodputGuard(drop=0.1, patience=2)
    assert not g.observe(100.0, False)
    assert not g.observe(101.0, False)
    assert not g.observe(85.0, True)      # one bad interval
    assert g.observe(80.0, True)          # second in a row: fire


def test_guard_recovers_and_ignores_missing():
    g = GoodputGuard(drop=0.1, patience=2)
    g.observe(100.0, False)
    g.observe(80.0, True)
    assert not g.observe(99.0, False)     # back to normal resets the count
    assert not g.observe(float("nan"), True)
    assert not g.observe(80.0, True)


def test_controller_errors():
    e = ControllerErrors(max_errors=2)
    assert not e.failed()
    e.ok()
    assert not e.failed()
    assert e.failed()
