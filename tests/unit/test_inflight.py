"""Rank 0's decide thread (inflight.py): where the controller runs, and that its faults reach the
training loop when the plan is due instead of vanishing in the thread."""
from __future__ import annotations

import threading
import time

import pytest

from dynamix_hvd.inflight import DecideThread, InFlight


def test_a_lagged_decision_runs_on_the_decide_thread_and_a_waiting_one_inline():
    t = DecideThread()
    name = lambda: threading.current_thread().name   # noqa: E731
    assert InFlight(3, 4, job=t.run(name, threaded=True)).proposal().startswith("dynamix-decide")
    assert InFlight(3, 3, job=t.run(name, threaded=False)).proposal() == threading.current_thread().name
    assert InFlight(3, 4).proposal() is None          # a rank other than 0 holds no job
    t.close()
    t.close()                                         # idempotent


@pytest.mark.parametrize("threaded", [True, False])
def test_a_fault_in_the_decision_is_raised_where_the_plan_is_due(threaded):
    t = DecideThread()

    def broken():
        raise KeyError("no such rank")

    fl = InFlight(0, 1, job=t.run(broken, threaded=threaded))
    fl.settle()                                       # waiting for it does not raise ...
    with pytest.raises(KeyError, match="no such rank"):
        fl.proposal()                                 # ... taking its plan does, in the caller's thread
    t.close()


def test_close_waits_for_the_decision_running():
    t = DecideThread()
    done = []
    t.run(lambda: time.sleep(0.2) or done.append(1), threaded=True)
    t.close()
    assert done == [1]
